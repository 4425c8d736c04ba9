"""Planned looks with the error spent across them (issue 28 part 2): the spending rule, the plan of looks, the loop that
stops at the first look that decides, and the verdict judged with the alpha of the look the window stopped at."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from hwregress.judge import stats
from hwregress.judge.compare import Measured, judge
from hwregress.judge.looks import look_alpha
from hwregress.judge.reach import reach
from hwregress.judge.tolerances import Tolerances
from hwregress.judge.window_verdict import look_decision, window_check
from hwregress.measure.timing import TimingPlan, in_work_units, measure
from hwregress.store.figures import LookFigures
from hwregress.store.verdicts import Verdict

IDENTITY = {"cpu_vendor": "AuthenticAMD", "cpu_brand": "AMD EPYC", "cpu_family": 25, "cpu_model": 17,
            "torch_threads": 2}
BASELINE = {"samples": [float(s) for s in np.linspace(195.0, 215.0, 30)], "history": [203.0, 207.0, 201.0],
            "identity": IDENTITY}


# -- the spending rule -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("looks", [1, 2, 5, 7])
def test_the_looks_share_alpha_evenly_and_spend_no_more_than_alpha(looks):
    spent = [look_alpha(number, looks, 0.01) for number in range(1, looks + 1)]
    assert spent == pytest.approx([0.01 / looks] * looks)
    assert sum(spent) == pytest.approx(0.01)


@pytest.mark.parametrize(("number", "looks", "alpha", "words"), [
    (0, 3, 0.01, "look 0 of 3"), (4, 3, 0.01, "look 4 of 3"), (1, 0, 0.01, "look 1 of 0"),
    (1, 3, 0.0, "alpha 0.0"), (1, 3, 1.0, "alpha 1.0")])
def test_a_look_outside_the_plan_or_a_bad_alpha_is_refused(number, looks, alpha, words):
    with pytest.raises(ValueError, match=words):
        look_alpha(number, looks, alpha)


# -- the plan of looks -----------------------------------------------------------------------------------------------

def test_the_looks_start_at_the_first_look_meet_the_confirmation_and_end_at_the_budget():
    plan = TimingPlan(rounds=10, first_look=10, budget_s=30.0, confirm_s=10.0)
    assert plan.look_rounds(0.1) == [10, 20, 50, 100, 200, 300]  # 100 rounds of 0.1 s: the confirmation


def test_by_default_a_judged_window_first_looks_after_5_rounds_while_a_recording_keeps_10():
    plan = TimingPlan()
    assert (plan.rounds, plan.judged_rounds) == (10, 5)
    assert plan.look_rounds(0.1) == [5, 10, 25, 50, 100, 200, 300]


def test_a_window_undecided_at_its_first_look_gets_a_recordings_rounds_at_its_second():
    assert TimingPlan(first_look=6).look_rounds(0.1)[:2] == [6, 12]
    assert TimingPlan(first_look=5, confirm_s=1.2).look_rounds(0.1)[:2] == [5, 12]  # 10 would leave out 12 to confirm


def test_the_first_look_never_comes_after_the_rounds_of_a_recording():
    plan = TimingPlan(rounds=4, first_look=5)
    assert plan.judged_rounds == 4 and plan.look_rounds(0.1)[0] == 4


def test_a_first_look_too_early_for_a_median_and_iqr_is_refused():
    with pytest.raises(ValueError, match=r"first look must come after >= 3 rounds.*got 2"):
        TimingPlan(first_look=2)


def test_without_a_confirmation_time_the_looks_double_from_the_planned_rounds():
    assert TimingPlan(first_look=10, budget_s=30.0, confirm_s=0.0).look_rounds(0.1) == [10, 20, 40, 80, 160, 300]


def test_a_last_look_too_close_to_the_one_before_replaces_it():
    assert TimingPlan(first_look=10, budget_s=22.0, confirm_s=10.0).look_rounds(0.1) == [10, 20, 50, 100, 220]


def test_rounds_longer_than_the_budget_leave_one_look_at_the_planned_rounds():
    assert TimingPlan(first_look=10, budget_s=30.0, confirm_s=10.0).look_rounds(5.0) == [10]


def test_a_budget_of_too_few_more_rounds_adds_no_look():
    assert TimingPlan(first_look=10, budget_s=1.4, confirm_s=10.0).look_rounds(0.1) == [10]


@settings(max_examples=200, deadline=None)
@given(rounds=st.integers(3, 60), first_look=st.integers(3, 60), budget_s=st.floats(0.01, 600.0),
       confirm_s=st.floats(0.0, 600.0), round_s=st.floats(1e-3, 10.0))
def test_the_looks_grow_by_at_least_half_from_the_first_look_to_the_budget(rounds, first_look, budget_s, confirm_s,
                                                                            round_s):
    plan = TimingPlan(rounds=rounds, first_look=first_look, budget_s=budget_s, confirm_s=confirm_s)
    looks = plan.look_rounds(round_s)
    rounds = min(first_look, rounds)
    assert looks[0] == rounds
    assert all(later >= 1.5 * earlier for earlier, later in itertools.pairwise(looks))
    budget_rounds = plan.budget_rounds(round_s)
    assert looks[-1] == (budget_rounds if budget_rounds >= 1.5 * rounds else rounds)
    confirm_rounds = plan.confirm_rounds(round_s)
    if rounds < confirm_rounds <= budget_rounds and confirm_rounds >= 1.5 * rounds:
        assert confirm_rounds in looks or looks[-1] == budget_rounds < 1.5 * confirm_rounds


# -- the loop ----------------------------------------------------------------------------------------------------------

class SteadyTimer:
    """Every step takes ``step_s`` seconds (the calibration step too)."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s

    def time_round(self, run_steps, steps: int) -> float:
        run_steps()
        return self.step_s * steps


class ScriptedLooks:
    """A check that says ``answers[i]`` at its i-th look (then the last answer) and remembers what it was shown."""

    def __init__(self, answers: list[Verdict | None]) -> None:
        self.answers = answers
        self.seen: list[tuple[int, int, int]] = []  # (samples, look, planned looks)

    def __call__(self, samples: list[float], look: int, looks: int) -> Verdict | None:
        self.seen.append((len(samples), look, looks))
        return self.answers[min(len(self.seen) - 1, len(self.answers) - 1)]


PLAN = TimingPlan(warmup_steps=1, rounds=10, first_look=5, min_round_s=0.1, budget_s=30.0, confirm_s=10.0)


def test_the_window_is_looked_at_only_at_its_planned_looks_and_stops_at_the_first_that_decides():
    check = ScriptedLooks([None, None, Verdict.PASS])
    timing = measure(lambda: None, SteadyTimer(0.1), PLAN, settled=check)
    assert check.seen == [(5, 1, 7), (10, 2, 7), (25, 3, 7)]  # not after every round
    assert len(timing.round_seconds) == 25
    assert timing.looks == LookFigures(planned=[5, 10, 25, 50, 100, 200, 300], rounds=[5, 10, 25], decision="pass")


def test_a_window_clear_at_its_first_look_stops_after_5_rounds_half_a_recording():
    timing = measure(lambda: None, SteadyTimer(0.1), PLAN, settled=ScriptedLooks([Verdict.PASS]))
    assert len(timing.round_seconds) == 5 and timing.extended_rounds == 0


def test_a_lean_to_a_regression_is_decided_only_once_the_window_lasted_the_confirmation_time():
    check = ScriptedLooks([Verdict.REGRESSION])
    timing = measure(lambda: None, SteadyTimer(0.1), PLAN, settled=check)
    assert [look for _, look, _ in check.seen] == [1, 2, 3, 4, 5]
    assert len(timing.round_seconds) == 100 and sum(timing.round_seconds) == pytest.approx(10.0)
    assert timing.looks is not None and timing.looks.decision == "regression"


def test_an_undecided_window_runs_to_its_last_look_and_says_so():
    timing = measure(lambda: None, SteadyTimer(0.1), PLAN, settled=ScriptedLooks([None]))
    assert len(timing.round_seconds) == 300
    assert timing.looks is not None and timing.looks.rounds == timing.looks.planned and timing.looks.decision is None


class SlowingTimer(SteadyTimer):
    """Steps take ``step_s`` until the calibration is done, then ``later_s``: the plan's looks assumed faster rounds."""

    def __init__(self, step_s: float, later_s: float) -> None:
        super().__init__(step_s)
        self.later_s, self.calls = later_s, 0

    def time_round(self, run_steps, steps: int) -> float:
        self.calls += 1
        run_steps()
        return (self.step_s if self.calls == 1 else self.later_s) * steps


def test_the_time_budget_cuts_a_look_short_and_that_look_is_the_last():
    check = ScriptedLooks([None])
    timing = measure(lambda: None, SlowingTimer(0.1, 0.35), PLAN, settled=check)
    assert 30.0 <= sum(timing.round_seconds) < 30.0 + 0.35
    assert timing.looks is not None and timing.looks.rounds == [5, 10, 25, 50, 86]  # look 5 planned at 100 rounds
    assert check.seen[-1] == (86, 5, 7)


def test_without_a_baseline_the_window_keeps_its_planned_rounds_and_no_looks():
    timing = measure(lambda: None, SteadyTimer(0.1), PLAN)
    assert len(timing.round_seconds) == 10 and timing.looks is None


# -- the decision at a look and the verdict after the window -----------------------------------------------------------

def _samples(level: float, count: int, spread: float = 0.01, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(level * (1 + spread * u)) for u in rng.uniform(-1, 1, count)]


def test_a_look_passes_a_window_whose_bound_clears_the_threshold():
    assert look_decision(_samples(205.0, 10), BASELINE, Tolerances(), True, 0.01 / 6) == Verdict.PASS


def _near_the_boundary(count: int) -> list[float]:
    """A window 2% above the boundary ``1 - threshold`` (threshold 15%: the CPU's tolerance), 5% spread: neither a
    regression nor clearly clear of one."""
    threshold = stats.compare(_samples(180.0, count), BASELINE["samples"], 0.15, history=BASELINE["history"]).threshold
    assert threshold == pytest.approx(0.15)
    return _samples(205.0 * (1 - threshold + 0.02), count, spread=0.05)


def test_a_look_leaves_open_a_window_too_close_to_the_threshold_to_tell():
    assert look_decision(_near_the_boundary(10), BASELINE, Tolerances(), True, 0.01 / 6) is None


def test_a_look_finds_a_clear_slowdown_a_regression():
    assert look_decision(_samples(120.0, 10), BASELINE, Tolerances(), True, 0.01 / 6) == Verdict.REGRESSION


def test_the_window_check_of_an_entry_spends_the_looks_alpha():
    check = window_check(BASELINE, IDENTITY, Tolerances(), True)
    assert check is not None
    assert check(_samples(205.0, 10), 1, 6) == Verdict.PASS


def _judged(samples: list[float], looks: LookFigures | None, stable: bool = True):
    measured = Measured("t", samples, "samples/s", stable, {}, identity=IDENTITY, on_cpu=True, looks=looks)
    return judge(measured, BASELINE, Tolerances())


def test_the_verdict_is_judged_with_the_alpha_of_the_look_the_window_stopped_at():
    looks = LookFigures(planned=[10, 25, 50, 100, 200, 300], rounds=[10], decision="pass")
    judgement = _judged(_samples(205.0, 10), looks)
    assert judgement.verdict == Verdict.PASS and judgement.figures.alpha == pytest.approx(0.01 / 6)
    assert _judged(_samples(205.0, 10), None).figures.alpha == pytest.approx(0.01)


def test_the_mds_of_a_window_judged_at_its_looks_is_at_the_alpha_it_was_judged_at():
    # a noisy accelerator window (threshold ~5%, rounds spread 20%), where the test's level moves the MDS
    samples = _samples(205.0, 10, spread=0.2)

    def judged_reach(looks: LookFigures | None):
        measured = Measured("t", samples, "samples/s", True, {}, identity=IDENTITY, on_cpu=False, looks=looks)
        return judge(measured, BASELINE, Tolerances()).figures

    record = judged_reach(LookFigures(planned=[10, 25, 50, 100, 200, 300], rounds=[10], decision=None))
    assert record.alpha == pytest.approx(0.01 / 6) and record.reach.alpha == record.alpha
    at_the_looks_alpha = reach(samples, BASELINE["samples"], BASELINE["history"], record.threshold,
                               Tolerances().max_threshold, record.alpha)
    assert record.reach.mds == pytest.approx(at_the_looks_alpha.mds)
    # a smaller alpha asks more of the test: the MDS at the session's alpha would claim more than the verdict catches
    assert record.reach.mds > judged_reach(None).reach.mds * 1.05


def test_a_window_undecided_at_its_last_look_is_unstable_and_says_why():
    looks = LookFigures(planned=[10, 25], rounds=[10, 25], decision=None)
    judgement = _judged(_near_the_boundary(25), looks)
    assert judgement.verdict == Verdict.UNSTABLE
    assert any("undecided after 2 looks" in note for note in judgement.notes), judgement.notes


def test_a_noisy_window_whose_bound_clears_the_threshold_passes():
    looks = LookFigures(planned=[10, 25], rounds=[10], decision="pass")
    assert _judged(_samples(205.0, 10, spread=0.08), looks, stable=False).verdict == Verdict.PASS


# -- the Mann-Whitney p-values are scipy's, computed faster ------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(current=st.lists(st.integers(1, 40), min_size=1, max_size=40),
       baseline=st.lists(st.integers(1, 40), min_size=1, max_size=60), scale=st.floats(0.5, 2.0))
def test_the_one_sided_p_values_are_scipys(current, baseline, scale):
    current_values, baseline_values = [c * scale for c in current], [float(b) for b in baseline]
    comparison = stats.compare(current_values, baseline_values, 0.05)
    if np.ptp(current_values + baseline_values) == 0:
        assert (comparison.p_slower, comparison.p_faster) == (1.0, 1.0)
        return
    slower = scipy_stats.mannwhitneyu(current_values, baseline_values, alternative="less").pvalue
    faster = scipy_stats.mannwhitneyu(current_values, baseline_values, alternative="greater").pvalue
    assert comparison.p_slower == pytest.approx(slower, rel=1e-9, abs=1e-15)
    assert comparison.p_faster == pytest.approx(faster, rel=1e-9, abs=1e-15)
    within = scipy_stats.mannwhitneyu([c / (1 - comparison.threshold) for c in current_values], baseline_values,
                                      alternative="greater").pvalue
    assert comparison.p_no_slowdown == pytest.approx(1.0 if np.isnan(within) else within, rel=1e-9, abs=1e-15)


def test_the_window_check_in_work_units_passes_the_look_on():
    seen = []
    adapted = in_work_units(lambda samples, look, looks: seen.append((samples, look, looks)), 8.0)
    assert adapted is not None
    adapted([0.04, 0.08], 2, 5)
    assert seen == [([200.0, 100.0], 2, 5)]

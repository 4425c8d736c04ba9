"""A single-stack serving test's windows and sweep, without a server: the timing plan of its looks, the looks driven
by a baseline's check through the real round loop with scripted windows, the sweep's figures, and the tier
estimate's arithmetic against the windows measured on the 2-core VM."""

from __future__ import annotations

import pytest

from hwregress.hardware.telemetry import TelemetrySampler
from hwregress.judge.tolerances import Tolerances
from hwregress.judge.window_verdict import window_check
from hwregress.measure.timing import run_rounds
from hwregress.plugin.families.serving import FAMILY, ServingLoad
from hwregress.plugin.families.serving_cost import closed_window_s, open_window_s
from hwregress.plugin.families.serving_windows import sweep_facts, sweep_figures, window_plan
from hwregress.plugin.tier_costs import CostModel
from hwregress.plugin.tier_estimate import estimate
from hwregress.serving.figures import Slo, window_figures
from hwregress.serving.requests import RequestTiming
from hwregress.store.verdicts import Verdict


def test_a_judged_test_looks_after_3_6_and_10_windows_and_a_recording_may_double_its_windows():
    plan = window_plan(5, 8.3)
    assert plan.look_rounds(8.3) == [3, 6, 10] and plan.rounds == 5 and plan.confirm_s == 0.0
    assert plan.budget_rounds(8.3) == 10
    assert window_plan(3, 2.0).look_rounds(2.0) == [3, 6]
    with pytest.raises(ValueError, match="rounds must be >= 3"):
        window_plan(2, 8.0)
    with pytest.raises(ValueError, match="window time 0"):
        window_plan(5, 0.0)


def _looked(speeds: list[float], baseline: list[float], history: int) -> tuple[list[float], Verdict | None]:
    """The real round loop over scripted windows of ``speeds`` (tokens/s/user, one per window), judged against a
    baseline of ``baseline`` samples and ``history`` recorded sessions: the windows it ran and what it decided."""
    entry = {"samples": baseline, "history": [sum(baseline) / len(baseline)] * history, "identity": {}}
    check = window_check(entry, {}, Tolerances(), on_cpu=True)
    assert check is not None
    ran: list[float] = []

    def window() -> float:
        ran.append(speeds[len(ran)])
        return 8.0

    rounds = run_rounds(window, window_plan(5, 8.0), round_s=8.0,
                        settled=lambda _seconds, look, looks: check(list(ran), look, looks))
    assert rounds.looks is not None
    return ran, None if rounds.looks.decision is None else Verdict(rounds.looks.decision)


def test_against_three_sessions_an_unchanged_test_passes_at_its_second_look_and_half_the_speed_fails_at_its_first():
    baseline = [60.0 + 0.5 * (i % 7) for i in range(15)]
    same, verdict = _looked([61.0, 60.5, 62.0] + [61.0] * 7, baseline, 3)
    assert len(same) == 6 and verdict == Verdict.PASS  # 3 windows against 15 cannot state a pass at alpha/3
    halved, verdict = _looked([30.0, 31.0, 29.5] + [30.0] * 7, baseline, 3)
    assert len(halved) == 3 and verdict == Verdict.REGRESSION


def test_against_one_recorded_session_the_first_look_cannot_decide_a_small_change_and_the_test_runs_on():
    baseline = [60.0, 61.0, 59.5, 60.5, 62.0]
    ran, _ = _looked([57.0, 58.0, 56.5, 57.5, 58.5, 57.0, 56.0, 58.0, 57.2, 57.9], baseline, 1)
    assert len(ran) in (6, 10)


def _window(rate: float, good: bool = True, failed: int = 0):
    """A window of 8 requests at ``rate``: 16 output tokens each, 20 ms apart, 100 ms to the first (or 3 s: outside
    a 1-s TTFT bound)."""
    ttft = 0.1 if good else 3.0
    logs = [RequestTiming(i, i / rate, tuple(i / rate + ttft + 0.02 * k for k in range(16)), 32, 16,
                          "HTTP 500" if i < failed else None) for i in range(8)]
    return window_figures(logs, 8 / rate + ttft + 0.3, Slo(ttft_ms=1000.0, tpot_ms=100.0))


def _sampler() -> TelemetrySampler:
    """A real sampler of the CPU, run for a moment, as a sweep's telemetry."""
    sampler = TelemetrySampler("cpu", 0.05)
    with sampler:
        pass
    return sampler


def test_a_sweeps_capacity_is_where_goodput_stops_rising_and_its_points_keep_their_rates():
    rates = (2.0, 4.0, 8.0, 16.0)
    points = [_window(2.0), _window(4.0), _window(8.0), _window(16.0, good=False)]
    figures = sweep_figures(sweep_facts(rates, points, []), _sampler())
    assert figures["declared"]["capacity"] == 8.0
    assert set(figures["declared"]) == {"capacity"}
    assert "samples" not in figures and figures["rounds"] == 4
    facts = sweep_facts(rates, points, [])
    assert [point["rate"] for point in facts["sweep"]] == list(rates) and facts["capacity"] == 8.0
    assert facts["peak_goodput"] == pytest.approx(points[2].goodput)
    assert facts["sweep"][3]["goodput"] == 0.0


def test_a_sweep_where_no_request_met_its_slos_declares_nothing_to_judge():
    points = [_window(2.0, good=False), _window(4.0, good=False)]
    assert sweep_figures(sweep_facts((2.0, 4.0), points, []), _sampler())["declared"] == {}


def test_the_estimate_of_a_window_is_its_trace_and_the_last_decode_as_measured_on_the_vm():
    # measured on the 2-core VM (docs/serving.md, 'Cost and tiers'): open loop at 4 requests/s 8.26-8.28 s a window,
    # 4 closed-loop clients 2.9-3.5 s, the sweep's points 16.3, 8.25, 4.26 and 2.41 s
    assert open_window_s(32, 4.0, 16, "cpu") == pytest.approx(8.27, rel=0.05)
    assert closed_window_s(32, 4, 16, "cpu") == pytest.approx(3.2, rel=0.15)
    assert [open_window_s(32, rate, 16, "cpu") for rate in (2.0, 4.0, 8.0, 16.0)] == pytest.approx(
        [16.3, 8.25, 4.26, 2.41], rel=0.2)


def test_the_server_starts_once_per_process_and_model_in_the_estimate():
    from hwregress.plugin.matrix import Selection
    from hwregress.plugin.tier_assumptions import Assumptions
    from hwregress.serving.settings import ServingSettings

    cases = FAMILY.cases(Selection(devices=["cpu"], opted_in=frozenset({"serving"})))
    model = CostModel(Assumptions())
    first, second = (FAMILY.estimated_cost(case, model) for case in cases[:2])
    assert first.fixed_s - second.fixed_s == pytest.approx(5.0 + open_window_s(32, 4.0, 16, "cpu")
                                                            - closed_window_s(32, 4, 16, "cpu"))
    row = estimate({"serving": cases}).rows["serving"]
    assert row.tests == 2 and row.total_s < 180  # the CPU serving tier within 3 minutes by the estimate
    sweep = ServingLoad("fixed", sweep_rates=(2.0, 4.0))
    case = {**cases[0], "mode": sweep.mode}
    assert FAMILY.estimated_cost(case, CostModel(Assumptions())).timed_s == pytest.approx(
        open_window_s(32, 2.0, 16, "cpu") + open_window_s(32, 4.0, 16, "cpu"))
    assert ServingSettings().windows == 5

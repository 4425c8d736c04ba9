"""The minimum detectable slowdown (hwregress.judge.reach): seeded simulations draw sessions from the two-level noise
model through the real verdict rules (hwregress.judge.stats.compare, baselines pooled as sessions record them; the
threshold rules of a latency and an efficiency through hwregress.judge.compare.judge) and catch a change equal to the
stated MDS in 90% +- 3% of trials; short windows say they cannot reach alpha; the judge records each figure's reach
with the threshold, cap and alpha it judged with."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from hwregress.judge import stats
from hwregress.judge.compare import Measured, judge
from hwregress.judge.lifecycle import session_quantiles
from hwregress.judge.reach import POWER, _both, reach, reach_of, smallest_p, threshold_reach, threshold_reach_of
from hwregress.judge.tolerances import Tolerances
from hwregress.store.assembly import put_judged
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict

TRIALS = 2000  # Monte-Carlo standard error of a 90% rate: sqrt(0.9 * 0.1 / 2000) = 0.67%; the band is 3% (4.5 SE)
ALPHA, CAP = 0.01, 0.25


def _session(rng: np.random.Generator, rounds: int, within: float, between: float, slowdown: float = 0.0) -> list:
    level = rng.normal(0.0, between) + math.log(1.0 - slowdown)
    return list(100.0 * np.exp(level + rng.normal(0.0, within, rounds)))


def _baseline(rng: np.random.Generator, sessions: int, rounds: int, within: float, between: float):
    runs = [_session(rng, rounds, within, between) for _ in range(sessions)]
    samples = [value for run in runs for value in session_quantiles(run)]
    return samples, [float(np.median(run)) for run in runs]


# regimes: (within, between, rounds now, baseline rounds per session, sessions, tolerance)
REGIMES = {
    "cpu-vm": (0.03, 0.02, 10, 10, 3, 0.15),
    "gpu": (0.005, 0.01, 10, 10, 3, 0.05),
    "noisy-short": (0.06, 0.0, 6, 10, 3, 0.15),
    "many-rounds": (0.04, 0.03, 40, 10, 5, 0.15),
}


@pytest.mark.parametrize("regime", list(REGIMES))
def test_a_slowdown_equal_to_the_mds_is_caught_in_90_percent_of_trials(regime):
    """Each trial draws a baseline (sessions recorded as the lifecycle pools them), states the MDS at the
    threshold the verdict will use for it (which the baseline's noise and history may raise above the tolerance),
    slows the current session by exactly that much, and judges it through the real rule."""
    rate, stated = caught_fraction(regime)
    assert abs(rate - POWER) <= 0.03, f"{regime}: MDS {stated:.3f} (median) caught in {rate:.1%} of {TRIALS} trials"


def caught_fraction(regime: str) -> tuple[float, float]:
    """The fraction of :data:`TRIALS` trials of ``regime`` whose slowdown by the stated MDS the rule caught, and the
    median stated MDS."""
    within, between, rounds, per_session, sessions, tolerance = REGIMES[regime]
    rng = np.random.default_rng(20261126)
    caught, stated = 0, []
    for _ in range(TRIALS):
        samples, history = _baseline(rng, sessions, per_session, within, between)
        threshold = max(tolerance, min(CAP, max(stats.noise_bound(samples, rounds), stats.history_bound(history))))
        mds = reach_of(rounds, len(samples), within, math.hypot(within, between), between, sessions, threshold,
                       CAP, ALPHA).mds
        assert mds is not None
        stated.append(mds)
        current = _session(rng, rounds, within, between, mds)
        comparison = stats.compare(current, samples, tolerance, alpha=ALPHA, history=history, max_threshold=CAP)
        assert comparison.threshold == pytest.approx(threshold)
        caught += comparison.direction == "regression"
    return caught / TRIALS, float(np.median(stated))


def test_the_mds_from_a_window_and_its_baseline_estimates_the_stated_one():
    """The record's MDS uses the window's own spread and the baseline's session medians: over many windows its
    median lies within 15% of the MDS of the true noise."""
    within, between, rounds, per_session, sessions, tolerance = REGIMES["cpu-vm"]
    true = reach_of(rounds, per_session * sessions, within, math.hypot(within, between), between, sessions,
                    tolerance, CAP, ALPHA).mds
    rng = np.random.default_rng(7)
    estimates = []
    for _ in range(300):
        samples, history = _baseline(rng, sessions, per_session, within, between)
        current = _session(rng, rounds, within, between)
        estimates.append(reach(current, samples, history, tolerance, CAP, ALPHA).mds)
    assert abs(float(np.median(estimates)) / true - 1) < 0.15, (true, float(np.median(estimates)))


def test_more_rounds_never_make_the_mds_larger_and_between_session_drift_does_not_shrink_with_them():
    few = reach_of(5, 30, 0.04, 0.05, 0.03, 3, 0.05, CAP, ALPHA).mds
    many = reach_of(200, 30, 0.04, 0.05, 0.03, 3, 0.05, CAP, ALPHA).mds
    assert many <= few
    # with rounds unbounded the within-session part vanishes, the between-session part stays
    no_drift = reach_of(2000, 2000, 0.04, 0.04, 0.0, 3, 0.05, CAP, ALPHA).mds
    drift = reach_of(2000, 2000, 0.04, 0.05, 0.03, 3, 0.05, CAP, ALPHA).mds
    assert drift > no_drift + 0.02


def test_the_mds_is_never_below_the_threshold():
    for threshold in (0.05, 0.15):
        assert reach_of(30, 30, 0.001, 0.001, 0.0, 3, threshold, CAP, ALPHA).mds >= threshold


@pytest.mark.parametrize(("n", "m", "reachable"), [(4, 4, False), (5, 5, True), (2, 30, True), (1, 2, False)])
def test_a_window_too_short_for_the_exact_test_says_so(n, m, reachable):
    assert (smallest_p(n, m) < ALPHA) is reachable
    if n >= 2:
        result = reach_of(n, m, 0.03, 0.03, 0.0, 3, 0.15, CAP, ALPHA)
        assert (result.mds is None) is not reachable
        if not reachable:
            assert f"{n} rounds against {m} cannot reach p < 0.01" in result.why_none and "25% cap" in result.why_none


def test_bad_figures_are_refused():
    with pytest.raises(ValueError, match="power and alpha"):
        reach_of(10, 30, 0.03, 0.03, 0.0, 3, 0.15, CAP, ALPHA, power=1.0)
    with pytest.raises(ValueError, match="power and alpha"):
        reach([1.0], [1.0, 2.0], [], 0.15, CAP, alpha=0.0)
    with pytest.raises(ValueError, match="threshold rule judges one of latency, efficiency, speedup, got 'memory'"):
        threshold_reach_of("memory", 10, 0.03, 0.0, 3, 0.15)
    with pytest.raises(ValueError, match="threshold in"):
        threshold_reach("latency", [1.0, 2.0], [], 1.0)


def test_a_window_of_one_round_has_no_mds_and_says_why():
    """A judge must not fail on a one-round window: the reach says the noise is not known instead of a number."""
    found = reach([1.0], [1.0, 2.0, 3.0], [], 0.15, CAP, ALPHA)
    assert found.mds is None and found.rounds == (1, 3)
    assert found.why_none.startswith("1 round(s) against 3 baseline sample(s)") and "run more rounds" in found.why_none
    latency = threshold_reach("latency", [5.0], [10.0, 11.0, 12.0], 0.15)
    assert latency.mds is None and "latency's own noise is not known" in latency.why_none


def test_the_bivariate_normal_agrees_with_scipys():
    rng = np.random.default_rng(3)
    drawn = [(a, b, rho) for (a, b), rho in zip(rng.normal(0, 2, (40, 2)).tolist(), rng.uniform(-0.99, 0.99, 40),
                                                 strict=True)]
    for a, b, rho in [(0.0, 0.0, 0.5), (0.0, -1.0, 0.3), (1.5, 0.0, -0.7), *drawn]:
        expected = scipy_stats.multivariate_normal(mean=[0, 0], cov=[[1, rho], [rho, 1]]).cdf(np.array([a, b]))
        assert _both(a, b, rho) == pytest.approx(float(expected), abs=1e-9)


# --- threshold rules: latency, efficiency, speedup -----------------------------------------------------------------

def test_a_threshold_rules_mds_is_its_threshold_plus_z_power_standard_deviations():
    """No noise at all: the MDS is the threshold itself; with noise it is tau + z_0.9 sd of the module doc, in the
    figure's own direction (a latency's rise, an efficiency's loss)."""
    assert threshold_reach_of("latency", 10, 0.0, 0.0, 5, 0.15).mds == pytest.approx(0.15)
    assert threshold_reach_of("efficiency", 10, 0.0, 0.0, 5, 0.15).mds == pytest.approx(0.15)
    sd = math.sqrt((0.02**2 + math.pi / 2 * 0.03**2 / 10) * (1 + 1.4342 / 5))  # the median of 5 sessions' figures
    found = threshold_reach_of("latency", 10, 0.03, 0.02, 5, 0.15)
    assert found.mds == pytest.approx(math.exp(math.log(1.15) + 1.2815516 * sd) - 1, rel=1e-6)
    assert found.alpha is None and found.figure == "latency" and found.rounds == (10, 0)
    efficiency = threshold_reach_of("efficiency", 10, 0.03, 0.02, 5, 0.15)
    assert efficiency.mds == pytest.approx(1 - math.exp(-(math.log(1 / 0.85) + 1.2815516 * sd)), rel=1e-6)


def test_the_references_noise_raises_a_ratios_mds_and_more_rounds_lower_only_the_within_part():
    alone = threshold_reach_of("speedup", 10, 0.02, 0.0, 1, 0.05).mds
    with_cpu = threshold_reach_of("speedup", 10, 0.02, 0.0, 1, 0.05, reference_rounds=5, reference_within=0.05)
    assert with_cpu.mds > alone + 0.01 and with_cpu.reference_within == 0.05 and with_cpu.rounds == (10, 5)
    # rounds without end: the within part vanishes, the between part stays
    many = threshold_reach_of("efficiency", 100_000, 0.05, 0.03, 5, 0.05).mds
    floor = 1 - math.exp(-(-math.log(0.95) + 1.2815516 * 0.03 * math.sqrt(1 + 1.4342 / 5)))
    assert many == pytest.approx(floor, rel=1e-3)


def test_a_threshold_reach_reads_the_figures_history_and_reference_from_the_record():
    found = threshold_reach("efficiency", [100.0, 102.0, 98.0, 101.0, 99.0], [0.90, 0.92, 0.88, 0.91],
                            0.10, reference=[50.0, 51.0, 49.0])
    assert found.sessions == 4 and found.between == pytest.approx(stats.robust_spread([0.90, 0.92, 0.88, 0.91]))
    assert found.within == pytest.approx(stats.robust_spread([100.0, 102.0, 98.0, 101.0, 99.0]))
    assert found.reference_within == pytest.approx(stats.robust_spread([50.0, 51.0, 49.0]))
    assert found.mds > 0.10 and found.threshold == 0.10
    # fewer than 3 recorded sessions: their spread is not known (0), as the judge's drift bound has none
    assert threshold_reach("latency", [10.0, 11.0], [5.0, 9.0], 0.15).between == 0.0


def test_the_judge_records_each_figures_reach_at_the_threshold_it_judged_with():
    samples = [100.0, 101, 99, 100.5, 99.5, 100, 100.2, 99.8, 100.1, 99.9]
    entry = {"samples": samples * 3, "history": [100.0, 101.0, 99.0], "latency_ms": 10.0,
             "latency_history": [10.0, 10.2, 9.9], "efficiency": 0.9, "efficiency_history": [0.9, 0.91, 0.89],
             "speedup": 5.0}
    measured = Measured("t[cpu]", samples, "samples/s", True, {}, latency_ms=10.1, efficiency=0.9, speedup=5.0,
                        reference_samples=[20.0, 20.5, 19.5, 20.2, 19.8], on_cpu=True)
    record = TestRecord("t")
    put_judged(record, judge(measured, entry, Tolerances()).figures)
    assert record.reach.figure == "throughput" and record.reach.threshold == record.threshold
    assert record.reach.alpha == Tolerances().alpha and record.reach.rounds == [10, 30]
    assert record.reach.mds >= record.threshold
    assert [r.figure for r in record.reaches()] == ["throughput", "latency", "efficiency", "speedup"]
    for found in record.reaches()[1:]:
        assert found.alpha is None and found.mds >= found.threshold >= record.threshold
    assert record.efficiency_reach.reference_within is not None and record.speedup_reach.sessions == 1
    # judged again without a baseline: nothing of the earlier judgement stays on the record
    put_judged(record, judge(measured, None, Tolerances()).figures)
    assert record.reaches() == [] and record.ratio is None and record.threshold is None


def _figure_session(rng: np.random.Generator, rounds: int, within: float, between: float,
                    reference_rounds: int, reference_within: float) -> tuple[list, list, float]:
    """One session of a ratio figure: its rounds, the same-session reference's rounds and the figure (the median
    of the rounds over the median of the reference's, at a level drawn between sessions): log F = b + e."""
    level = rng.normal(0.0, between)
    current = 100.0 * np.exp(rng.normal(0.0, within, rounds))
    reference = 50.0 * np.exp(-level + rng.normal(0.0, reference_within, reference_rounds)) if reference_rounds \
        else np.array([])
    figure = float(np.median(current) / np.median(reference)) if reference_rounds else \
        float(np.exp(level) / np.median(current))  # a latency: one step's time, the inverse of its rate
    return list(current), list(reference), figure


# regimes: (figure, within, between, rounds now, reference rounds, reference within, sessions, on the CPU)
THRESHOLD_REGIMES = {
    "decode-latency-cpu": ("latency", 0.03, 0.03, 10, 0, 0.0, 5, True),
    "scaling-efficiency-gpu": ("efficiency", 0.01, 0.01, 10, 10, 0.02, 5, False),
}


@pytest.mark.parametrize("regime", list(THRESHOLD_REGIMES))
def test_a_change_equal_to_a_threshold_rules_mds_is_caught_in_90_percent_of_trials(regime):
    """Each trial draws a baseline of recorded sessions (throughput samples pooled as the lifecycle pools them, the
    figure's history) and a current session, judges it through the real judge() to learn the figure's threshold
    (widened by the reference's noise and the figure's drift as the judge widens it), states the MDS of the true
    noise at that threshold, changes the figure by exactly that much (a latency longer, an efficiency lower; the
    threshold does not depend on the figure's value) and judges it again: the figure's failure is counted.
    Monte-Carlo standard error of a 90% rate over 2000 trials: sqrt(0.9 * 0.1 / 2000) = 0.67%; the band is 3%."""
    rate, stated = threshold_caught_fraction(regime)
    assert abs(rate - POWER) <= 0.03, f"{regime}: MDS {stated:.3f} (median) caught in {rate:.1%} of {TRIALS} trials"


def threshold_caught_fraction(regime: str) -> tuple[float, float]:
    """The fraction of :data:`TRIALS` trials of the threshold rule ``regime`` whose change by the stated MDS the
    judge caught, and the median stated MDS."""
    figure, within, between, rounds, reference_rounds, reference_within, sessions, on_cpu = THRESHOLD_REGIMES[regime]
    key = "latency_ms" if figure == "latency" else figure  # the Measured field and the entry's key of the figure
    rng = np.random.default_rng(20261127)
    caught, stated = 0, []
    for _ in range(TRIALS):
        drawn = [_figure_session(rng, rounds, within, between, reference_rounds, reference_within)
                 for _ in range(sessions)]
        history = [value for _, _, value in drawn]
        entry = {"samples": [v for current, _, _ in drawn for v in session_quantiles(current)],
                 "history": [float(np.median(current)) for current, _, _ in drawn],
                 f"{figure}_history": history, key: float(np.median(history))}
        current, reference, value = _figure_session(rng, rounds, within, between, reference_rounds, reference_within)
        measured = Measured("t", current, "samples/s", True, {}, reference_samples=reference, on_cpu=on_cpu,
                            **{key: value})
        threshold = getattr(judge(measured, entry, Tolerances()).figures, f"{figure}_reach").threshold
        mds = threshold_reach_of(figure, rounds, within, between, sessions, threshold, reference_rounds,
                                 reference_within).mds
        stated.append(mds)
        changed = value * (1 + mds) if figure == "latency" else value * (1 - mds)
        judgement = judge(Measured("t", current, "samples/s", True, {}, reference_samples=reference, on_cpu=on_cpu,
                                   **{key: changed}), entry, Tolerances())
        caught += any(f"t: {figure}" in failure for failure in judgement.failures)
        assert judgement.verdict in (Verdict.REGRESSION, Verdict.PASS, Verdict.IMPROVEMENT)
    return caught / TRIALS, float(np.median(stated))


def test_the_median_difference_and_the_rank_statistic_correlate_as_stated():
    # rho0 of the module doc, measured: 4,000 seeded pairs of samples (10 and 30 rounds, normal and logistic noise);
    # the Monte-Carlo standard error of a correlation near 0.87 over 4,000 draws is about 0.004
    from hwregress.judge.reach import RHO_MEDIAN_HL

    rng = np.random.default_rng(43)
    for draw in (lambda size: rng.standard_normal(size), lambda size: rng.logistic(size=size)):
        x, y = draw((4000, 10)), draw((4000, 30))
        medians = np.median(x, axis=1) - np.median(y, axis=1)
        ranks = scipy_stats.mannwhitneyu(x, y, axis=1).statistic  # each row's pair, in one call
        assert np.corrcoef(medians, ranks)[0, 1] == pytest.approx(RHO_MEDIAN_HL, abs=0.03)
    assert RHO_MEDIAN_HL == pytest.approx(math.sqrt(3) / 2)  # not sqrt(2/3) = 0.816, the value before issue 43


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 10, 20])
def test_the_median_of_k_sessions_varies_as_stated(k):
    from hwregress.judge.reach import median_of_k_variance

    draws = np.random.default_rng(k).standard_normal((200_000, k))
    measured = float(np.var(np.median(draws, axis=1)))
    # 200,000 draws: the variance's relative Monte-Carlo error is about sqrt(2 / 200,000) = 0.3%
    assert measured == pytest.approx(median_of_k_variance(k), rel=0.015)
    assert median_of_k_variance(3) > 1.3 / 3  # not the mean's 1/3

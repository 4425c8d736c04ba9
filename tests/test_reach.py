"""The minimum detectable slowdown (hwregress.judge.reach): a seeded simulation draws sessions from the two-level noise
model through the real verdict rule (hwregress.judge.stats.compare, baselines pooled as sessions record them) and
catches a slowdown equal to the stated MDS in 90% +- 3% of trials; short windows say they cannot reach alpha."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hwregress.judge import stats
from hwregress.judge.lifecycle import session_quantiles
from hwregress.judge.reach import POWER, reach, reach_of, smallest_p

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
    rate = caught / TRIALS
    assert abs(rate - POWER) <= 0.03, (f"{regime}: MDS {np.median(stated):.3f} (median) caught in {rate:.1%} of "
                                       f"{TRIALS} trials")


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
    with pytest.raises(ValueError, match=">= 2 samples on each side"):
        reach([1.0], [1.0, 2.0], [], 0.15, CAP, ALPHA)

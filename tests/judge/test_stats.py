"""Statistics: summaries (hwregress.summary), the noise-aware comparison, and its measured detection quality."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwregress.judge import stats
from hwregress.summary import median_of, summarize

samples_strategy = st.lists(st.floats(min_value=1.0, max_value=1e6, allow_nan=False), min_size=5, max_size=30)


def test_summary_of_known_values():
    summary = summarize([1, 2, 3, 4, 5])
    assert (summary.median, summary.q1, summary.q3, summary.iqr, summary.n) == (3, 2, 4, 2, 5)
    assert summary.rel_iqr == pytest.approx(2 / 3)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.floats(-1e12, 1e12, allow_nan=False), min_size=1, max_size=80))
def test_summary_quartiles_and_extremes_are_numpys_bit_for_bit(values):
    summary = summarize(values)
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    assert (summary.q1, summary.median, summary.q3, summary.iqr) == (q1, median, q3, q3 - q1)
    assert (summary.minimum, summary.maximum, summary.mean) == (min(values), max(values), np.mean(values))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.floats(-1e300, 1e300, allow_nan=False) | st.sampled_from([0.0, 1.0, 2.0, math.inf, -math.inf]),
                min_size=1, max_size=80))
def test_the_median_from_one_sort_is_numpys_bit_for_bit(values):
    with np.errstate(invalid="ignore"):  # numpy warns where the two middle values are inf and -inf (NaN)
        expected = float(np.median(values))
    for found in (median_of(values), median_of(np.array(values).reshape(-1, 1))):
        assert found == expected or (math.isnan(found) and math.isnan(expected))


def test_the_median_of_nothing_or_of_a_nan_is_numpys_nan():
    assert math.isnan(median_of([1.0, math.nan, 2.0]))
    with pytest.warns(RuntimeWarning):
        assert math.isnan(median_of([]))


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_summary_rejects_empty_and_non_finite(bad):
    with pytest.raises(ValueError):
        summarize(bad)


def test_compare_rejects_bad_tolerance():
    with pytest.raises(ValueError, match="tolerance must be a fraction"):
        stats.compare([1.0] * 5, [1.0] * 5, tolerance=1.5)


@given(samples_strategy)
def test_identical_samples_never_regress(samples):
    assert stats.compare(samples, samples, tolerance=0.05).direction == "none"


@settings(max_examples=60, deadline=None)
@given(samples_strategy, st.lists(st.floats(min_value=0.05, max_value=1.0), min_size=2, max_size=6, unique=True))
def test_scaling_current_down_moves_verdict_monotonically_towards_regression(baseline, factors):
    order = {"improvement": 0, "none": 1, "regression": 2}
    ranks = [order[stats.compare([x * f for x in baseline], baseline, 0.05).direction]
             for f in sorted(factors, reverse=True)]
    assert ranks == sorted(ranks)


def test_noise_bound_follows_baseline_spread():
    quiet = stats.noise_bound([100.0] * 10, 10)
    noisy = stats.noise_bound([90.0, 95, 100, 105, 110] * 2, 10)
    assert quiet == 0.0
    assert noisy > 0.05
    big = np.random.default_rng(0).normal(100, 10, 10)
    assert stats.compare(big * 0.93, big, 0.05).direction == "none"  # 7% inside 10% noise: not a verdict


def test_history_widens_threshold():
    baseline = [100.0, 100.5, 99.5, 100.2, 99.8]
    current = [x * 0.85 for x in baseline]
    assert stats.compare(current, baseline, 0.05).direction == "regression"
    drifting = [100.0, 80.0, 120.0, 90.0]
    assert stats.history_bound(drifting) > 0.15
    assert stats.compare(current, baseline, 0.05, history=drifting).direction == "none"
    assert stats.history_bound([100.0, 101.0]) == 0.0  # too few sessions to know the drift


DEFAULT_ROUNDS = 10  # the plugin's --rounds default
NOISE = 0.03


def _rates(trials: int, seed: int = 20261122) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    false_positive = detected = 0
    for _ in range(trials):
        baseline = rng.normal(1000.0, 1000.0 * NOISE, DEFAULT_ROUNDS)
        same = rng.normal(1000.0, 1000.0 * NOISE, DEFAULT_ROUNDS)
        slower = rng.normal(900.0, 900.0 * NOISE, DEFAULT_ROUNDS)
        false_positive += stats.compare(same, baseline, 0.05).direction != "none"
        detected += stats.compare(slower, baseline, 0.05).direction == "regression"
    return false_positive / trials, detected / trials


def test_detection_quality_at_three_percent_noise(capsys):
    """A/A false positives <= 1% and >= 95% detection of a 10% regression, default rounds, 3% noise."""
    false_positive_rate, detection_rate = _rates(1000)
    with capsys.disabled():
        print(f"\n[detection quality] rounds={DEFAULT_ROUNDS} noise={NOISE:.0%} tolerance=5%: "
              f"A/A false-positive rate {false_positive_rate:.2%}, 10% regression detected {detection_rate:.2%}")
    assert false_positive_rate <= 0.01
    assert detection_rate >= 0.95


# --- the cap and robustness to level shifts --------------------------------------------------------

TWO_MACHINES = [12.0, 13.0, 14.0, 12.5, 13.5, 24.0, 25.0, 27.0, 26.0, 24.5]  # one key, two VMs 2x apart


def test_threshold_is_capped_and_the_wanted_threshold_kept():
    baseline = [50.0, 100.0, 150.0, 60.0, 140.0, 80.0, 120.0, 100.0]  # IQR ~50%: noise bound >> 25%
    comparison = stats.compare(baseline, baseline, tolerance=0.05)
    assert comparison.threshold == stats.DEFAULT_MAX_THRESHOLD
    assert comparison.wanted_threshold is not None and comparison.wanted_threshold > 0.25
    quiet = stats.compare([100.0, 101.0, 99.0, 100.5, 99.5], [100.0, 101.0, 99.0, 100.5, 99.5], 0.05)
    assert quiet.wanted_threshold is None  # the cap did not cut anything
    assert stats.compare(baseline, baseline, tolerance=0.4).threshold == 0.4  # an explicit tolerance wins


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1])
def test_compare_rejects_bad_max_threshold(bad):
    with pytest.raises(ValueError, match="max_threshold"):
        stats.compare([1.0] * 5, [1.0] * 5, tolerance=0.05, max_threshold=bad)


def test_history_mixing_two_machines_uses_the_recent_level_only():
    recent = TWO_MACHINES[5:]
    expected = 3.0 * stats.robust_spread(recent) * np.sqrt(1 + 1 / len(recent))
    assert stats.history_bound(TWO_MACHINES) == pytest.approx(expected)
    assert stats.history_bound(TWO_MACHINES) < 0.25  # pooled sd/mean of both levels asked for > 100%


def test_gross_slowdown_in_a_noisy_window_is_a_regression():
    """Two busy loops made a test 2-11x slower; a history of two machines must not hide it."""
    rng = np.random.default_rng(7)
    baseline = list(rng.normal(25.0, 0.5, 10))
    current = list(12.5 * rng.uniform(0.7, 1.3, 10))  # half the speed, +-30% round to round
    comparison = stats.compare(current, baseline, 0.05, history=[*TWO_MACHINES, 12.0, 26.0, 13.0])
    assert comparison.direction == "regression"
    assert comparison.threshold <= stats.DEFAULT_MAX_THRESHOLD


def test_history_rejects_non_positive_medians():
    with pytest.raises(ValueError, match="history medians"):
        stats.history_bound([10.0, 0.0, 10.0])


def _noise_ceiling(noise: float, z: float = 3.0) -> float:
    """Largest history bound that noise of +-``noise`` alone can produce (3 medians of one level)."""
    return z * 1.4826 * (2 * noise / (1 - noise)) * np.sqrt(1 + 1 / 3)


@settings(max_examples=300, deadline=None)
@given(
    noise=st.floats(0.0, 0.05),
    unit_noise=st.lists(st.floats(-1.0, 1.0), min_size=3, max_size=20),
    position=st.integers(0, 20),
    log_shift=st.floats(np.log(0.1), np.log(10.0)),
)
def test_one_level_shift_never_lifts_the_threshold_past_the_cap(noise, unit_noise, position, log_shift):
    history = np.array([100.0 * (1 + noise * u) for u in unit_noise])
    history[min(position, len(history)):] *= np.exp(log_shift)
    samples = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.1]
    assert stats.compare(samples, samples, 0.05, history=list(history)).threshold <= stats.DEFAULT_MAX_THRESHOLD
    if abs(log_shift) >= np.log(1.5):  # a gross step is found: it never enters the spread
        assert stats.history_bound(list(history)) <= _noise_ceiling(noise) + 1e-9


untied = st.lists(st.floats(0.5, 2.0, allow_nan=False), min_size=2, max_size=17, unique=True)


@settings(max_examples=300, deadline=None)
@given(untied.flatmap(lambda pool: st.tuples(st.just(pool), st.integers(1, min(8, len(pool) - 1)))))
def test_the_exact_one_sided_p_values_are_scipys_for_any_untied_samples(split):
    """The p-values kept per (sizes, statistic) are those SciPy's exact law gives the samples themselves."""
    from scipy.stats import mannwhitneyu

    pool, cut = split
    current, baseline = np.array(pool[:cut]), np.array(pool[cut:])
    expected = tuple(mannwhitneyu(current, baseline, alternative=side, method="exact").pvalue
                     for side in ("less", "greater"))
    assert stats._mann_whitney(current, baseline) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(("n1", "n2"), [(1, 1), (3, 7), (5, 40), (8, 8), (12, 2)])
def test_the_exact_law_tabulated_once_per_sizes_is_scipys_at_every_statistic(n1, n2):
    """The table of every statistic from one batched call is, float for float, scipy's answer for each one alone."""
    for u in range(n1 * n2 + 1):
        assert stats._exact_p_values(n1, n2, u) == stats._exact_p_values_of(n1, n2, u)

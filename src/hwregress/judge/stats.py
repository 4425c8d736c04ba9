"""The noise-aware comparison of two sample sets (their robust summaries: :mod:`hwregress.summary`).

The comparison follows asv's rule (airspeed velocity, ``asv/_stats.py`` and ``asv compare``): a change
counts only when the effect size crosses a threshold AND a significance test agrees. Here the effect
size is the ratio of medians and the test is the one-sided Mann-Whitney U test (Mann & Whitney 1947,
as in pyperf's ``is_significant`` spirit and Conbench's distribution-free checks), computed by
``scipy.stats.mannwhitneyu``. The threshold is

    threshold = max(tolerance, min(max_threshold, max(noise bound, history bound)))

The noise bound is ``z`` standard errors of the log ratio of medians implied by the noise the
*baseline* recorded:

    sigma_rel = (IQR / 1.349) / median          robust relative standard deviation (normal IQR = 1.349 sigma)
    se(median) = 1.2533 * sigma / sqrt(n)        asymptotic efficiency of the median (Kenney & Keeping 1962)
    noise bound = z * 1.2533 * sigma_rel * sqrt(1/n_baseline + 1/n_current)

Within-session noise underestimates the drift between sessions on shared machines, so baselines keep
the medians of the sessions that recorded them and the threshold also covers ``z`` prediction standard
deviations of that history, as Conbench judges a result by its z-score against the history of its
baseline runs. The history is first cut at its last level shift (:mod:`hwregress.judge.changepoints`: PELT
from ruptures, Truong, Oudre & Vayatis 2020), because a history that mixed two machines of one name
or a driver change made the bound exceed 100% (docs/measured.md, 'Noise between sessions'); and the spread is
the MAD, which one odd session does not move:

    recent = medians since the last change point       (no history bound with fewer than 3)
    spread = 1.4826 * MAD(recent) / median(recent)     (1.4826 MAD = sigma for normal data)
    history bound = z * spread * sqrt(1 + 1/k)          k = len(recent)

The cap ``max_threshold`` (default 25%) bounds what noise may hide: honest thresholds on a shared cloud VM are
10-15%, while an uncapped bound let a contended test many times slower pass
(docs/measured.md, 'Noise between sessions'). ``Comparison.wanted_threshold`` keeps what the bounds asked for, so
a report can say the baseline is too noisy to resolve smaller changes.

A drop beyond the cap is a regression whatever the significance test says (``Comparison.gross``): a baseline
pooled from a contended and a quiet session is bimodal, and a contended run then overlaps its slow half, so
Mann-Whitney can find no significance for a run at a fraction of the baseline's median
(docs/measured.md, 'Noise between sessions').

A pass is shown, not presumed, where a window is looked at (:mod:`hwregress.judge.looks`): ``Comparison.p_no_slowdown``
is the one-sided Mann-Whitney p-value of the current samples divided by ``1 - threshold`` against the baseline's, small
when the current samples lie above the regression boundary. Under a scale shift (the current samples are the baseline's
times a ratio r: a multiplicative shift of log throughput) this test is the dual of the Hodges-Lehmann-Moses lower
confidence bound of r (Hollander, Wolfe & Chicken, "Nonparametric Statistical Methods", 3rd ed. 2014, sections 4.1-4.3;
Lehmann, "Nonparametrics", 1975, ch. 2): p < alpha exactly when that (1 - alpha) lower bound lies above
``1 - threshold``, so a pass at alpha means "no slowdown of the threshold or more" with confidence 1 - alpha. It costs
one rank sum where a bootstrap interval costs hundreds of resampled medians.

The Mann-Whitney p-values are scipy's (``scipy.stats.mannwhitneyu``): its exact law where a side has at most 8 samples
and nothing is tied, else the same normal approximation with tie and continuity corrections, computed here from one
rank sum for all three p-values (scipy's call costs a quarter of a millisecond, and a window is looked at again and
again).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special
from scipy import stats as scipy_stats

from hwregress.judge.changepoints import MAD_TO_SIGMA, since_last_change
from hwregress.summary import Summary, median_of, summarize

NORMAL_IQR = 1.349  # IQR of the standard normal distribution, in sigmas
MEDIAN_EFFICIENCY = 1.2533  # sqrt(pi / 2): se(median) / se(mean) for normal samples
DEFAULT_MAX_THRESHOLD = 0.25  # no noise or history bound may hide a drop larger than this
MIN_HISTORY = 3  # session medians since the last level shift needed for a history bound


def noise_bound(baseline: Sequence[float], n_current: int, z: float = 3.0) -> float:
    """Relative change that baseline noise alone explains at ``z`` standard errors (see module doc).

    Returns a fraction, e.g. 0.05 for 5%. 0 when the baseline shows no spread.
    """
    return _noise_bound_of(summarize(baseline), n_current, z)


def _noise_bound_of(baseline: Summary, n_current: int, z: float) -> float:
    """:func:`noise_bound` of the baseline summarized as ``baseline``."""
    sigma_rel = baseline.rel_iqr / NORMAL_IQR
    return z * MEDIAN_EFFICIENCY * sigma_rel * math.sqrt(1.0 / baseline.n + 1.0 / max(n_current, 1))


def robust_spread(values: Sequence[float]) -> float:
    """MAD x 1.4826 / median of ``values``: a relative standard deviation that one odd value does not
    move (0 for no values or a median that is not > 0)."""
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        return 0.0
    median = median_of(array)
    if median <= 0:
        return 0.0
    return MAD_TO_SIGMA * median_of(np.abs(array - median)) / median


def history_bound(history: Sequence[float], z: float = 3.0) -> float:
    """Relative change that session-to-session drift explains (see module doc); 0 with fewer than 3
    session medians since the last level shift. Returns a fraction, uncapped.

    Raises:
        ValueError: a median is not finite or not > 0.
    """
    recent = since_last_change(history)
    if len(recent) < MIN_HISTORY:
        return 0.0
    return z * robust_spread(recent) * math.sqrt(1.0 + 1.0 / len(recent))


@dataclass(frozen=True)
class Comparison:
    """Current vs baseline samples of a higher-is-better metric.

    Attributes:
        ratio: median(current) / median(baseline).
        threshold: relative change that counts (fraction), at most ``max(tolerance, max_threshold)``.
        p_slower: one-sided Mann-Whitney p-value that current is stochastically smaller.
        p_faster: one-sided p-value that current is stochastically larger.
        direction: ``"regression"``, ``"improvement"`` or ``"none"``.
        wanted_threshold: what the noise and history bounds asked for when the cap cut it (fraction),
            else None: the baseline is noisier than the verdict admits; re-record it on a quiet machine.
        gross: the ratio is below ``1 - max(threshold, max_threshold)``: a regression without the significance
            test (no noise or history may hide a drop that large).
        p_no_slowdown: one-sided Mann-Whitney p-value that current / (1 - threshold) is stochastically larger than
            the baseline: below alpha, the (1 - alpha) lower confidence bound of the ratio lies above the boundary
            ``1 - threshold`` (see the module doc).
    """

    ratio: float
    threshold: float
    p_slower: float
    p_faster: float
    direction: str
    wanted_threshold: float | None = None
    gross: bool = False
    p_no_slowdown: float = 1.0


def compare(current: Sequence[float], baseline: Sequence[float], tolerance: float,
            alpha: float = 0.01, z: float = 3.0, history: Sequence[float] = (),
            max_threshold: float = DEFAULT_MAX_THRESHOLD) -> Comparison:
    """Compare samples of a higher-is-better metric (throughput, TFLOP/s, GB/s).

    A regression needs ``ratio < 1 - threshold`` and ``p_slower < alpha``, or ``ratio < 1 - max(threshold,
    max_threshold)`` alone (a gross drop: see the module doc); an improvement needs ``ratio > 1 + threshold`` and
    ``p_faster < alpha`` (asv's rule), with

        threshold = max(tolerance, min(max_threshold, max(noise_bound, history_bound)))

    ``history`` being the medians of the sessions that recorded the baseline (see module doc). The
    direction does not depend on whether the current window was stable: a caller that marks noisy
    windows ``unstable`` must do so only when the direction is ``"none"``, so that a significant drop
    beyond the cap is a regression however noisy the window. With fewer than 5 samples on either side
    the exact test cannot reach alpha = 0.01: record more rounds (a gross drop is a regression all the same).

    Raises:
        ValueError: empty or non-finite samples, a non-positive baseline median or history median, a
            tolerance outside [0, 1) or a max_threshold outside (0, 1).
    """
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be a fraction in [0, 1), got {tolerance}")
    if not 0 < max_threshold < 1:
        raise ValueError(f"max_threshold must be a fraction in (0, 1), got {max_threshold}")
    current_summary, baseline_summary = summarize(current), summarize(baseline)
    if baseline_summary.median <= 0:
        raise ValueError(f"baseline median must be > 0, got {baseline_summary.median}")
    ratio = current_summary.median / baseline_summary.median
    bound = max(_noise_bound_of(baseline_summary, len(current), z), history_bound(history, z))
    threshold = max(tolerance, min(max_threshold, bound))
    wanted = bound if bound > threshold else None
    p_slower, p_faster, p_no_slowdown = _one_sided_p_values(current, baseline, 1 - threshold)
    gross = ratio < 1 - max(threshold, max_threshold)
    if gross or (ratio < 1 - threshold and p_slower < alpha):
        direction = "regression"
    elif ratio > 1 + threshold and p_faster < alpha:
        direction = "improvement"
    else:
        direction = "none"
    return Comparison(ratio, threshold, p_slower, p_faster, direction, wanted, gross, p_no_slowdown)


def _one_sided_p_values(current: Sequence[float], baseline: Sequence[float],
                        boundary: float) -> tuple[float, float, float]:
    """``(p_slower, p_faster, p_no_slowdown)``: the one-sided Mann-Whitney p-values that ``current`` is stochastically
    smaller, larger, and, divided by ``boundary`` (> 0), larger than ``baseline`` (see the module doc)."""
    current_array, baseline_array = np.asarray(current, float), np.asarray(baseline, float)
    combined = np.concatenate([current_array, baseline_array])
    if combined.max() - combined.min() == 0:  # numpy.ptp's own arithmetic, without its argument handling
        p_slower = p_faster = 1.0  # all values equal: no evidence either way (scipy warns on this case)
    else:
        p_slower, p_faster = _mann_whitney(current_array, baseline_array)
    p_no_slowdown = _mann_whitney(current_array / boundary, baseline_array)[1]
    return p_slower, p_faster, p_no_slowdown


EXACT_TABLE_VALUES = 2**20  # the most sample values one batched call may hold to tabulate a law (8 MB of floats)


def _exact_p_values(n1: int, n2: int, u_greater: int) -> tuple[float, float]:
    """``scipy.stats.mannwhitneyu``'s exact one-sided p-values ``(less, greater)`` for untied samples of sizes ``n1``
    and ``n2`` whose statistic (pairs with the first sample's value above the second's) is ``u_greater``. Without
    ties the exact law depends on nothing else, so scipy is asked once per pair of sizes for every statistic
    (:func:`_exact_law`), or, where that batch would be too large, once per statistic: its argument handling costs
    ~1 ms a call, most of a planned look's check."""
    if (n1 * n2 + 1) * (n1 + n2) <= EXACT_TABLE_VALUES:
        less, greater = _exact_law(n1, n2)
        return less[u_greater], greater[u_greater]
    return _exact_p_values_of(n1, n2, u_greater)


def _untied_with_statistics(n1: int, statistics: np.ndarray, n2: int) -> np.ndarray:
    """Samples of ``n1`` untied values, one row per statistic in ``statistics``, whose Mann-Whitney statistic against
    the ``n2`` values ``0, 1, ..., n2 - 1`` is that statistic: shape ``(len(statistics), n1)``."""
    index = np.arange(n1)
    below = np.clip(statistics[:, None] - n2 * index[None, :], 0, n2)  # baseline values under each current value
    return below - 0.5 + index / (4.0 * n1)


@functools.lru_cache(maxsize=256)
def _exact_law(n1: int, n2: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """:func:`_exact_p_values` at every statistic ``0 .. n1 n2``, from one batched call of scipy's per side."""
    current = _untied_with_statistics(n1, np.arange(n1 * n2 + 1), n2)
    baseline = np.arange(n2, dtype=float)[None, :]
    less, greater = (scipy_stats.mannwhitneyu(current, baseline, alternative=side, method="exact", axis=1).pvalue
                     for side in ("less", "greater"))
    return tuple(less.tolist()), tuple(greater.tolist())


@functools.lru_cache(maxsize=4096)
def _exact_p_values_of(n1: int, n2: int, u_greater: int) -> tuple[float, float]:
    """:func:`_exact_p_values` for one statistic, from scipy's call on two samples that have it."""
    current = _untied_with_statistics(n1, np.array([u_greater]), n2)[0]
    baseline = np.arange(n2, dtype=float)
    return (float(scipy_stats.mannwhitneyu(current, baseline, alternative="less", method="exact").pvalue),
            float(scipy_stats.mannwhitneyu(current, baseline, alternative="greater", method="exact").pvalue))


def _mann_whitney(current: np.ndarray, baseline: np.ndarray) -> tuple[float, float]:
    """The one-sided Mann-Whitney p-values ``(less, greater)`` of ``current`` against ``baseline`` as
    ``scipy.stats.mannwhitneyu``'s default method gives them (its exact law for small untied samples, else its
    asymptotic formula: Mann & Whitney 1947, tie correction and continuity correction), from one rank sum."""
    n1, n2 = current.size, baseline.size
    combined = np.concatenate([current, baseline])
    order = np.argsort(combined, kind="stable")
    ordered = combined[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    ends = np.concatenate((starts[1:], [combined.size]))
    ties = ends - starts
    ranks = np.empty(combined.size)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ties)  # mid-ranks of tied values
    u_greater = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2.0
    if (n1 <= 8 or n2 <= 8) and starts.size == combined.size:  # every value its own group: no ties
        return _exact_p_values(n1, n2, round(u_greater))
    u_less = n1 * n2 - u_greater
    total = n1 + n2
    spread = math.sqrt(n1 * n2 / 12.0 * ((total + 1) - float((ties**3 - ties).sum()) / (total * (total - 1))))
    if spread == 0:
        return 1.0, 1.0

    def tail(u: float) -> float:
        return float(special.ndtr(-(u - n1 * n2 / 2.0 - 0.5) / spread))

    return tail(u_less), tail(u_greater)

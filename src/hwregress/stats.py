"""Robust summaries of repeated measurements and the noise-aware comparison of two sample sets.

The comparison follows asv's rule (airspeed velocity, ``asv/_stats.py`` and ``asv compare``): a change
counts only when the effect size crosses a threshold AND a significance test agrees. Here the effect
size is the ratio of medians and the test is the one-sided Mann-Whitney U test (Mann & Whitney 1947,
as in pyperf's ``is_significant`` spirit and Conbench's distribution-free checks), computed by
``scipy.stats.mannwhitneyu``. The threshold is ``max(tolerance, noise bound)`` where the noise bound is
``z`` standard errors of the log ratio of medians implied by the noise the *baseline* recorded:

    sigma_rel = (IQR / 1.349) / median          robust relative standard deviation (normal IQR = 1.349 sigma)
    se(median) = 1.2533 * sigma / sqrt(n)        asymptotic efficiency of the median (Kenney & Keeping 1962)
    bound = z * 1.2533 * sigma_rel * sqrt(1/n_baseline + 1/n_current)

Within-session noise underestimates the drift between sessions on shared machines (measured here on a
2-core cloud VM: the same test's session medians moved by 10-40% while each session's IQR was 3-9%).
Baselines therefore keep the medians of the sessions that recorded them, and once three or more are
known the threshold also covers ``z`` prediction standard deviations of that history, as Conbench
judges a result by its z-score against the history of its baseline runs:

    history bound = z * (sd(history) / mean(history)) * sqrt(1 + 1/k)      k session medians
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

NORMAL_IQR = 1.349  # IQR of the standard normal distribution, in sigmas
MEDIAN_EFFICIENCY = 1.2533  # sqrt(pi / 2): se(median) / se(mean) for normal samples


@dataclass(frozen=True)
class Summary:
    """Robust summary of ``n`` samples: median, quartiles, IQR, mean, min, max (units of the samples)."""

    n: int
    median: float
    q1: float
    q3: float
    iqr: float
    mean: float
    minimum: float
    maximum: float

    @property
    def rel_iqr(self) -> float:
        """IQR / median (0 when the median is 0)."""
        return self.iqr / self.median if self.median else 0.0


def summarize(samples: Sequence[float]) -> Summary:
    """Summary of ``samples``.

    Raises:
        ValueError: ``samples`` is empty or holds a non-finite value.
    """
    values = np.asarray(samples, dtype=float)
    if values.size == 0:
        raise ValueError("cannot summarize an empty sample list")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"samples must be finite, got {list(samples)!r}")
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return Summary(int(values.size), float(median), float(q1), float(q3), float(q3 - q1),
                   float(values.mean()), float(values.min()), float(values.max()))


def relative_iqr(samples: Sequence[float]) -> float:
    """IQR / median of ``samples``; 0 for fewer than 2 samples."""
    return summarize(samples).rel_iqr if len(samples) >= 2 else 0.0


def noise_bound(baseline: Sequence[float], n_current: int, z: float = 3.0) -> float:
    """Relative change that baseline noise alone explains at ``z`` standard errors (see module doc).

    Returns a fraction, e.g. 0.05 for 5%. 0 when the baseline shows no spread.
    """
    summary = summarize(baseline)
    sigma_rel = summary.rel_iqr / NORMAL_IQR
    return z * MEDIAN_EFFICIENCY * sigma_rel * math.sqrt(1.0 / summary.n + 1.0 / max(n_current, 1))


def history_bound(history: Sequence[float], z: float = 3.0) -> float:
    """Relative change that session-to-session drift explains (see module doc); 0 with fewer than 3
    recorded sessions. Returns a fraction."""
    if len(history) < 3:
        return 0.0
    values = np.asarray(history, dtype=float)
    mean = float(values.mean())
    if mean <= 0:
        return 0.0
    return z * float(values.std(ddof=1)) / mean * math.sqrt(1.0 + 1.0 / len(values))


@dataclass(frozen=True)
class Comparison:
    """Current vs baseline samples of a higher-is-better metric.

    Attributes:
        ratio: median(current) / median(baseline).
        threshold: relative change that counts (fraction).
        p_slower: one-sided Mann-Whitney p-value that current is stochastically smaller.
        p_faster: one-sided p-value that current is stochastically larger.
        direction: ``"regression"``, ``"improvement"`` or ``"none"``.
    """

    ratio: float
    threshold: float
    p_slower: float
    p_faster: float
    direction: str


def compare(current: Sequence[float], baseline: Sequence[float], tolerance: float,
            alpha: float = 0.01, z: float = 3.0, history: Sequence[float] = ()) -> Comparison:
    """Compare samples of a higher-is-better metric (throughput, TFLOP/s, GB/s).

    A regression needs ``ratio < 1 - threshold`` and ``p_slower < alpha``; an improvement needs
    ``ratio > 1 + threshold`` and ``p_faster < alpha``; ``threshold = max(tolerance,
    noise_bound(baseline, len(current), z), history_bound(history, z))``, ``history`` being the
    medians of the sessions that recorded the baseline. With fewer than 5 samples on either side the exact
    test cannot reach alpha = 0.01: record more rounds.

    Raises:
        ValueError: empty or non-finite samples, a non-positive baseline median, or a tolerance
            outside [0, 1).
    """
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be a fraction in [0, 1), got {tolerance}")
    current_summary, baseline_summary = summarize(current), summarize(baseline)
    if baseline_summary.median <= 0:
        raise ValueError(f"baseline median must be > 0, got {baseline_summary.median}")
    ratio = current_summary.median / baseline_summary.median
    threshold = max(tolerance, noise_bound(baseline, len(current), z), history_bound(history, z))
    p_slower, p_faster = _one_sided_p_values(current, baseline)
    if ratio < 1 - threshold and p_slower < alpha:
        direction = "regression"
    elif ratio > 1 + threshold and p_faster < alpha:
        direction = "improvement"
    else:
        direction = "none"
    return Comparison(ratio, threshold, p_slower, p_faster, direction)


def _one_sided_p_values(current: Sequence[float], baseline: Sequence[float]) -> tuple[float, float]:
    if np.ptp(np.concatenate([np.asarray(current, float), np.asarray(baseline, float)])) == 0:
        return 1.0, 1.0  # all values equal: no evidence either way (scipy warns on this case)
    slower = scipy_stats.mannwhitneyu(current, baseline, alternative="less").pvalue
    faster = scipy_stats.mannwhitneyu(current, baseline, alternative="greater").pvalue
    return float(slower), float(faster)

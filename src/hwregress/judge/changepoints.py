"""Level shifts in a series of session medians, found with ruptures' PELT, each with its size and significance.

A baseline's history holds one median per session that recorded it. When the machine behind a hardware
key changes (a cloud VM of the same name but another CPU family, a driver that moved every kernel), the
history steps from one level to another; pooling both levels in one spread made the noise threshold
exceed 100%. Only the medians since the last step describe the machine as it is now.

Detection: PELT (Killick, Fearnhead & Eckley 2012) as implemented by ruptures (Truong, Oudre & Vayatis,
"Selective review of offline change point detection methods", Signal Processing 167, 2020), on the log of
the medians (so a step is a ratio, whatever the unit) with the L1 cost ``model="l1"`` (sum of absolute
deviations from each segment's median: one odd session does not pull a segment's level; computed by
:class:`L1Cost`, ruptures' own numbers faster), segments of at least 2 medians (the L1 cost's minimum in
ruptures) and ``jump=1`` (every position is a candidate).

Penalty per change point, in the cost's units (log-ratio):

    pen = PENALTY_SIGMAS * sigma * ln(k)          k medians
    sigma = clip(1.4826 * MAD(diff(log medians)) / sqrt(2), NOISE_FLOOR, NOISE_CEILING)

``sigma`` is a robust estimate of the session-to-session noise from first differences (a single step is
one outlying difference, which the MAD ignores); ``ln(k)`` is the BIC-like growth with the series length.
The ceiling of 3% keeps steps that matter against a 25% threshold cap findable: first differences
overstate alternating noise up to 2x, and a penalty scaled by that overstatement hid 15% steps.
``PENALTY_SIGMAS = 3`` was chosen by simulation (normal relative noise; 1,000 step-free series and 300
with a step at the midpoint per setting): with k = 8 medians it finds a false step in 2% / 4% / 5%
/ 25% of step-free series at 1% / 3% / 5% / 10% noise, but leaves fewer than 3 medians after it (losing
the history bound) in <= 1% up to 5% noise and 7% at 10%; it places a 30% step exactly in 96-99% of
series up to 5% noise (67% at 10%) and a 100% step in >= 91%. On the longer series of the session history
(``scripts/changepoint_comparison.py``, 200 series each) it finds a 10% step at session 20 of 40 at 2% noise
exactly once and at 20 +- 1 in 100%, and a change in 0 of 200 40-session series of pure 3% noise (1 of 2,000
with another seed: a false change rate of about 0.05%).

Significance of each change: Welch's t-test (``scipy.stats.ttest_ind(equal_var=False)``) of the log medians of
the segment before against the segment after it, two-sided. PELT places the change; the test says whether
the two levels differ by more than the sessions' own spread (``p < SIGNIFICANCE_ALPHA``).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import ruptures
from ruptures.costs import CostL1, NotEnoughPoints
from scipy import stats

from hwregress.summary import median_of

PENALTY_SIGMAS = 3.0
NOISE_FLOOR = 0.005  # 0.5% session-to-session noise: below it, timing resolution, not the machine
NOISE_CEILING = 0.03  # see the module doc: a larger sigma would hide steps that matter
MAD_TO_SIGMA = 1.4826  # sigma / MAD of a normal distribution
SIGNIFICANCE_ALPHA = 0.01


@dataclass(frozen=True)
class ChangePoint:
    """A level shift: ``index`` is the position of the first value after it; ``before`` and ``after`` the
    medians of the segments on either side (the unit of the values); ``p_value`` Welch's two-sided test of
    their log values."""

    index: int
    before: float
    after: float
    p_value: float

    @property
    def change(self) -> float:
        """Relative size of the shift: ``after / before - 1`` (-0.10 is a 10% drop)."""
        return self.after / self.before - 1.0

    @property
    def significant(self) -> bool:
        """``p_value < SIGNIFICANCE_ALPHA``."""
        return self.p_value < SIGNIFICANCE_ALPHA


def robust_noise(log_values: np.ndarray) -> float:
    """Session-to-session noise (sigma of the log, about the relative sd) from first differences.

    Args:
        log_values: shape (k,), k >= 2, natural logs of positive medians.

    Returns:
        ``1.4826 * MAD(diff) / sqrt(2)`` clipped to [NOISE_FLOOR, NOISE_CEILING].
    """
    diffs = np.diff(log_values)
    mad = median_of(np.abs(diffs - median_of(diffs)))
    return min(max(MAD_TO_SIGMA * mad / math.sqrt(2.0), NOISE_FLOOR), NOISE_CEILING)


def _checked_logs(medians: Sequence[float]) -> np.ndarray:
    values = np.asarray(medians, dtype=float)
    if values.size and (not np.all(np.isfinite(values)) or np.any(values <= 0)):
        raise ValueError(f"history medians must be finite and > 0, got {list(medians)!r}; "
                         "re-record the baseline with --update-baselines")
    return np.log(values)


class L1Cost(CostL1):
    """ruptures' ``CostL1`` (the sum of absolute deviations from the segment's median), the same numbers bit for bit
    in a third of the time: the median of a 1-D view from one ``np.partition`` instead of ``np.median``'s general
    path. PELT asks for about k^2/2 segments of k sessions (41,000 for 300): with ``CostL1`` that was 98% of the
    time of ``python -m hwregress history`` over a long history (docs/history.md)."""

    def fit(self, signal: np.ndarray) -> L1Cost:
        """``signal``: shape (k,) or (k, 1)."""
        super().fit(signal)
        self.values = np.ascontiguousarray(self.signal[:, 0])
        return self

    def error(self, start: int, end: int) -> float:
        """The cost of ``values[start:end]``; raises ``NotEnoughPoints`` under ``min_size`` values."""
        if end - start < self.min_size:
            raise NotEnoughPoints
        segment = self.values[start:end]
        half = (end - start) // 2
        if (end - start) % 2:
            median = np.partition(segment, half)[half]
        else:  # np.median's mean of the two middle values: (low + high) / 2
            low, high = np.partition(segment, (half - 1, half))[half - 1:half + 1]
            median = (low + high) / 2
        return np.abs(segment - median).sum()


def _breakpoints(logs: np.ndarray) -> list[int]:
    if logs.size < 3:
        return []
    penalty = PENALTY_SIGMAS * robust_noise(logs) * math.log(logs.size)
    pelt = ruptures.Pelt(custom_cost=L1Cost(), min_size=2, jump=1)
    return [int(b) for b in pelt.fit(logs.reshape(-1, 1)).predict(pen=penalty)[:-1]]


def change_points(medians: Sequence[float]) -> list[ChangePoint]:
    """Every level shift in ``medians``, in order, with its size and significance.

    Args:
        medians: session medians in time order, all > 0 (any unit), shape (k,).

    Raises:
        ValueError: a median is not finite or not > 0; the message names the value.
    """
    logs = _checked_logs(medians)
    breaks = _breakpoints(logs)
    edges = [0, *breaks, logs.size]
    return [ChangePoint(index=at, before=float(np.exp(np.median(logs[edges[i]:at]))),
                        after=float(np.exp(np.median(logs[at:edges[i + 2]]))),
                        p_value=welch_p_value(logs[edges[i]:at], logs[at:edges[i + 2]]))
            for i, at in enumerate(breaks)]


def welch_p_value(first: np.ndarray, second: np.ndarray) -> float:
    """Two-sided p-value of Welch's t-test between two samples of >= 2 values (Welch 1947). Two samples
    without spread are as different as their means: p = 0 when the means differ, 1 when they are equal."""
    if np.ptp(first) == 0 and np.ptp(second) == 0:
        return 0.0 if first[0] != second[0] else 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # near-identical samples: scipy warns of precision loss
        p_value = float(stats.ttest_ind(first, second, equal_var=False).pvalue)
    return p_value if math.isfinite(p_value) else 1.0


def last_change_index(medians: Sequence[float]) -> int:
    """Index of the first median after the last level shift (0: no shift found).

    Args:
        medians: session medians in recording order, all > 0 (any unit).

    Raises:
        ValueError: a median is not finite or not > 0; the message names the value.
    """
    return _last_change_of(tuple(medians))


@functools.lru_cache(maxsize=64)
def _last_change_of(medians: tuple[float, ...]) -> int:
    """:func:`last_change_index`, kept for the last few histories: a window's judge asks it of its baseline's history
    at every look, in the verdict and in its reach."""
    breaks = _breakpoints(_checked_logs(medians))
    return breaks[-1] if breaks else 0


def since_last_change(medians: Sequence[float]) -> list[float]:
    """The medians recorded since the last level shift (all of them when none is found).

    Raises:
        ValueError: see :func:`last_change_index`.
    """
    return [float(m) for m in medians[last_change_index(medians):]]

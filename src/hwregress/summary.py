"""Robust summaries of repeated measurements: median, quartiles, interquartile range, mean and extremes of one
sample list (:func:`summarize`), and the relative spread of a timed window (:func:`relative_iqr`).

The floor of the package: it imports nothing of hwregress, so every room may use it (a history row's summary in
``store/``, a window's stability in ``measure/``, a rank's figures in ``scaleout/``, the judge's comparison in
``judge/``). Quartiles are numpy's linear-interpolation percentiles (``numpy.percentile``'s default method).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


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

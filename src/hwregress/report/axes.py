"""Chart axes: bounds and ticks at round numbers (:func:`nice_axis`: 1-2-5 steps on a linear axis, powers of ten
on a log one), compact tick labels (:func:`tick_label`: SI prefixes), and which figures can be plotted at all (None,
nan, inf, beyond 1e±30, or not positive on a log axis cannot). Pure arithmetic: no SVG here."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any

NICE_MANTISSAS = (1, 2, 5)
MAX_LINEAR_TICKS = 8  # with the 1-2-5 steps this leaves 4 to 8 ticks on a linear axis
MAX_LOG_TICKS = 10
AXIS_LIMIT = 1e200  # nice_axis refuses bounds beyond this: 10**k stays a finite float for every tick
PLOT_LIMIT = 1e30  # no measured figure is this large; keeps every derived bound far inside AXIS_LIMIT
MAX_DATA_TICKS = 10  # at most this many distinct batch sizes get a tick each
_SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


@dataclass(frozen=True)
class Axis:
    """One chart axis: bounds ``low < high`` (both > 0 on a log axis), the tick values within them, the
    tick step of a linear 1-2-5 axis (None otherwise) and optional fixed tick labels."""

    low: float
    high: float
    ticks: tuple[float, ...]
    log: bool = False
    step: float | None = None
    fixed_labels: tuple[str, ...] | None = None

    def fraction(self, value: float) -> float:
        """Where ``value`` falls on the axis: 0 at ``low``, 1 at ``high`` (in log10 on a log axis)."""
        if self.log:
            low, high = math.log10(self.low), math.log10(self.high)
            return (math.log10(value) - low) / (high - low)
        return (value - self.low) / (self.high - self.low)

    def labels(self) -> list[str]:
        """One compact label per tick, precise to a thousandth of the step (a millionth of a log tick)."""
        if self.fixed_labels is not None:
            return list(self.fixed_labels)
        return [tick_label(t, self.step * 1e-3 if self.step else abs(t) * 1e-6) for t in self.ticks]


def nice_axis(low: float, high: float, log: bool = False) -> Axis:
    """Bounds and ticks at round numbers that contain the data range ``[low, high]``.

    Linear: the ticks are the multiples of a step of 1, 2 or 5 x 10^k, 4 to 8 of them, and the bounds
    are the outermost ticks (Heckbert, "Nice numbers for graph labels", Graphics Gems, 1990; the rule of
    d3-array's ``ticks`` and matplotlib's ``MaxNLocator``). A flat range is widened around its value.
    Log: the bounds are powers of ten; up to 3 decades get ticks at 1, 2 and 5 x 10^k, more decades a
    tick every decade (or every few decades, at most 10 ticks).

    Raises:
        ValueError: a bound is not finite or beyond ±1e200, ``low > high``, or on a log axis a bound is
            below 1e-200 (including zero and negatives).
    """
    if not all(math.isfinite(v) and abs(v) <= AXIS_LIMIT for v in (low, high)) or low > high:
        raise ValueError(f"axis range [{low!r}, {high!r}] must be finite, within ±{AXIS_LIMIT:g} and ordered")
    if log:
        if low < 1 / AXIS_LIMIT:
            raise ValueError(f"log axis range [{low!r}, {high!r}] must be positive (at least {1 / AXIS_LIMIT:g})")
        return _log_axis(low, high)
    return _linear_axis(*_widen_if_flat(low, high))


def _widen_if_flat(low: float, high: float) -> tuple[float, float]:
    magnitude = max(abs(low), abs(high))
    if magnitude < 1e-150:  # zero, or too small for 1-2-5 steps in floating point
        low = -1.0 if low < 0 else 0.0
        return low, 1.0 if high > 0 or low == 0 else 0.0
    if high - low < magnitude * 1e-9:
        center = (low + high) / 2
        return center - abs(center) * 0.1, center + abs(center) * 0.1
    return low, high


def _multiple(index: int, mantissa: int, exponent: int) -> float:
    """``index x mantissa x 10^exponent``, dividing for negative exponents (0.1 is not exact, 10 is)."""
    if exponent >= 0:
        return index * mantissa * 10.0**exponent
    return index * mantissa / 10.0**-exponent


def _linear_axis(low: float, high: float) -> Axis:
    first_exponent = math.floor(math.log10(high - low)) - 1  # a step this fine always gives > 8 ticks
    for exponent in range(first_exponent, first_exponent + 3):
        for mantissa in NICE_MANTISSAS:
            first = math.floor(low / _multiple(1, mantissa, exponent))
            last = math.ceil(high / _multiple(1, mantissa, exponent))
            while _multiple(first, mantissa, exponent) > low:
                first -= 1
            while _multiple(last, mantissa, exponent) < high:
                last += 1
            if last - first + 1 <= MAX_LINEAR_TICKS:
                ticks = tuple(_multiple(i, mantissa, exponent) for i in range(first, last + 1))
                return Axis(ticks[0], ticks[-1], ticks, step=_multiple(1, mantissa, exponent))
    raise AssertionError(f"no 1-2-5 step for [{low}, {high}]")  # unreachable: 10^(first+2) > high - low


def _log_axis(low: float, high: float) -> Axis:
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    while 10.0**first > low:  # log10 may round across a power of ten
        first -= 1
    while 10.0**last < high:
        last += 1
    last = max(last, first + 1)
    if last - first <= 3:
        ticks = [m * 10.0**k for k in range(first, last) for m in NICE_MANTISSAS] + [10.0**last]
        return Axis(10.0**first, 10.0**last, tuple(ticks), log=True)
    stride = next(s for s in count(1) if math.ceil(last / s) - math.floor(first / s) < MAX_LOG_TICKS)
    first, last = math.floor(first / stride) * stride, math.ceil(last / stride) * stride
    return Axis(10.0**first, 10.0**last, tuple(10.0**k for k in range(first, last + 1, stride)), log=True)


def data_axis(values: Sequence[float], log: bool) -> Axis:
    """An axis with a tick at each distinct value (batch sizes), padded so no point sits on the edge.
    More than ``MAX_DATA_TICKS`` distinct values get a :func:`nice_axis` instead.

    Raises:
        ValueError: as :func:`nice_axis`, for values it cannot place.
    """
    distinct = sorted(set(values))
    if len(distinct) > MAX_DATA_TICKS:
        return nice_axis(distinct[0], distinct[-1], log)
    low, high = (math.log10(distinct[0]), math.log10(distinct[-1])) if log else (distinct[0], distinct[-1])
    pad = 0.06 * (high - low) or (0.3 if log else max(abs(low) * 0.5, 1.0))
    low, high = low - pad, high + pad
    bounds = (10.0**low, 10.0**high) if log else (low, high)
    return Axis(bounds[0], bounds[1], tuple(distinct), log=log, fixed_labels=tuple(_exact(v) for v in distinct))


def tick_label(value: float, resolution: float) -> str:
    """The shortest compact text of ``value`` that is within ``resolution`` of it: ``0``, ``0.25``,
    ``750``, ``1.5k``, ``2.5M`` (SI prefixes k, M, G, T, P), ``3e-4`` below 0.01 and ``2e18`` from 1e18.
    A value not finite gives ``–``."""
    if not math.isfinite(value):
        return "–"
    resolution = max(resolution, abs(value) * 1e-15)
    if abs(value) <= resolution:
        return "0"
    if abs(value) < 1e-2 or abs(value) >= 1e18:
        return _exponent_label(value, resolution)
    scale, suffix = next(((s, p) for s, p in _SI_PREFIXES if abs(value) >= s), (1.0, ""))
    for decimals in range(17):
        text = f"{value / scale:.{decimals}f}"
        if abs(float(text) * scale - value) <= resolution:
            break
    return text + suffix


def _exponent_label(value: float, resolution: float) -> str:
    for digits in range(17):
        text = f"{value:.{digits}e}"
        if abs(float(text) - value) <= resolution:
            break
    mantissa, exponent = text.split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def format_value(value: Any) -> str:
    """A figure for a tooltip or a bar: 3 significant digits, compact (see :func:`tick_label`)."""
    if not _is_number(value):
        return "–" if value is None or isinstance(value, float) else str(value)
    if value == 0:
        return "0"
    return tick_label(float(f"{value:.3g}"), abs(value) * 1e-4)


def _exact(value: float) -> str:
    """A count as written (``1024``, not ``1.02k``); other numbers as :func:`format_value`."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else format_value(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _plottable(value: Any, log: bool) -> bool:
    if not _is_number(value) or abs(value) > PLOT_LIMIT:
        return False
    return value >= 1 / PLOT_LIMIT if log else True

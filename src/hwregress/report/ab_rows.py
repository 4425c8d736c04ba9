"""The A/B view's data (:mod:`hwregress.report.ab_view`): each A/B record read into an :class:`ABRow`, its pairs into
:class:`PairPoint`, and the section's :class:`ABHeader`, defensively (:mod:`hwregress.report.record_values`): a figure
missing, None, not finite or of another type is None here, never an error."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hwregress.report.axes import _plottable
from hwregress.report.record_values import mapping, number, text
from hwregress.store.results import TestRecord

STACKS = ("A", "B")
MAX_PAIR_INDEX = 10**6  # a pair index beyond this is not a pair's place; the pair is drawn at its position instead


@dataclass(frozen=True)
class StackText:
    """One stack as the header names it: ``label`` (A or B), its interpreter ``python`` (None: not recorded) and its
    ``settings`` (``KEY=VALUE``, in the order given; empty: the session's environment)."""

    label: str
    python: str | None
    settings: list[str]


@dataclass(frozen=True)
class ABHeader:
    """The section's header: both ``stacks``, the ``difference`` lines of their fingerprints (every A/B record's,
    each once, in order), the session's ``threshold`` (fraction), ``looks`` (planned pair counts) and ``seed``."""

    stacks: list[StackText]
    difference: list[str]
    threshold: float | None
    looks: list[int]
    seed: int | None


@dataclass(frozen=True)
class PairPoint:
    """One pair of windows: ``index`` (its place in time order, from 0), ``order`` (AB or BA; None: not recorded),
    throughputs ``a`` and ``b`` (the record's unit; None: the window failed or recorded nothing drawable), each side's
    ``a_error`` / ``b_error`` and why the pair was ``dropped`` (None: kept)."""

    index: int
    order: str | None
    a: float | None
    b: float | None
    a_error: str | None
    b_error: str | None
    dropped: str | None

    @property
    def name(self) -> str:
        """``pair 3 (BA)``."""
        return f"pair {self.index}" + (f" ({self.order})" if self.order else "")

    def value(self, stack: str) -> float | None:
        return self.a if stack == "A" else self.b

    def error(self, stack: str) -> str | None:
        return self.a_error if stack == "A" else self.b_error

    def first(self) -> str | None:
        """Which stack's window ran first (``A`` or ``B``); None when the order is not AB or BA."""
        return {"AB": "A", "BA": "B"}.get(self.order or "")


@dataclass(frozen=True)
class ABRow:
    """One A/B test: its ``record``, ``label`` (model mode bs dtype device), ``verdict``, the ``ratio`` B/A and its
    one-sided bounds ``ratio_low`` / ``ratio_high`` (x), ``threshold`` (fraction) and ``alpha`` (the level of the
    look that ended the test), ``pairs_kept`` of the pairs run, the looks planned and taken (pair counts), A's and
    B's median throughput over the kept pairs, every pair in time order, and the ``unit`` of the throughputs (the
    record's: samples/s for a model, tokens/s/user for a served one). None: not recorded."""

    record: TestRecord
    label: str
    verdict: str
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    threshold: float | None
    alpha: float | None
    pairs_kept: int | None
    looks_planned: list[int]
    looks_taken: list[int]
    a_throughput: float | None
    b_throughput: float | None
    pairs: list[PairPoint]
    unit: str = "samples/s"

    @property
    def dropped(self) -> list[PairPoint]:
        """The pairs left out of the verdict, in time order."""
        return [pair for pair in self.pairs if pair.dropped is not None]

    @property
    def band(self) -> tuple[float, float] | None:
        """``(1 - threshold, 1 + threshold)``; None without a threshold in [0, 1)."""
        if self.threshold is None or not 0 <= self.threshold < 1:
            return None
        return 1 - self.threshold, 1 + self.threshold

    @property
    def bounds_level(self) -> str:
        """``99.5%``: the confidence of each one-sided bound (1 - alpha); ``(1 − α)`` without a usable alpha."""
        if self.alpha is None or not 0 < self.alpha < 1:
            return "(1 − α)"
        return f"{(1 - self.alpha) * 100:.4g}%"


def is_ab(record: TestRecord) -> bool:
    """A test of an A/B session: it carries an ``ab`` sub-record."""
    return getattr(record, "ab", None) is not None


# --- the header ----------------------------------------------------------------------------------------------

def header(records: Sequence[TestRecord], session: Mapping[str, Any]) -> ABHeader:
    """The header of the A/B ``records`` (at least one): the stacks of the session's ``meta["ab"]`` (``session``),
    else of the first record that recorded them; every record's difference lines, each once."""
    stacks = mapping(session.get("stacks"))
    if not stacks:
        stacks = next((found for found in (mapping(r.ab.stacks) for r in records) if found), {})
    difference = list(dict.fromkeys(str(line) for r in records for line in _list(r.ab.difference)))
    threshold = number(session.get("threshold"))
    if threshold is None:
        threshold = next((t for t in (number(r.ab.threshold) for r in records) if t is not None), None)
    seed = number(session.get("seed"))
    if seed is None:
        seed = next((s for s in (number(r.ab.seed) for r in records) if s is not None), None)
    looks = _list(session.get("looks")) or next((_list(r.ab.looks_planned) for r in records if r.ab.looks_planned), [])
    return ABHeader([stack_text(label, stacks.get(label)) for label in STACKS], difference, threshold,
                    [int(n) for n in looks if isinstance(number(n), int)], seed if isinstance(seed, int) else None)


def stack_text(label: str, stack: Any) -> StackText:
    """Stack ``label`` as given (``{"python": path, "env": {KEY: VALUE}}``); what it lacks is empty."""
    found = mapping(stack)
    settings = [f"{key}={value}" for key, value in mapping(found.get("env")).items()]
    return StackText(label, text(found.get("python")), settings)


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


# --- one test ------------------------------------------------------------------------------------------------

def ab_row(record: TestRecord, session_threshold: float | None = None) -> ABRow:
    """The row of one A/B ``record``; ``session_threshold`` (fraction) where its sub-record has no threshold."""
    ab = record.ab
    ratio = _positive(ab.ratio)
    if ratio is None and ab.ratio is None:
        ratio = _positive(record.ratio)
    threshold = number(ab.threshold)
    b_median = number(ab.b_throughput)
    pairs = [pair_point(position, pair) for position, pair in enumerate(_list(ab.pairs))]
    return ABRow(
        record=record, label=row_label(record), verdict=str(record.verdict), ratio=ratio,
        ratio_low=_positive(ab.ratio_low), ratio_high=_positive(ab.ratio_high),
        threshold=threshold if threshold is not None else session_threshold, alpha=number(ab.alpha),
        pairs_kept=_count(ab.pairs_kept), looks_planned=_counts(ab.looks_planned), looks_taken=_counts(ab.looks_taken),
        a_throughput=number(ab.a_throughput), b_throughput=b_median if b_median is not None else number(
            record.throughput), pairs=pairs, unit=text(record.unit) or "samples/s")


def row_label(record: TestRecord) -> str:
    """``resnet18 train bs32 fp32 cpu``: what is recorded of model, mode, batch, dtype and device; the test's short
    id when none is."""
    batch = f"bs{record.batch_size}" if record.batch_size is not None else None
    parts = [text(p) for p in (record.model, record.mode, batch, record.dtype, record.device) if p not in (None, "")]
    return " ".join(p for p in parts if p) or str(record.test_id).rsplit("::", 1)[-1]


def pair_point(position: int, pair: Any) -> PairPoint:
    """The pair at ``position`` of the sub-record's list, its index the recorded one where it is a count."""
    def field(name: str) -> Any:  # an ABPairFigures as read, or its JSON object
        return pair.get(name) if isinstance(pair, Mapping) else getattr(pair, name, None)

    index, order = _count(field("index")), text(field("order"))
    return PairPoint(
        index=index if index is not None and index <= MAX_PAIR_INDEX else position, order=order or None,
        a=_drawable(field("a")), b=_drawable(field("b")), a_error=text(field("a_error")),
        b_error=text(field("b_error")), dropped=text(field("dropped")))


def _positive(value: Any) -> float | None:
    """A ratio that can be drawn: a finite number > 0 within the charts' limits."""
    found = number(value)
    return float(found) if found is not None and _plottable(found, log=True) else None


def _drawable(value: Any) -> float | None:
    found = number(value)
    return float(found) if found is not None and _plottable(found, log=False) else None


def _count(value: Any) -> int | None:
    found = number(value)
    return found if isinstance(found, int) and found >= 0 else None


def _counts(value: Any) -> list[int]:
    return [n for n in map(_count, _list(value)) if n is not None]

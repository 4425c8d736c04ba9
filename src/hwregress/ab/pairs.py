"""The pairs of an interleaved A/B session: each pair's two windows, which were kept for the verdict, and their
log-ratios.

A pair whose window failed on either side has no ratio: it is dropped. Dropping it unbalances the order
(:mod:`hwregress.ab.order`): the kept pairs would hold more of one order than of the other, and an order effect (the
first window of a pair faster or slower than the second, whatever the stack) would no longer cancel in the log-ratios.
So complete pairs of the surplus order are dropped too, the latest first, until the kept pairs hold as many AB as BA
pairs; Chromium's Pinpoint drops pairs of the other order for each failed pair so (google/skia-buildbot,
pinpoint/go/workflows/internal/pairwise_runner.go, ``removeDataUntilBalanced``). The latest go first so that the kept
pairs are those of the session's earliest stretch, as they would be had the session stopped sooner.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hwregress.ab.order import ORDERS

SIDES = ("A", "B")


@dataclass(frozen=True)
class Pair:
    """One pair of windows of an A/B session.

    Attributes:
        index: the pair's place in the session, from 0 (its entry in :func:`hwregress.ab.order.balanced_order`).
        order: ``"AB"`` (stack A's window ran first) or ``"BA"``.
        a: stack A's throughput in this pair's window (samples/s, higher is better); None when its window failed.
        b: stack B's throughput (samples/s); None when its window failed.
        a_error: why stack A's window failed (its error text), or None.
        b_error: why stack B's window failed, or None.
        dropped: why :func:`kept_in_balance` dropped the pair, or None (set on the pairs it returns as dropped).
        a_telemetry: stack A's window's clocks, power and temperature where NVML has them
            (:func:`hwregress.ab.worker.window_telemetry`), else None.
        b_telemetry: stack B's likewise.
        process: the process pair (from 0) whose workers ran the pair's windows, None where not known
            (:mod:`hwregress.ab.processes`).

    Raises:
        ValueError: ``order`` is neither ``"AB"`` nor ``"BA"``.
    """

    index: int
    order: str
    a: float | None
    b: float | None
    a_error: str | None = None
    b_error: str | None = None
    dropped: str | None = None
    a_telemetry: dict[str, Any] | None = None
    b_telemetry: dict[str, Any] | None = None
    process: int | None = None

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"pair {self.index}: order {self.order!r} is neither 'AB' nor 'BA' (which stack's window "
                             "ran first); give one of them")

    @property
    def complete(self) -> bool:
        """Both windows gave a throughput."""
        return self.a is not None and self.b is not None


def kept_in_balance(pairs: Sequence[Pair]) -> tuple[list[Pair], list[Pair]]:
    """``(kept, dropped)`` of ``pairs`` (module doc): a pair with a failed side is dropped, then complete pairs of
    the surplus order, the latest first, so that the kept pairs hold as many AB as BA pairs. Both lists are in index
    order; each dropped pair is a copy whose ``dropped`` says why.

    Raises:
        ValueError: two pairs share an index.
    """
    repeated = sorted(index for index, count in Counter(pair.index for pair in pairs).items() if count > 1)
    if repeated:
        raise ValueError(f"pair index {repeated[0]} appears more than once; each pair of windows has its own index")
    ordered = sorted(pairs, key=lambda pair: pair.index)
    dropped = {pair.index: replace(pair, dropped=_failure(pair)) for pair in ordered if not pair.complete}
    complete = [pair for pair in ordered if pair.complete]
    counts = Counter(pair.order for pair in complete)
    surplus_order = max(ORDERS, key=lambda order: counts[order])
    surplus = counts[surplus_order] - min(counts[order] for order in ORDERS)
    latest_of_surplus = [pair for pair in reversed(complete) if pair.order == surplus_order][:surplus]
    for pair in latest_of_surplus:
        dropped[pair.index] = replace(pair, dropped=(
            f"pair {pair.index} ({pair.order}) dropped to keep the orders balanced: the complete pairs held "
            f"{counts['AB']} AB and {counts['BA']} BA, and the latest {surplus} {surplus_order} pair(s) go"))
    kept = [pair for pair in complete if pair.index not in dropped]
    return kept, [dropped[index] for index in sorted(dropped)]


def log_ratios(pairs: Sequence[Pair]) -> list[float]:
    """``log(b / a)`` of each pair :func:`kept_in_balance` keeps of ``pairs``, in index order: positive when stack B
    was faster in that pair (natural log of a throughput ratio; 0.01 is about 1% faster). Pairs already kept give
    themselves back, so the kept pairs or all the session's pairs may be given.

    Raises:
        ValueError: a throughput of a complete pair is not a finite number > 0 (the message names the pair's index,
            the side and the value), or two pairs share an index.
    """
    for pair in pairs:
        if pair.complete:
            _check_throughput(pair, "A", pair.a)
            _check_throughput(pair, "B", pair.b)
    kept, _ = kept_in_balance(pairs)
    return [math.log(pair.b / pair.a) for pair in kept]  # type: ignore[operator]


def _check_throughput(pair: Pair, side: str, value: float | None) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"pair {pair.index}: stack {side}'s throughput {value!r} is not a finite number > 0 "
                         "(samples/s); a window that failed gives None and its error instead")


def _failure(pair: Pair) -> str:
    """Why ``pair`` (with a failed side) is dropped: each failed side with its error text."""
    failed = [f"stack {side}'s window failed" + (f": {error}" if error else "")
              for side, value, error in (("A", pair.a, pair.a_error), ("B", pair.b, pair.b_error)) if value is None]
    return f"pair {pair.index} ({pair.order}): " + "; ".join(failed)

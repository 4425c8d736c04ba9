"""The worker process as the unit of an A/B test.

A worker process keeps its own speed for its whole life: on the 2-core development VM two workers of one interpreter
differed by up to 10% for as long as they ran (resnet18 infer bs1, mobilenet_v3_small infer bs1: every pair of a
16-pair run on the same side, a fresh pair of processes on the other side or near 1), a difference the pairs of
windows do not cancel, since it does not change over time. Judging every pair as independent then calls two
identical stacks different: the first A/A sessions over the CPU tier with one pair of workers per device found a
`regression` and an `improvement`. So each process pair runs a few pairs of windows (``pairs_per_process``, a
multiple of 2, so that its pairs hold as many AB as BA), and the unit of the verdict is the process pair: the mean of
its log-ratios. Under no difference between the stacks, and with the processes of both stacks drawn alike, those means
are independent and symmetric about 0, as the signed-rank test and the Hodges-Lehmann interval need. Kalibera & Jones
("Rigorous benchmarking in reasonable time", ISMM 2013) treat VM invocations the same way: the process is a random
effect, and repetitions must span processes.

A process pair one of whose windows failed has all its pairs dropped (with the reason): what is left of it would be
one order only. Pairs without a process (``process`` None) are each their own unit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from hwregress.ab.pairs import Pair, kept_in_balance


def kept_processes(pairs: Sequence[Pair]) -> tuple[list[Pair], list[Pair]]:
    """``(kept, dropped)`` of ``pairs``: every pair of a process pair with a failed window is dropped, saying which
    window failed; pairs without a process are kept in balance as :func:`hwregress.ab.pairs.kept_in_balance` keeps
    them. Both lists are in index order."""
    failed = {pair.process: pair for pair in pairs if pair.process is not None and not pair.complete}
    dropped = [replace(pair, dropped=_reason(pair, failed[pair.process])) for pair in pairs
               if pair.process in failed]
    rest = [pair for pair in pairs if pair.process not in failed or pair.process is None]
    kept, unbalanced = kept_in_balance(rest)
    return kept, sorted(dropped + unbalanced, key=lambda pair: pair.index)


def _reason(pair: Pair, failed: Pair) -> str:
    side = "A" if failed.a is None else "B"
    error = failed.a_error if side == "A" else failed.b_error
    return (f"pair {pair.index} dropped with every pair of process pair {pair.process}: stack {side}'s window of pair "
            f"{failed.index} failed ({error})")


def unit_log_ratios(kept: Sequence[Pair]) -> list[float]:
    """The units of the verdict from ``kept`` pairs (all complete, with finite throughputs > 0): the mean of
    ``log(b / a)`` over each process pair's pairs, in process order, then each pair without a process on its own."""
    by_process: dict[int, list[float]] = {}
    alone: list[float] = []
    for pair in sorted(kept, key=lambda pair: pair.index):
        ratio = math.log(pair.b / pair.a)  # type: ignore[operator]
        if pair.process is None:
            alone.append(ratio)
        else:
            by_process.setdefault(pair.process, []).append(ratio)
    return [sum(ratios) / len(ratios) for _, ratios in sorted(by_process.items())] + alone

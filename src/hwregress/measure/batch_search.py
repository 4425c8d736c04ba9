"""``--batch-sizes max``: the largest power-of-two batch that fits on a device, found by doubling with
out-of-memory as the signal and device memory released between tries.

The search doubles only; it does not bisect between the last batch that fit and the first that ran out of
memory. The recorded figure is therefore a power of two, which is what ``--batch-sizes max`` promises:
a batch size off the powers of two changes the kernels the libraries pick (cuBLAS/cuDNN tile and algorithm
choices, vectorised tails), so a bisected 48 or 1536 would measure different kernels from the power-of-two
batch sizes beside it, and a small change in free memory from one run to the next would move the batch size
itself; the baseline must compare like with like. The price is that the figure can be up to half the true
maximum.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass

from hwregress.measure.memory import release_device_memory
from hwregress.measure.out_of_memory import OutOfMemory, is_out_of_memory


class OutOfMemoryAtStart(OutOfMemory):
    """Even the first batch size of the search ran out of memory; no batch size fits."""


@dataclass(frozen=True)
class MaxBatch:
    """Outcome of :func:`find_max_batch`.

    Attributes:
        batch_size: the largest power of two that ran.
        first_oom: the smallest power of two that ran out of memory; None when the search reached ``limit``
            without running out of memory.
        tried: the batch sizes tried, in order (the last is ``first_oom`` when there was one).
        limit: the cap searched up to.
    """

    batch_size: int
    first_oom: int | None
    tried: tuple[int, ...]
    limit: int


def _is_power_of_two(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and value & (value - 1) == 0


def _validate(start: int, limit: int) -> None:
    """Raises ValueError naming the offending value unless ``start`` and ``limit`` are powers of two with
    ``start <= limit``."""
    if not _is_power_of_two(start):
        raise ValueError(f"start must be a positive power of two, got {start!r}")
    if not _is_power_of_two(limit):
        raise ValueError(f"limit must be a positive power of two, got {limit!r}")
    if start > limit:
        raise ValueError(f"start ({start}) must not exceed limit ({limit})")


def _runs_out_of_memory(try_batch: Callable[[int], None], batch_size: int) -> bool:
    """Run one try: False when it ran, True when it ran out of memory; any other exception propagates.

    Returns outside the ``except`` block so that the caught error, its traceback and the frames (and
    tensors) that traceback holds are gone before the caller releases memory (as ``bench.run_model`` does).
    """
    ran_out = False
    try:
        try_batch(batch_size)
    except Exception as error:
        if not is_out_of_memory(error):
            raise
        ran_out = True
    return ran_out


def find_max_batch(try_batch: Callable[[int], None], device: str, limit: int = 4096, start: int = 1,
                   release: Callable[[str], None] | None = None) -> MaxBatch:
    """The largest power-of-two batch size for which ``try_batch`` runs on ``device``.

    Tries ``start``, ``2 * start``, ``4 * start`` ... up to and including ``limit`` while ``try_batch(b)``
    returns; the first out-of-memory (:func:`hwregress.measure.out_of_memory.is_out_of_memory`) ends the search. After
    every try that ran or ran out of memory, ``gc.collect()`` and then ``release(device)`` run (default
    :func:`hwregress.measure.memory.release_device_memory`), so the next try starts from a clean allocator. Doubling
    only, no bisection: see the module docstring for why the figure is a power of two.

    Args:
        try_batch: runs the workload at the given batch size (samples); it should run what the benchmark
            will run (a training step, say), since its peak memory is what must fit.
        device: device spec such as ``"cuda:0"`` or ``"cpu"``, passed to ``release`` and used in messages.
        limit: the largest batch size tried, a power of two.
        start: the first batch size tried, a power of two, at most ``limit``.
        release: frees device memory between tries; takes ``device``.

    Returns:
        :class:`MaxBatch` with the largest batch size that ran, the first that ran out of memory (None when
        ``limit`` ran), every size tried and ``limit``.

    Raises:
        ValueError: ``start`` or ``limit`` is not a positive power of two, or ``start > limit``.
        OutOfMemoryAtStart: ``start`` itself ran out of memory (memory has been released).
        Exception: anything ``try_batch`` raises that is not an out-of-memory, unchanged (nothing is
            released then: the propagating traceback still holds the try's tensors).
    """
    _validate(start, limit)
    release_memory = release_device_memory if release is None else release
    tried: list[int] = []
    largest_fit: int | None = None
    first_oom: int | None = None
    batch_size = start
    while batch_size <= limit:
        tried.append(batch_size)
        ran_out = _runs_out_of_memory(try_batch, batch_size)
        gc.collect()
        release_memory(device)
        if ran_out:
            first_oom = batch_size
            break
        largest_fit = batch_size
        batch_size *= 2
    if largest_fit is None:
        raise OutOfMemoryAtStart(f"out of memory at batch {start} on {device}: no batch size fits")
    return MaxBatch(batch_size=largest_fit, first_oom=first_oom, tried=tuple(tried), limit=limit)

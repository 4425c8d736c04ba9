"""The peak-memory meter against known allocations.

Two windows of :class:`hwregress.measure.memory.PeakMemoryMeter`, as a test uses it: one allocates and frees a block
of known size while an earlier block stays held (the peak must be the block, not what was held before); the other
allocates a one-time transient (as cuDNN's algorithm search does on a shape's first call), settles, then runs steady
steps that each allocate a smaller block (the peak must be the steady step's, not the transient). CUDA: the
allocator's counters, exact to the byte. CPU: the process's peak RSS, within page and allocator granularity.
"""

from __future__ import annotations

import torch

from hwregress.check.result import CheckResult, judged
from hwregress.hardware.devices import synchronize
from hwregress.hardware.facts import device_kind
from hwregress.measure.memory import PeakMemoryMeter

NAME = "allocator"
MIB = 2**20
BLOCK, HELD, TRANSIENT, STEADY = 256 * MIB, 64 * MIB, 512 * MIB, 32 * MIB
HOST_SLACK = (0.9, 1.25)  # RSS: pages and the C allocator's own blocks around a tensor


def check(device: str) -> CheckResult:
    """Run the allocator check on ``device`` (see the module doc)."""
    held = _touched(HELD, device)
    synchronize(device)
    with PeakMemoryMeter(device) as window:
        block = _touched(BLOCK, device)
        del block
        synchronize(device)
    with PeakMemoryMeter(device) as settled:
        transient = _touched(TRANSIENT, device)
        del transient
        synchronize(device)
        settled.settle()
        for _ in range(3):
            step = _touched(STEADY, device)
            del step
        synchronize(device)
    del held
    figures = {"block_mib": BLOCK / MIB, "window_peak_mib": _mib(window.peak_bytes),
               "steady_step_mib": STEADY / MIB, "settled_peak_mib": _mib(settled.peak_bytes)}
    if device_kind(device) == "cuda":
        ok = window.peak_bytes == BLOCK and settled.peak_bytes == STEADY
        compared = "the allocator's peak over a freed block and over settled steady steps against their exact sizes"
    else:
        low, high = HOST_SLACK
        ok = (low * BLOCK <= (window.peak_bytes or 0) <= high * BLOCK
              and (settled.peak_bytes or 0) <= high * STEADY + 16 * MIB)
        compared = ("the peak RSS growth over a freed block and over settled steady steps against their sizes "
                    f"(x{low}-x{high}, pages and allocator blocks)")
    return judged(NAME, device, ok, compared, figures,
                  "hwregress.measure.memory.PeakMemoryMeter: a peak that includes what was held before the window, "
                  "or the first call's transient after settle(), makes memory verdicts depend on the test order")


def _touched(size: int, device: str) -> torch.Tensor:
    """``size`` bytes on ``device``, every page written (an untouched host allocation is not resident)."""
    return torch.empty(size, dtype=torch.uint8, device=device).fill_(1)


def _mib(value: int | None) -> float | None:
    return None if value is None else round(value / MIB, 2)

"""How much of a profiled window had a collective in flight: gloo's collective events on the CPU (its worker
threads), NCCL's kernels on CUDA devices. Overlapping intervals (buckets reduced while backward still computes,
several gloo threads) count once: the share is the union of the intervals over the window's wall time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

GLOO_PREFIX = "gloo:"  # torch's record_param_comms names gloo's work "gloo:all_reduce", "gloo:broadcast", ...
NCCL_KERNEL_MARKERS = ("nccl",)  # ncclDevKernel_AllReduce_Sum_f32_RING_LL, ncclKernel_..., by NCCL version


def is_communication(name: str, device_kind: str) -> bool:
    """Whether a profiler event of ``name`` is communication on ``device_kind`` (``cpu``: gloo events; ``cuda``:
    NCCL kernels)."""
    lowered = name.lower()
    if device_kind == "cuda":
        return any(marker in lowered for marker in NCCL_KERNEL_MARKERS) and "kernel" in lowered
    return lowered.startswith(GLOO_PREFIX)


def union_us(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of the union of ``(start, end)`` intervals (microseconds)."""
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


def communication_share(events: Iterable[Any], device_kind: str) -> dict[str, float | None]:
    """``comm_share`` (fraction of the window), ``comm_us`` and ``window_us`` from ``torch.profiler`` events
    (objects with ``name`` and ``time_range.start``/``.end`` in microseconds). The window spans every event.

    Raises:
        ValueError: no events (the profiler recorded nothing).
    """
    events = list(events)
    if not events:
        raise ValueError("the profiler recorded no events: the communication share cannot be measured "
                         "(--profile-steps 0 skips it)")
    starts = [e.time_range.start for e in events]
    ends = [e.time_range.end for e in events]
    window = max(ends) - min(starts)
    comm = union_us((e.time_range.start, e.time_range.end) for e in events if is_communication(e.name, device_kind))
    return {"comm_share": comm / window if window > 0 else None, "comm_us": comm, "window_us": window}

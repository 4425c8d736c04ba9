"""All-reduce bus bandwidth over message sizes, measured the way NVIDIA's nccl-tests measure it.

For each message size every rank all-reduces a float32 buffer of that many bytes, ``iterations`` times back to
back between device synchronizations; the time of one all-reduce is the round's time over its iterations, and
the job's time is the slowest rank's (the collective ends when its last rank ends; nccl-tests averages over ranks by
default, which reads the same when the ranks are balanced and higher when one lags). Then

    algbw = bytes / time        busbw = algbw x 2 (W - 1) / W

``busbw`` (nccl-tests, doc/PERFORMANCE.md) is what each rank's link carried in a ring all-reduce, so it is
comparable to the link's per-direction bandwidth whatever the world size.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from hwregress.hardware.devices import synchronize
from hwregress.scaleout.rank_timing import max_over_ranks

if TYPE_CHECKING:
    from hwregress.scaleout.job import JobSpec
    from hwregress.scaleout.rank import RankContext

CPU_SIZES = tuple(4**k * 1024 for k in range(0, 8))  # 1 KiB .. 16 MiB by 4x
GPU_SIZES = tuple(4**k * 1024 for k in range(0, 11))  # 1 KiB .. 1 GiB by 4x
MIN_ROUND_S = 0.02  # a round of small messages repeats them until it lasts this long


def bus_bandwidth_gbps(size_bytes: float, seconds: float, world_size: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in GB/s (1e9 bytes/s) of one all-reduce of ``size_bytes`` that took ``seconds`` over
    ``world_size`` ranks (nccl-tests' definitions, see the module docstring).

    Raises:
        ValueError: a non-positive time or world size.
    """
    if seconds <= 0 or world_size < 1:
        raise ValueError(f"an all-reduce needs a positive time and world size, got {seconds} s over {world_size} ranks")
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * 2 * (world_size - 1) / world_size


def message_sizes(device_kind: str) -> list[int]:
    """The sweep: 1 KiB to 1 GiB on GPUs, to 16 MiB on the CPU (gloo over loopback), by factors of 4."""
    return list(GPU_SIZES if device_kind == "cuda" else CPU_SIZES)


def _time_round(buffer: torch.Tensor, iterations: int, device: str) -> float:
    dist.barrier()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(buffer)
    synchronize(device)
    return float(max_over_ranks((time.perf_counter() - start) / iterations, device, torch.float64))


def _iterations_for(buffer: torch.Tensor, device: str) -> int:
    """All-reduces per round so a round lasts :data:`MIN_ROUND_S` on the slowest rank (the job agrees)."""
    single = _time_round(buffer, 1, device)
    wanted = max(1, int(MIN_ROUND_S / single)) if single > 0 else 1
    return int(max_over_ranks(wanted, device))


def measure_rank(spec: JobSpec, context: RankContext) -> dict[str, Any]:
    """The sweep on this rank: for each size the median per-op time over ``rounds`` rounds and the bandwidths;
    the largest size also keeps every round's bus bandwidth (the samples a baseline judges)."""
    device = context.device
    world = dist.get_world_size()
    rounds = int(spec.plan.get("rounds", 10))
    curve = []
    largest_samples: list[float] = []
    context.on_warmup()
    for index, size in enumerate(spec.message_sizes):
        context.status(f"all-reduce {size} bytes ({index + 1} of {len(spec.message_sizes)})")
        buffer = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        dist.all_reduce(buffer)  # warmup: connections and algorithm selection
        iterations = _iterations_for(buffer, device)
        times = [_time_round(buffer, iterations, device) for _ in range(rounds)]
        median = statistics.median(times)
        algbw, busbw = bus_bandwidth_gbps(buffer.numel() * 4, median, world)
        curve.append({"bytes": buffer.numel() * 4, "time_us": median * 1e6, "algbw_gbps": algbw, "busbw_gbps": busbw,
                      "iterations": iterations})
        if index == len(spec.message_sizes) - 1:
            largest_samples = [bus_bandwidth_gbps(buffer.numel() * 4, t, world)[1] for t in times]
        del buffer
    return {"curve": curve, "busbw_samples": largest_samples}

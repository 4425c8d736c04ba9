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
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from hwregress.hardware.devices import synchronize
from hwregress.judge.window_verdict import check_from_terms
from hwregress.measure.timing import TimingPlan, in_work_units, measure
from hwregress.scaleout.rank_timing import agree_on_max, job_window, max_over_ranks, window_report

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
    return JobRoundTimer(device).time_round(lambda: _all_reduce_times(buffer, iterations), iterations) / iterations


def _all_reduce_times(buffer: torch.Tensor, iterations: int) -> None:
    for _ in range(iterations):
        dist.all_reduce(buffer)


class JobRoundTimer:
    """A round timer for collectives (:class:`hwregress.measure.timing.RoundTimer`): every rank starts the round
    together (a barrier), and the round's time is the slowest rank's, so all ranks report the same seconds."""

    def __init__(self, device: str, clock: Callable[[], float] = time.perf_counter) -> None:
        self.device = device
        self.clock = clock

    def time_round(self, run_steps: Callable[[], None], steps: int) -> float:
        dist.barrier()
        synchronize(self.device)
        start = self.clock()
        run_steps()
        synchronize(self.device)
        return float(max_over_ranks(self.clock() - start, self.device, torch.float64))


def _iterations_for(buffer: torch.Tensor, device: str) -> int:
    """All-reduces per round so a round lasts :data:`MIN_ROUND_S` on the slowest rank (the job agrees)."""
    single = _time_round(buffer, 1, device)
    wanted = max(1, int(MIN_ROUND_S / single)) if single > 0 else 1
    return int(max_over_ranks(wanted, device))


def measure_rank(spec: JobSpec, context: RankContext) -> dict[str, Any]:
    """The sweep on this rank: for each size the median per-op time over ``rounds`` rounds and the bandwidths.
    The largest size is the judged one: it is timed like every judged window (:func:`judged_window`), keeps every
    round's bus bandwidth (the samples a baseline judges) and reports the window's telemetry and host health."""
    device = context.device
    world = dist.get_world_size()
    rounds = int(spec.plan.get("rounds", 10))
    curve = []
    judged: dict[str, Any] = {}
    context.on_warmup()
    for index, size in enumerate(spec.message_sizes):
        context.status(f"all-reduce {size} bytes ({index + 1} of {len(spec.message_sizes)})")
        buffer = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        dist.all_reduce(buffer)  # warmup: connections and algorithm selection
        if index == len(spec.message_sizes) - 1:
            judged = judged_window(buffer, spec, device)
            times, iterations = judged["seconds"], judged["steps_per_round"]
        else:
            iterations = _iterations_for(buffer, device)
            times = [_time_round(buffer, iterations, device) for _ in range(rounds)]
        median = statistics.median(times)
        algbw, busbw = bus_bandwidth_gbps(buffer.numel() * 4, median, world)
        curve.append({"bytes": buffer.numel() * 4, "time_us": median * 1e6, "algbw_gbps": algbw, "busbw_gbps": busbw,
                      "iterations": iterations})
        del buffer
    return {"curve": curve, **judged}


def judged_window(buffer: torch.Tensor, spec: JobSpec, device: str) -> dict[str, Any]:
    """All-reduces of ``buffer`` timed by :func:`hwregress.measure.timing.measure` with the session's plan, inside the
    rank's telemetry and host-health window: rounds of at least ``min_round_s``; judged against a baseline
    (``spec.verdict``), looked at at the planned looks while undecided, a lean to a regression confirmed, within the
    time budget; without one, a noisy window extended; every decision agreed by all ranks. Without it a short fixed
    window of gloo all-reduces moved too much between unchanged sessions to be judged
    (docs/measured.md, 'Noise between sessions').

    Returns:
        ``seconds`` (per-op seconds of each round), ``busbw_samples`` (each round's bus bandwidth, GB/s),
        ``steps_per_round`` (all-reduces per round), ``stable``, ``extended_rounds``, ``verdict_rounds``, ``looks``
        (:class:`hwregress.store.figures.LookFigures` as a dict, or None), and the window's ``telemetry``,
        ``telemetry_series`` and ``health``
        (:func:`hwregress.scaleout.rank_timing.window_report`).
    """
    world = dist.get_world_size()
    bus_gb_per_op = buffer.numel() * 4 * 2 * (world - 1) / world / 1e9  # busbw = this / seconds per op
    plan = TimingPlan(**{**spec.plan, "warmup_steps": 1})  # the caller's all-reduce warmed up
    window = job_window(device, spec.telemetry_interval_s)
    timing = measure(lambda: dist.all_reduce(buffer), JobRoundTimer(device), plan, window=window,
                     agree=agree_on_max(device), settled=in_work_units(check_from_terms(spec.verdict), bus_gb_per_op))
    return {"seconds": timing.step_seconds, "busbw_samples": [bus_gb_per_op / t for t in timing.step_seconds],
            "steps_per_round": timing.steps_per_round, "stable": timing.stable,
            "extended_rounds": timing.extended_rounds, "verdict_rounds": timing.verdict_rounds,
            "looks": asdict(timing.looks) if timing.looks else None, **window_report(window)}

"""What every rank's timing shares: a round timer that reports each timed round (the watchdog's heartbeat), the
job's agreement on a number (the maximum over ranks), and the window's telemetry and host health."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import psutil
import torch
import torch.distributed as dist

from hwregress.hardware.health import CpuHealthProbe
from hwregress.hardware.telemetry import TelemetrySampler
from hwregress.measure.timing import RoundTimer
from hwregress.scaleout.launch import job_owner


class HeartbeatTimer:
    """A round timer that reports each timed round to ``on_round(index)`` before running it (the calibration
    round, timed alone first, is not reported)."""

    def __init__(self, inner: RoundTimer, on_round: Callable[[int], None]) -> None:
        self.inner = inner
        self.on_round = on_round
        self.calls = 0

    def time_round(self, run_steps: Callable[[], None], steps: int) -> float:
        if self.calls:
            self.on_round(self.calls - 1)
        self.calls += 1
        return self.inner.time_round(run_steps, steps)


def job_window(device: str, interval_s: float) -> TelemetrySampler:
    """The telemetry of a rank's timed window (NVML on a CUDA device, the host's CPU otherwise) with the host's
    health read with the job as "us" (:func:`job_health_probe`)."""
    return TelemetrySampler(device, interval_s, health_probe=job_health_probe())


def window_report(window: TelemetrySampler) -> dict[str, Any]:
    """What a rank reports of its window's telemetry: the summary (energy in J included), the thinned series and
    the host's health."""
    return {"telemetry": window.summary(), "telemetry_series": window.compact_series(), "health": window.health}


def job_health_probe() -> CpuHealthProbe:
    """The host's health over a rank's timed window with this node's whole job as "us": the pytest worker that
    launched the job (:func:`hwregress.scaleout.launch.job_owner`) and every process under it (the driver and its
    elastic agent, every local rank, their workers), so neither the other ranks nor the test watching them count
    as contention, while anything else on the machine (another pytest-xdist worker included) does
    (:class:`hwregress.hardware.health.CpuHealthProbe`). Where the owner is unknown: the rank's parent, the agent, and
    the ranks under it."""
    return CpuHealthProbe(process=job_owner() or psutil.Process(os.getppid()))


def max_over_ranks(value: float, device: str, dtype: torch.dtype = torch.int64) -> float:
    """The maximum of ``value`` over the job's ranks (an all-reduce of one number on ``device``, which must suit the
    backend: a CUDA device for NCCL)."""
    tensor = torch.tensor([value], dtype=dtype, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.item()


def agree_on_max(device: str) -> Callable[[int], int]:
    """``agree(value)`` for :func:`hwregress.measure.timing.measure`: the maximum of an integer over the job's ranks."""
    return lambda value: int(max_over_ranks(value, device))

"""What every rank's timing shares: a round timer that reports each timed round (the watchdog's heartbeat), and
the job's agreement on a number (the maximum over ranks)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from hwregress.timing import RoundTimer


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


def max_over_ranks(value: float, device: str, dtype: torch.dtype = torch.int64) -> float:
    """The maximum of ``value`` over the job's ranks (an all-reduce of one number on ``device``, which must suit the
    backend: a CUDA device for NCCL)."""
    tensor = torch.tensor([value], dtype=dtype, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.item()


def agree_on_max(device: str) -> Callable[[int], int]:
    """``agree(value)`` for :func:`hwregress.timing.measure`: the maximum of an integer over the job's ranks."""
    return lambda value: int(max_over_ranks(value, device))

"""Device-synchronized timing of a step function: warmup, calibrated rounds, noise-driven extension.

A *round* runs ``steps_per_round`` steps back to back and is timed as a whole, so per-round timer
overhead is amortized and asynchronous launches are never mistaken for work done: CUDA rounds are
timed with CUDA events recorded on the stream, every other device by synchronizing at round edges.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from hwregress.hardware.devices import synchronize
from hwregress.hardware.facts import device_kind
from hwregress.summary import relative_iqr


class RoundTimer(Protocol):
    """Times one round: runs ``run_steps()`` (which executes ``steps`` steps) and returns seconds."""

    def time_round(self, run_steps: Callable[[], None], steps: int) -> float: ...


class HostClockTimer:
    """Synchronize the device, read ``clock``, run, synchronize, read again (seconds)."""

    def __init__(self, device: str, clock: Callable[[], float] = time.perf_counter) -> None:
        self.device = device
        self.clock = clock

    def time_round(self, run_steps: Callable[[], None], steps: int) -> float:
        synchronize(self.device)
        start = self.clock()
        run_steps()
        synchronize(self.device)
        return self.clock() - start


class CudaEventTimer:
    """CUDA events recorded on the current stream around the round; ``elapsed_time`` in seconds."""

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)

    def time_round(self, run_steps: Callable[[], None], steps: int) -> float:
        with torch.cuda.device(self.device):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(self.device)
            start.record()
            run_steps()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0


def default_timer(device: str) -> RoundTimer:
    """CUDA events on CUDA devices, host clock with synchronization elsewhere."""
    return CudaEventTimer(device) if device_kind(device) == "cuda" else HostClockTimer(device)


@dataclass(frozen=True)
class TimingPlan:
    """How to measure.

    Attributes:
        warmup_steps: untimed steps first (compilation, cuDNN autotuning, allocator growth).
        rounds: timed rounds at least.
        min_round_s: a round lasts at least this long (steps per round calibrated after warmup).
        max_rel_iqr: a window whose IQR/median exceeds this is extended round by round ...
        budget_s: ... until stable or the timed rounds have taken this many seconds in total.
        confirm_s: a window whose verdict leans to a regression is extended until its timed rounds have lasted
            this long (within ``budget_s``), so one slow phase of the host cannot condemn a 1-second window
            (see :func:`hwregress.judge.window_verdict.verdict_settled`).
    """

    warmup_steps: int = 3
    rounds: int = 10
    min_round_s: float = 0.1
    max_rel_iqr: float = 0.10
    budget_s: float = 30.0
    confirm_s: float = 10.0

    def __post_init__(self) -> None:
        if self.warmup_steps < 1:
            raise ValueError(f"warmup steps must be >= 1, got {self.warmup_steps}")
        if self.rounds < 3:
            raise ValueError(f"rounds must be >= 3 for a median and IQR, got {self.rounds}")
        if self.min_round_s <= 0 or self.budget_s <= 0:
            raise ValueError(f"min round time and time budget must be > 0 s, got {self.min_round_s}, {self.budget_s}")
        if self.confirm_s < 0:
            raise ValueError(f"confirmation time must be >= 0 s, got {self.confirm_s}")


@dataclass
class Timing:
    """A measured window.

    Attributes:
        round_seconds: wall (device) time of each timed round, seconds.
        steps_per_round: steps in every round.
        warmup_steps: untimed steps run first.
        stable: IQR/median of the per-step times is within the plan's bound.
        extended_rounds: rounds added beyond the plan because the window was noisy or its verdict open.
        verdict_rounds: how many of those were added while the verdict was open (``settled`` said False).
    """

    round_seconds: list[float]
    steps_per_round: int
    warmup_steps: int
    stable: bool
    extended_rounds: int = 0
    verdict_rounds: int = 0
    step_seconds: list[float] = field(init=False)

    def __post_init__(self) -> None:
        self.step_seconds = [s / self.steps_per_round for s in self.round_seconds]


def measure(step: Callable[[], None], timer: RoundTimer, plan: TimingPlan,
            round_driver: Callable[[Callable[[], None], int], None] | None = None,
            window: AbstractContextManager[Any] | None = None,
            agree: Callable[[int], int] | None = None,
            settled: VerdictCheck | None = None) -> Timing:
    """Time ``step`` on one device following ``plan``.

    Warmup steps run untimed; the last warmup step is timed alone to choose ``steps_per_round`` so a
    round lasts ``plan.min_round_s``. ``round_driver(run_round, n)`` calls ``run_round`` ``n`` times
    for the planned rounds (pytest-benchmark's ``pedantic`` drives them when it is active, so its table
    shows the same rounds); extension rounds run here. Every timed round runs inside ``window`` (a
    telemetry sampler, say), which warmup never enters.

    Ranks of one data-parallel job must run the same steps, or a collective waits for ever: ``agree(value)``
    turns each rank's own choice into the job's (the maximum over ranks, say) for the steps per round and for
    each "extend by one round?" decision (1 or 0).

    ``settled(step_seconds, window_s)`` says whether the verdict against the baseline is decided by the per-step
    seconds so far and the timed rounds' total seconds (:func:`hwregress.judge.window_verdict.verdict_settled`); while
    it says False the window is extended as a noisy one is, within ``plan.budget_s``. The rounds are never filtered.

    Raises:
        whatever ``step`` raises (``torch.OutOfMemoryError`` included) after the timer is left clean.
    """
    for _ in range(plan.warmup_steps - 1):
        step()
    single = timer.time_round(step, 1)
    steps_per_round = max(1, math.ceil(plan.min_round_s / single)) if single > 0 else 1
    agree = agree or (lambda value: value)
    steps_per_round = agree(steps_per_round)

    round_seconds: list[float] = []

    def run_steps() -> None:
        for _ in range(steps_per_round):
            step()

    def run_round() -> None:
        round_seconds.append(timer.time_round(run_steps, steps_per_round))

    def verdict_open() -> bool:
        if settled is None:
            return False
        return not settled([seconds / steps_per_round for seconds in round_seconds], sum(round_seconds))

    extended = verdict_rounds = 0
    with window if window is not None else nullcontext():
        (round_driver or _loop)(run_round, plan.rounds)
        while True:  # every rank of a job takes each decision through agree(), the budget check included
            open_verdict = verdict_open()
            wanted = ((relative_iqr(round_seconds) > plan.max_rel_iqr or open_verdict)
                      and sum(round_seconds) < plan.budget_s)
            if not agree(int(wanted)):
                break
            run_round()
            extended += 1
            verdict_rounds += int(open_verdict)
    return Timing(
        round_seconds=round_seconds,
        steps_per_round=steps_per_round,
        warmup_steps=plan.warmup_steps,
        stable=relative_iqr(round_seconds) <= plan.max_rel_iqr,
        extended_rounds=extended,
        verdict_rounds=verdict_rounds,
    )


VerdictCheck = Callable[[list[float], float], bool]


def in_work_units(settled: VerdictCheck | None, work_per_step: float) -> VerdictCheck | None:
    """Adapt a verdict check on throughput samples (units of work per second, as the baseline stores them) to the
    per-step seconds :func:`measure` passes: ``work_per_step / seconds`` per step. None stays None."""
    if settled is None:
        return None
    return lambda step_seconds, window_s: settled([work_per_step / s for s in step_seconds if s > 0], window_s)


def _loop(run_round: Callable[[], None], rounds: int) -> None:
    for _ in range(rounds):
        run_round()

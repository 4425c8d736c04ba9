"""Device-synchronized timing of a step function: warmup, calibrated rounds, and a window that grows at planned looks
while its verdict against the baseline is undecided (without a baseline: while it is noisy).

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
from hwregress.store.figures import LookFigures
from hwregress.store.verdicts import Verdict
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
        rounds: timed rounds at least of a window without a baseline (what a recording session stores).
        first_look: timed rounds a window judged against a baseline runs before its first look (at most ``rounds``):
            a clear window decides there, and the window grows to its later planned looks only while undecided.
        min_round_s: a round lasts at least this long (steps per round calibrated after warmup).
        max_rel_iqr: a window without a baseline whose IQR/median exceeds this is extended round by round ...
        budget_s: ... until stable or the timed rounds have taken this many seconds in total; a window judged against a
            baseline looks at itself at planned round counts (:meth:`look_rounds`) up to this many seconds.
        confirm_s: a look that finds a regression stops the window only once its timed rounds have lasted this long
            (within ``budget_s``), so one slow phase of the host cannot condemn a 1-second window (the lean is looked at
            again later; docs/measured.md, 'Noise between sessions').
    """

    warmup_steps: int = 3
    rounds: int = 10
    first_look: int = 5
    min_round_s: float = 0.1
    max_rel_iqr: float = 0.10
    budget_s: float = 30.0
    confirm_s: float = 10.0

    def __post_init__(self) -> None:
        if self.warmup_steps < 1:
            raise ValueError(f"warmup steps must be >= 1, got {self.warmup_steps}")
        if self.rounds < 3:
            raise ValueError(f"rounds must be >= 3 for a median and IQR, got {self.rounds}")
        if self.first_look < 3:
            raise ValueError(f"the first look must come after >= 3 rounds for a median and IQR, got {self.first_look}")
        if self.min_round_s <= 0 or self.budget_s <= 0:
            raise ValueError(f"min round time and time budget must be > 0 s, got {self.min_round_s}, {self.budget_s}")
        if self.confirm_s < 0:
            raise ValueError(f"confirmation time must be >= 0 s, got {self.confirm_s}")

    @property
    def judged_rounds(self) -> int:
        """Timed rounds before the first look of a window judged against a baseline: ``first_look``, never more than
        ``rounds``."""
        return min(self.first_look, self.rounds)

    def budget_rounds(self, round_s: float) -> int:
        """Rounds of ``round_s`` seconds (> 0) that fit in the time budget."""
        return math.floor(self.budget_s / round_s + 1e-9)

    def confirm_rounds(self, round_s: float) -> int:
        """Rounds of ``round_s`` seconds (> 0) that last the confirmation time."""
        return math.ceil(self.confirm_s / round_s - 1e-9)

    def look_rounds(self, round_s: float) -> list[int]:
        """The planned looks of a window of rounds of about ``round_s`` seconds (> 0, known before the timed rounds:
        the calibration's), as cumulative timed rounds: the first after :attr:`judged_rounds`, the last where the time
        budget ends, between them a doubling series through the rounds that last ``confirm_s`` (a lean to a regression
        is decided as soon as it may be), each look at least 1.5 times the rounds of the one before. With 0.1-s rounds
        and the defaults: 5, 10, 25, 50, 100, 200, 300. A look too close to the budget's gives way to it; the first
        never does. The looks never depend on the timed rounds, so the levels spent on them
        (:mod:`hwregress.judge.looks`) are fixed before any round is seen."""
        first = self.judged_rounds
        last = max(first, self.budget_rounds(round_s))
        confirm = self.confirm_rounds(round_s)
        anchor = confirm if first < confirm else first
        candidates = {first, last}
        if 3 * first <= anchor:  # a window undecided at the first look gets a recording's rounds, or so, at the second
            candidates.add(2 * first)
        below = anchor
        while below > first:
            candidates.add(below)
            below = math.ceil(below / 2)
        above = anchor
        while above < last:
            candidates.add(above)
            above *= 2
        looks = [first]
        for count in sorted(c for c in candidates if first < c <= last):
            if count >= 1.5 * looks[-1]:
                looks.append(count)
            elif count == last and len(looks) > 1:
                looks[-1] = last
        return looks


@dataclass
class Timing:
    """A measured window.

    Attributes:
        round_seconds: wall (device) time of each timed round, seconds.
        steps_per_round: steps in every round.
        warmup_steps: untimed steps run first.
        stable: IQR/median of the per-step times is within the plan's bound.
        extended_rounds: rounds added beyond the plan's first rounds (``rounds``, or ``judged_rounds`` when judged)
            because the window was noisy or its verdict open.
        verdict_rounds: how many of those were added while the verdict was open (a look was undecided).
        looks: the planned looks and those taken (None: no baseline steered the window).
    """

    round_seconds: list[float]
    steps_per_round: int
    warmup_steps: int
    stable: bool
    extended_rounds: int = 0
    verdict_rounds: int = 0
    looks: LookFigures | None = None
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
    shows the same rounds); later rounds run here. Every timed round runs inside ``window`` (a
    telemetry sampler, say), which warmup never enters.

    Ranks of one data-parallel job must run the same steps, or a collective waits for ever: ``agree(value)``
    turns each rank's own choice into the job's (the maximum over ranks, say) for the steps per round, the rounds
    the looks are planned with, and each "one more round?" and "look again?" decision (1 or 0).

    ``settled(step_seconds, look, looks)`` says what look ``look`` of ``looks`` planned decides against the baseline
    on the per-step seconds so far (:func:`hwregress.judge.window_verdict.look_decision`); with it the window grows
    at the looks of :func:`run_rounds`, without it while noisy. The rounds are never filtered.

    Raises:
        whatever ``step`` raises (``torch.OutOfMemoryError`` included) after the timer is left clean.
    """
    for _ in range(plan.warmup_steps - 1):
        step()
    single = timer.time_round(step, 1)
    steps_per_round = max(1, math.ceil(plan.min_round_s / single)) if single > 0 else 1
    agree = agree or _alone
    steps_per_round = agree(steps_per_round)

    def run_steps() -> None:
        for _ in range(steps_per_round):
            step()

    with window if window is not None else nullcontext():
        rounds = run_rounds(lambda: timer.time_round(run_steps, steps_per_round), plan,
                            round_s=steps_per_round * single, steps_per_round=steps_per_round,
                            round_driver=round_driver, agree=agree, settled=settled)
    return Timing(
        round_seconds=rounds.seconds,
        steps_per_round=steps_per_round,
        warmup_steps=plan.warmup_steps,
        stable=relative_iqr(rounds.seconds) <= plan.max_rel_iqr,
        extended_rounds=rounds.extended,
        verdict_rounds=rounds.verdict_rounds,
        looks=rounds.looks,
    )


@dataclass
class Rounds:
    """The timed rounds of a window and how it ended.

    Attributes:
        seconds: each timed round's seconds.
        extended: rounds beyond the plan's first rounds (``rounds``; ``judged_rounds`` when judged).
        verdict_rounds: how many of those ran while a look was undecided.
        looks: the planned looks and those taken; None when no check steered the window.
    """

    seconds: list[float]
    extended: int = 0
    verdict_rounds: int = 0
    looks: LookFigures | None = None


def run_rounds(run_round: Callable[[], float], plan: TimingPlan, round_s: float | None = None,
               steps_per_round: int = 1, round_driver: Callable[[Callable[[], None], int], None] | None = None,
               agree: Callable[[int], int] | None = None, settled: VerdictCheck | None = None) -> Rounds:
    """Run the timed rounds of a window: ``run_round()`` runs one and returns its seconds (``steps_per_round`` steps).

    First ``plan.rounds`` rounds, or ``plan.judged_rounds`` with ``settled`` (through ``round_driver(run, n)`` when
    given). Then, without ``settled``, one more
    round at a time while the rounds' IQR/median exceeds ``plan.max_rel_iqr``, within ``plan.budget_s``. With
    ``settled``, the window is looked at only at its planned looks (:meth:`TimingPlan.look_rounds` for rounds of
    ``round_s`` seconds, known before the timed rounds; None: ``plan.min_round_s``): ``settled(step_seconds, look,
    looks)`` decides ``regression``, ``pass`` (or anything else: decided) or None (undecided), and the window stops
    at the first look that decides, a regression only once the window has lasted ``plan.confirm_s`` (or reached the
    look planned to last it); an undecided window runs on to its next look while the time budget lasts. When the
    budget ends the rounds before a look's planned count, that look is taken on the rounds so far, and is the last.

    ``agree`` (see :func:`measure`) makes every decision the job's: each rank calls it the same number of times.
    """
    agree = agree or _alone
    seconds: list[float] = []

    def timed() -> None:
        seconds.append(run_round())

    (round_driver or _loop)(timed, plan.rounds if settled is None else plan.judged_rounds)
    if settled is None:
        extended = 0
        while agree(int(relative_iqr(seconds) > plan.max_rel_iqr and sum(seconds) < plan.budget_s)):
            timed()
            extended += 1
        return Rounds(seconds, extended)
    return _looked_at(timed, seconds, plan, round_s or plan.min_round_s, steps_per_round, agree, settled)


def _looked_at(timed: Callable[[], None], seconds: list[float], plan: TimingPlan, round_s: float,
               steps_per_round: int, agree: Callable[[int], int], settled: VerdictCheck) -> Rounds:
    """The looks of :func:`run_rounds` after the first ``plan.judged_rounds`` rounds (``seconds``), each round run by
    ``timed``."""
    round_s = agree(max(1, round(round_s * 1e6))) / 1e6  # the job plans its looks with its slowest rank's rounds
    planned, confirm = plan.look_rounds(round_s), plan.confirm_rounds(round_s)
    taken: list[int] = []
    decision: Verdict | None = None
    for number, target in enumerate(planned, start=1):
        cut_short = False
        while len(seconds) < target:
            if not agree(int(sum(seconds) < plan.budget_s)):
                cut_short = True
                break
            timed()
        taken.append(len(seconds))
        decision = settled([s / steps_per_round for s in seconds], number, len(planned))
        confirmed = sum(seconds) >= plan.confirm_s or target >= confirm
        decided = decision is not None and (decision != Verdict.REGRESSION or confirmed)
        if cut_short or number == len(planned) or not agree(int(not decided)):
            break
    extended = len(seconds) - plan.judged_rounds
    return Rounds(seconds, extended, extended,
                  LookFigures(planned=planned, rounds=taken, decision=None if decision is None else str(decision)))


VerdictCheck = Callable[[list[float], int, int], "Verdict | None"]
"""``settled(samples, look, looks)``: what look ``look`` (from 1) of ``looks`` planned decides on the samples so far:
a regression, a pass (any verdict: decided) or None (undecided)."""


def in_work_units(settled: VerdictCheck | None, work_per_step: float) -> VerdictCheck | None:
    """Adapt a verdict check on throughput samples (units of work per second, as the baseline stores them) to the
    per-step seconds :func:`measure` passes: ``work_per_step / seconds`` per step. None stays None."""
    if settled is None:
        return None
    return lambda step_seconds, look, looks: settled([work_per_step / s for s in step_seconds if s > 0], look, looks)


RoundsDriver = Callable[[Callable[[], float], "float | None"], None]
"""``driver(run_round, warmup_round_s)`` runs a window's timed rounds in place of a fixed count: ``run_round()`` times
one round and returns its judged seconds; ``warmup_round_s`` is the wall time of the last warmup round (s, None
without warmup), known before any timed round (:func:`hwregress.measure.timing.run_rounds` plans its looks with it)."""


def warm_up(run: Callable[[], object], warmup: int, device: str, timed: bool) -> float | None:
    """Run ``warmup`` untimed rounds; when ``timed``, return the wall seconds of the last (synchronized at both ends,
    read from ``time.perf_counter``: a figure to plan the looks with, not a measurement), else None."""
    for index in range(warmup):
        if timed and index == warmup - 1:
            synchronize(device)
            started = time.perf_counter()
            run()
            synchronize(device)
            return time.perf_counter() - started
        run()
    return None


def drive_rounds(run_round: Callable[[], float], rounds: int, driver: RoundsDriver | None,
                 warmup_round_s: float | None) -> None:
    """Run the timed rounds: ``driver(run_round, warmup_round_s)`` where given, else ``rounds`` of ``run_round()``."""
    if driver is not None:
        driver(run_round, warmup_round_s)
        return
    for _ in range(rounds):
        run_round()


def _loop(run_round: Callable[[], None], rounds: int) -> None:
    for _ in range(rounds):
        run_round()


def _alone(value: int) -> int:
    return value

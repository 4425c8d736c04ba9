"""The device timer against the wall clock over work of a known length.

CUDA: ``torch.cuda._sleep(cycles)`` is a kernel that spins for a given number of GPU clock cycles (torch's own tests
use it for stream and event timing). hwregress's round timer (:func:`hwregress.measure.timing.default_timer`: CUDA
events) must read the same length as the host clock around a synchronized launch, twice the cycles must read twice
the time, and the launch must return long before the kernel ends (the events time the device's work, not the
launch). CPU: the round timer (host clock, synchronized) against the monotonic clock read inside the round.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from hwregress.check.result import CheckResult, judged
from hwregress.hardware.devices import synchronize
from hwregress.hardware.facts import device_kind
from hwregress.measure.timing import default_timer

NAME = "timer"
TARGET_MS = 200.0  # long enough that launch and synchronization (tens of us) are far below the tolerance
AGREEMENT = 0.05  # device timer vs wall clock, and the two-lengths ratio vs 2
CALIBRATION_CYCLES = 10_000_000


def check(device: str) -> CheckResult:
    """Run the timer check on ``device`` (see the module doc)."""
    if device_kind(device) == "cuda":
        return _cuda(device)
    return _host(device)


def _host(device: str) -> CheckResult:
    timer = default_timer(device)
    inside: dict[str, float] = {}

    def sleep() -> None:  # the work's own length, read with another clock inside the round
        started = time.monotonic_ns()
        time.sleep(TARGET_MS / 1000.0)
        inside["ms"] = (time.monotonic_ns() - started) / 1e6

    measured_ms = timer.time_round(sleep, 1) * 1000.0
    error = measured_ms / inside["ms"] - 1
    return judged(NAME, device, 0 <= error <= AGREEMENT,
                  f"the round timer over a {TARGET_MS:.0f} ms sleep against the monotonic clock read inside the round",
                  {"timer_ms": round(measured_ms, 3), "inside_ms": round(inside["ms"], 3), "error": round(error, 4)},
                  "the host clock or the synchronization around a round is wrong: hwregress.measure.timing")


def _cuda(device: str) -> CheckResult:
    timer = default_timer(device)
    with torch.cuda.device(torch.device(device)):
        torch.cuda._sleep(1000)  # the kernel's first launch (module load) outside the measurement
        synchronize(device)
        # the cycles for TARGET_MS by the host clock: whatever the timer under test reads, the check stays short
        per_cycle_ms = _wall_ms(lambda: torch.cuda._sleep(CALIBRATION_CYCLES), device) / CALIBRATION_CYCLES
        cycles = int(TARGET_MS / per_cycle_ms)
        launch: dict[str, float] = {}
        event_ms = timer.time_round(_launch_timed(lambda: torch.cuda._sleep(cycles), launch), 1) * 1000.0
        wall_ms = _wall_ms(lambda: torch.cuda._sleep(cycles), device)
        double_ms = timer.time_round(lambda: torch.cuda._sleep(2 * cycles), 1) * 1000.0
    figures = {"cycles": cycles, "event_ms": round(event_ms, 3), "wall_ms": round(wall_ms, 3),
               "double_event_ms": round(double_ms, 3), "launch_ms": round(launch["ms"], 3)}
    agree = abs(event_ms / wall_ms - 1) <= AGREEMENT
    linear = abs(double_ms / event_ms - 2) <= 2 * AGREEMENT
    asynchronous = launch["ms"] < 0.2 * event_ms
    return judged(NAME, device, agree and linear and asynchronous,
                  "CUDA events over a torch.cuda._sleep kernel against the host clock around a synchronized launch, "
                  "twice the cycles against twice the time, and the launch against the kernel",
                  figures, _cuda_blame(agree, linear, asynchronous))


def _launch_timed(launch_kernel: Callable[[], None], into: dict[str, float]) -> Callable[[], None]:
    def run() -> None:
        started = time.perf_counter()
        launch_kernel()
        into["ms"] = (time.perf_counter() - started) * 1000.0  # no synchronization: what a host-side timer sees
    return run


def _wall_ms(launch_kernel: Callable[[], None], device: str) -> float:
    synchronize(device)
    started = time.perf_counter()
    launch_kernel()
    synchronize(device)
    return (time.perf_counter() - started) * 1000.0


def _cuda_blame(agree: bool, linear: bool, asynchronous: bool) -> str:
    if not agree:
        return ("the CUDA events disagree with the host clock: events recorded on another stream than the work, or a "
                "clock that changes speed under load (hwregress.measure.timing.CudaEventTimer)")
    if not linear:
        return "the kernel's time is not proportional to its cycles: the GPU clock moved during the check (throttling?)"
    if not asynchronous:
        return "the launch waited for the kernel: CUDA_LAUNCH_BLOCKING=1 is set, or a profiler serializes launches"
    return ""

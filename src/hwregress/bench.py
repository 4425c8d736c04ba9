"""One benchmark of a model on one device: build, warm up, time a window while telemetry samples and
peak memory is tracked, then a separate profiled window and the FLOP count.

This module knows nothing of pytest; the plugin turns its results into assertions and records.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hwregress import profiling
from hwregress.devices import device_kind, synchronize
from hwregress.memory import PeakMemoryMeter, release_device_memory
from hwregress.numerics import ELEMENT_BYTES, MODES, precision
from hwregress.telemetry import TelemetrySampler
from hwregress.timing import RoundTimer, Timing, TimingPlan, measure
from hwregress.workloads import Workload, import_torchvision, make_batch


class OutOfMemory(Exception):
    """The batch did not fit; the message reads "out of memory at batch 512 on cuda:0"."""


@dataclass(frozen=True)
class RunOptions:
    """How to run a benchmark beyond the timing plan.

    Attributes:
        plan: warmup, rounds and noise handling of the timed window.
        telemetry_interval_s: background sampling interval.
        profile_steps: steps in the separate profiled window (0 turns profiling and FLOP counting off).
        trace_path: where to save the profiled window's Chrome trace, None for no trace.
        round_driver: drives the planned rounds (pytest-benchmark's pedantic when active).
    """

    plan: TimingPlan = field(default_factory=TimingPlan)
    telemetry_interval_s: float = 0.1
    profile_steps: int = 3
    trace_path: Path | None = None
    round_driver: Callable[[Callable[[], None], int], None] | None = None


@dataclass
class Measurement:
    """What one benchmark measured.

    Attributes:
        timing: the timed window (per-round seconds, steps per round).
        work_per_step: units of work per step: inputs (the batch size) for models, FLOPs or bytes for ceilings.
            ("samples" in hwregress always means the per-round throughput observations.)
        peak_memory_bytes: see :class:`hwregress.memory.PeakMemoryMeter`.
        telemetry: summary of the window; ``telemetry_series`` its thinned time series.
        profile: the operator breakdown, None when profiling is off.
        flops_per_sample: forward (infer) or forward+backward (train) FLOPs per sample, None if not counted.
        bytes_per_sample: estimated DRAM traffic per sample (see profiling.estimate_bytes_moved).
    """

    timing: Timing
    work_per_step: float
    peak_memory_bytes: int | None
    telemetry: dict[str, Any]
    telemetry_series: dict[str, list[Any]] = field(default_factory=dict)
    profile: profiling.OperatorProfile | None = None
    flops_per_sample: float | None = None
    bytes_per_sample: float | None = None

    @property
    def throughput_samples(self) -> list[float]:
        """The samples: one throughput observation per timed round (units of work per second)."""
        return [self.work_per_step / s for s in self.timing.step_seconds]

    @property
    def window_work(self) -> float:
        """Units of work done in the timed window (inputs for models)."""
        return self.work_per_step * self.timing.steps_per_round * len(self.timing.round_seconds)


def is_out_of_memory(error: BaseException) -> bool:
    """True for CUDA/MPS/CPU allocation failures (``torch.OutOfMemoryError`` and its older spellings)."""
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    if oom_type and isinstance(error, oom_type):
        return True
    text = str(error).lower()
    return isinstance(error, (RuntimeError, MemoryError)) and (
        "out of memory" in text or "can't allocate memory" in text or isinstance(error, MemoryError)
    )


def build_step(workload: Workload, model: torch.nn.Module, mode: str, inputs: torch.Tensor,
               labels: torch.Tensor, device: str, dtype: str) -> Callable[[], None]:
    """The step function of ``mode``: ``train`` = zero grads, forward, loss, backward, SGD step (with
    a GradScaler for fp16 on CUDA); ``infer`` = forward in inference mode.

    Raises:
        ValueError: unknown mode.
    """
    if mode == "infer":
        model.eval()

        def infer_step() -> None:
            with torch.inference_mode(), precision(device, dtype):
                model(inputs)

        return infer_step
    if mode != "train":
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler(device_kind(device), enabled=dtype == "fp16" and device_kind(device) == "cuda")

    def train_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with precision(device, dtype):
            loss = workload.loss(model(inputs).float(), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return train_step


@functools.cache
def prepare_process(device: str) -> None:
    """Pay the process's one-time costs before the first measurement on ``device``: import
    torchvision and run a tiny convolutional network through a training and an inference step, which
    starts the thread pools, the autograd engine and the kernel libraries.

    Without it the first test of a session carries ~100 MiB of RSS it did not cause (measured on the
    CPU: mobilenet_v3_small's growth was 116 MiB first in a process, 14 MiB later, 19 MiB after this),
    so a subset of the suite would report memory regressions the full suite does not.
    """
    import_torchvision()
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10)).to(device)
    inputs = torch.randn(2, 3, 32, 32, device=device)
    net(inputs).sum().backward()
    with torch.inference_mode():
        net.eval()(inputs)
    synchronize(device)


def run_model(workload: Workload, device: str, mode: str, batch_size: int, dtype: str,
              timer: RoundTimer, options: RunOptions) -> Measurement:
    """Benchmark ``workload`` on ``device``: see the module docstring.

    Raises:
        OutOfMemory: the batch did not fit; device memory has been released.
    """
    prepare_process(device)
    failed_oom = False
    try:
        return _run_model(workload, device, mode, batch_size, dtype, timer, options)
    except Exception as error:
        if not is_out_of_memory(error):
            raise
        failed_oom = True  # leave the except block first: its traceback pins the tensors
    finally:
        gc.collect()
    if failed_oom:
        release_device_memory(device)
        raise OutOfMemory(f"out of memory at batch {batch_size} on {device}")
    raise AssertionError("unreachable")


def _run_model(workload: Workload, device: str, mode: str, batch_size: int, dtype: str,
               timer: RoundTimer, options: RunOptions) -> Measurement:
    with PeakMemoryMeter(device) as memory:
        model = workload.build().to(device)
        inputs, labels = make_batch(workload, batch_size, device)
        step = build_step(workload, model, mode, inputs, labels, device, dtype)
        sampler = TelemetrySampler(device, options.telemetry_interval_s)
        timing = measure(step, timer, options.plan, options.round_driver, window=sampler)
    measurement = Measurement(timing, batch_size, memory.peak_bytes, sampler.summary(), sampler.compact_series())
    if options.profile_steps > 0:
        measurement.profile = profiling.profile_operators(step, device, options.profile_steps,
                                                          trace_path=options.trace_path)
        with precision(device, dtype):
            flops = profiling.count_flops(_flop_probe(workload, model, mode, inputs, labels))
            moved = profiling.estimate_bytes_moved(model, inputs, mode == "train", ELEMENT_BYTES[dtype])
        measurement.flops_per_sample = flops / batch_size
        measurement.bytes_per_sample = moved / batch_size
    synchronize(device)
    return measurement


def _flop_probe(workload: Workload, model: torch.nn.Module, mode: str, inputs: torch.Tensor,
                labels: torch.Tensor) -> Callable[[], None]:
    def forward_backward() -> None:
        model.zero_grad(set_to_none=True)
        workload.loss(model(inputs).float(), labels).backward()
        model.zero_grad(set_to_none=True)

    def forward() -> None:
        with torch.no_grad():
            model(inputs)

    return forward_backward if mode == "train" else forward

"""One benchmark of a model on one device: build, warm up, time a window while telemetry samples and
peak memory is tracked, then a separate profiled window and the FLOP count.

This module knows nothing of pytest; the plugin turns its results into assertions and records.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hwregress.hardware.devices import synchronize
from hwregress.hardware.facts import device_kind
from hwregress.hardware.telemetry import TelemetrySampler
from hwregress.measure import compilation, memory_guard, profiling
from hwregress.measure.memory import PeakMemoryMeter
from hwregress.measure.out_of_memory import OutOfMemory, out_of_memory_released
from hwregress.measure.precision import numerics, quantization
from hwregress.measure.precision.numerics import STEP_MODES, autocast, forward_precision, grad_scaler, tf32_flags
from hwregress.measure.timing import RoundTimer, Timing, TimingPlan, VerdictCheck, in_work_units, measure
from hwregress.workloads import Inputs, Workload, build_on, forward, import_torchvision, make_batch, step_use_cache


@dataclass(frozen=True)
class RunOptions:
    """How to run a benchmark beyond the timing plan.

    Attributes:
        plan: warmup, rounds and noise handling of the timed window.
        telemetry_interval_s: background sampling interval.
        profile_steps: steps in the separate profiled window (0 turns profiling and FLOP counting off).
        trace_path: where to save the profiled window's Chrome trace, None for no trace.
        round_driver: drives the planned rounds (pytest-benchmark's pedantic when active).
        cudnn_benchmark: ``torch.backends.cudnn.benchmark`` for the whole run (warmup, timed and profiled
            windows), restored after; recorded in the environment fingerprint (``cudnn_benchmark``).
        compiler: :data:`hwregress.measure.compilation.BACKENDS`; a compiled model's first call (the compilation) is
            timed apart, before the warmup, as ``Measurement.compile``, with cold caches
            (``compilation.warm_up_compiled``).
        memory_format: ``contiguous`` or ``channels_last`` (weights and 4-D inputs converted).
        settled: what a planned look decides against the baseline on the throughput samples so far (units of work
            per second): the window runs on to its next look while undecided
            (:func:`hwregress.judge.window_verdict.look_decision`). None: no baseline steers the window.
    """

    plan: TimingPlan = field(default_factory=TimingPlan)
    telemetry_interval_s: float = 0.1
    profile_steps: int = 3
    trace_path: Path | None = None
    round_driver: Callable[[Callable[[], None], int], None] | None = None
    cudnn_benchmark: bool = True
    compiler: str = "eager"
    memory_format: str = "contiguous"
    settled: VerdictCheck | None = None


@dataclass
class Measurement:
    """What one benchmark measured.

    Attributes:
        timing: the timed window (per-round seconds, steps per round).
        work_per_step: units of work per step: inputs (the batch size) for image models, tokens (batch size x
            sequence length) for text models, FLOPs or bytes for ceilings. ("samples" in hwregress always means
            the per-round throughput observations.)
        work_per_sample: units of work in one input (1 for images, the sequence length for text).
        peak_memory_bytes: see :class:`hwregress.measure.memory.PeakMemoryMeter`.
        telemetry: summary of the window; ``telemetry_series`` its thinned time series.
        profile: the operator breakdown, None when profiling is off.
        flops_per_sample: forward (infer) or forward+backward (train) FLOPs per sample, None if not counted.
        bytes_per_sample: estimated DRAM traffic per sample, each tensor at its own width (see
            profiling.estimate_bytes_moved).
        health: the machine's health over the timed window (see :class:`hwregress.hardware.telemetry.TelemetrySampler`).
    """

    timing: Timing
    work_per_step: float
    peak_memory_bytes: int | None
    telemetry: dict[str, Any]
    telemetry_series: dict[str, list[Any]] = field(default_factory=dict)
    profile: profiling.OperatorProfile | None = None
    flops_per_sample: float | None = None
    bytes_per_sample: float | None = None
    health: dict[str, Any] = field(default_factory=dict)
    work_per_sample: float = 1.0
    compile: compilation.CompileTiming | None = None
    quantized_layers: int | None = None  # Linear layers int8/fp8 replaced (None: not quantized)
    quantized_base_dtype: str | None = None  # dtype of the rest of a quantized model: "bf16" on CUDA, "fp32" on the CPU
    quantization: str | None = None  # the quantized arithmetic (quantization.algorithm), None: not quantized

    @property
    def throughput_samples(self) -> list[float]:
        """The samples: one throughput observation per timed round (units of work per second)."""
        return [self.work_per_step / s for s in self.timing.step_seconds]

    @property
    def window_work(self) -> float:
        """Units of work done in the timed window (inputs for models)."""
        return self.work_per_step * self.timing.steps_per_round * len(self.timing.round_seconds)


def build_step(workload: Workload, model: torch.nn.Module, mode: str, inputs: Inputs,
               labels: torch.Tensor, device: str, dtype: str) -> Callable[[], None]:
    """The step function of ``mode``: ``train`` = zero grads, forward, loss, backward, SGD step (with
    a GradScaler for fp16 on CUDA); ``infer`` = forward in inference mode. The TF32 flags of ``dtype``
    hold for the whole step, backward and optimizer included; autocast covers forward and loss, except
    where the model runs in ``dtype`` itself (bf16/fp16 inference of a causal LM,
    :func:`hwregress.measure.precision.numerics.runs_in_dtype`; the caller casts it with
    :func:`hwregress.measure.precision.numerics.model_for_mode`). A causal LM's forward gets ``use_cache=False``
    (:func:`hwregress.workloads.step_use_cache`): neither step reads a KV cache.

    Raises:
        ValueError: unknown mode.
    """
    use_cache = step_use_cache(workload)
    if mode == "infer":
        model.eval()
        in_dtype = numerics.runs_in_dtype(workload.task, mode, dtype)

        def infer_step() -> None:
            with torch.inference_mode(), forward_precision(device, dtype, in_dtype):
                forward(model, inputs, use_cache=use_cache)

        return infer_step
    if mode != "train":
        raise ValueError(f"a timed step's mode must be one of {STEP_MODES}, got {mode!r}")
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = grad_scaler(device, dtype)

    def train_step() -> None:
        with tf32_flags(dtype):
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, dtype):
                loss = workload.loss(forward(model, inputs, use_cache=use_cache).float(), labels)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    return train_step


@functools.cache
def prepare_process(device: str) -> None:
    """Pay the process's one-time costs before the first measurement on ``device``: import
    torchvision and run a tiny convolutional network through a training and an inference step, which
    starts the thread pools, the autograd engine and the kernel libraries.

    Without it the first test of a session carries ~100 MiB of RSS it did not cause (docs/measured.md, 'Memory'),
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
              timer: RoundTimer, options: RunOptions, context: int | None = None) -> Measurement:
    """Benchmark ``workload`` on ``device``: see the module docstring. ``context`` is the tokens per sample of a
    text workload (its ``seq_len`` when None).

    Raises:
        OutOfMemory: the batch did not fit; device memory has been released.
    """
    prepare_process(device)
    return out_of_memory_released(lambda: _run_model(workload, device, mode, batch_size, dtype, timer, options,
                                                     context),
                                  device, batch_size)


@contextlib.contextmanager
def cudnn_benchmark(enabled: bool) -> Iterator[None]:
    """``torch.backends.cudnn.benchmark = enabled`` while the block runs (cuDNN times its candidate
    algorithms on each new input shape and keeps the fastest; the warmup pays for the search); the
    previous value is restored on exit."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved


def _run_model(workload: Workload, device: str, mode: str, batch_size: int, dtype: str,
               timer: RoundTimer, options: RunOptions, context: int | None) -> Measurement:
    with cudnn_benchmark(options.cudnn_benchmark):
        return _measure_model(workload, device, mode, batch_size, dtype, timer, options, context)


def guard_host_memory(workload: Workload, device: str, mode: str, batch_size: int, dtype: str,
                      context: int | None = None) -> None:
    """End a CPU batch that would not fit in the host's memory before it runs, instead of letting the kernel's
    OOM killer end the whole session (:mod:`hwregress.measure.memory_guard`: one step at two small batches, the
    footprint extrapolated).

    Raises:
        OutOfMemory: the predicted footprint exceeds what the host (or its memory cgroup) has left.
    """
    if device_kind(device) != "cpu":
        return

    def footprint(probe_batch: int) -> int:
        with PeakMemoryMeter(device) as meter:
            model = numerics.model_for_mode(workload.build().to(device), workload.task, mode, dtype)
            inputs, labels = make_batch(workload, probe_batch, device, seq_len=context)
            build_step(workload, model, mode, inputs, labels, device, dtype)()
        return meter.peak_bytes or 0

    why = memory_guard.refusal(footprint, batch_size, memory_guard.host_headroom())
    if why is not None:
        raise OutOfMemory(why)


def _measure_model(workload: Workload, device: str, mode: str, batch_size: int, dtype: str,
                   timer: RoundTimer, options: RunOptions, context: int | None) -> Measurement:
    guard_host_memory(workload, device, mode, batch_size, dtype, context)
    setup_s = compilation.prime_compiler(options.compiler, device)  # the process's one-time set-up, untimed
    with PeakMemoryMeter(device) as memory:
        model = numerics.model_for_mode(build_on(workload, device), workload.task, mode, dtype)
        inputs, labels = make_batch(workload, batch_size, device, seq_len=context)
        inputs = quantization.cast_inputs(inputs, dtype, device)
        model, quantized = quantization.prepare(
            model, dtype, device, mode, probe=lambda m: build_step(workload, m, mode, inputs, labels, device, dtype)())
        if options.memory_format == "channels_last":
            model, inputs = _channels_last(model, inputs)
        compiled = compilation.compile_model(model, options.compiler)
        step = build_step(workload, compiled, mode, inputs, labels, device, dtype)
        compiled_timing = None
        # compiled cold: dynamo reset, a fresh inductor cache folder (compilation module)
        if options.compiler != "eager":
            # cudagraphs records its graph on the 2nd or 3rd call: keep that recording out of the timed window too
            steps = 3 if options.compiler == "cudagraphs" else 1
            compiled_timing = compilation.warm_up_compiled(step, options.compiler, device, steps=steps)
            compiled_timing.setup_s = setup_s
        sampler = TelemetrySampler(device, options.telemetry_interval_s)
        per_sample = workload.work_per_sample(context)
        timing = measure(step, timer, options.plan, options.round_driver, window=memory.steady(sampler),
                         settled=in_work_units(options.settled, batch_size * per_sample))
    measurement = Measurement(timing, batch_size * per_sample, memory.peak_bytes, sampler.summary(),
                              sampler.compact_series(), health=sampler.health, work_per_sample=per_sample,
                              compile=compiled_timing, quantized_layers=quantized,
                              quantized_base_dtype=quantization.base_dtype_name(dtype, device),
                              quantization=quantization.algorithm(dtype, device, mode))
    if options.profile_steps > 0:
        measurement.profile = profiling.profile_operators(step, device, options.profile_steps,
                                                          trace_path=options.trace_path)
        flops = profiling.count_flops(_flop_probe(workload, model, mode, inputs, labels, device, dtype))
        with forward_precision(device, dtype, numerics.runs_in_dtype(workload.task, mode, dtype)):
            moved = profiling.estimate_bytes_moved(model, inputs, mode == "train", use_cache=step_use_cache(workload))
        measurement.flops_per_sample = flops / batch_size
        measurement.bytes_per_sample = moved / batch_size
    synchronize(device)
    return measurement


def batch_probe(workload: Workload, device: str, mode: str, dtype: str, context: int | None = None,
                memory_format: str = "contiguous") -> Callable[[int], None]:
    """``try_batch(b)`` for :func:`hwregress.measure.batch_search.find_max_batch`: two steps of ``mode`` at batch ``b``
    (the second holds the optimizer state a training step allocates), on a model built once per search; prefill
    and decode probe with their prompt pass. On the CPU the host-memory guard refuses a batch that would not fit
    before it runs, as a ``MemoryError`` (out-of-memory is the search's signal)."""
    step_mode = "infer" if mode in ("prefill", "decode") else mode
    model = numerics.model_for_mode(build_on(workload, device), workload.task, step_mode, dtype)
    model, _ = quantization.prepare(model, dtype, device, mode)

    def try_batch(batch_size: int) -> None:
        try:
            guard_host_memory(workload, device, step_mode, batch_size, dtype, context)
        except OutOfMemory as error:
            raise MemoryError(str(error)) from None
        inputs, labels = make_batch(workload, batch_size, device, seq_len=context)
        inputs = quantization.cast_inputs(inputs, dtype, device)
        probed, inputs = _channels_last(model, inputs) if memory_format == "channels_last" else (model, inputs)
        step = build_step(workload, probed, step_mode, inputs, labels, device, dtype)
        for _ in range(2):
            step()
        synchronize(device)

    return try_batch


def _channels_last(model: torch.nn.Module, inputs: Inputs) -> tuple[torch.nn.Module, Inputs]:
    """Weights and 4-D image inputs in ``torch.channels_last`` (NHWC), what cuDNN's fastest convolutions want."""
    model = model.to(memory_format=torch.channels_last)
    if isinstance(inputs, torch.Tensor) and inputs.dim() == 4:
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    return model, inputs


def _flop_probe(workload: Workload, model: torch.nn.Module, mode: str, inputs: Inputs,
                labels: torch.Tensor, device: str, dtype: str) -> Callable[[], None]:
    use_cache = step_use_cache(workload)

    def forward_backward() -> None:
        model.zero_grad(set_to_none=True)
        with tf32_flags(dtype):
            with autocast(device, dtype):
                loss = workload.loss(forward(model, inputs, use_cache=use_cache).float(), labels)
            loss.backward()
        model.zero_grad(set_to_none=True)

    def forward_only() -> None:
        with torch.no_grad(), forward_precision(device, dtype, numerics.runs_in_dtype(workload.task, mode, dtype)):
            forward(model, inputs, use_cache=use_cache)

    return forward_backward if mode == "train" else forward_only

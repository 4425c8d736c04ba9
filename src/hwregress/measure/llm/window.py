"""Prefill and decode windows of a causal language model on one device: the serving-side modes.

``prefill``: the prompt pass alone (``use_cache=True``, as a server runs it), timed per round; throughput in
tokens/s of prompt (batch x context per round). ``decode``: greedy generation of ``new_tokens`` per sequence with
a KV cache (:func:`hwregress.measure.llm.decode.decode_rounds`), one round per generation; throughput in output tokens/s
end to end (time to first token included, as vLLM and MLPerf report output throughput), with time to first
token and the per-token latency percentiles (TPOT p50/p90/p99) from per-step, device-synchronized timing.

Both windows run under the dtype's precision (autocast or TF32 flags), inside the telemetry sampler and the peak
memory meter, like every other window; FLOPs per sample are counted on one extra, untimed pass.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from hwregress.hardware.devices import synchronize
from hwregress.hardware.facts import device_kind
from hwregress.hardware.telemetry import TelemetrySampler
from hwregress.measure import profiling
from hwregress.measure.llm.decode import Clock, DecodeTiming, decode_rounds, prefill_rounds
from hwregress.measure.memory import PeakMemoryMeter
from hwregress.measure.out_of_memory import out_of_memory_released
from hwregress.measure.precision import quantization
from hwregress.measure.precision.numerics import precision
from hwregress.measure.timing import Timing, TimingPlan, relative_iqr
from hwregress.measure.window import Measurement, guard_host_memory, prepare_process
from hwregress.workloads import Workload, make_batch

# output tokens per sequence and round: with 10 rounds, 150 (CPU) to 630 (CUDA) per-token times for the percentiles
NEW_TOKENS = {"cpu": 16, "cuda": 64, "mps": 32}


@dataclass
class LlmMeasurement:
    """A prefill or decode window: the common measurement and its serving latencies (ms)."""

    measurement: Measurement
    latency: dict[str, Any] = field(default_factory=dict)


def new_tokens_for(device: str) -> int:
    """Output tokens per sequence of a decode round on ``device`` (:data:`NEW_TOKENS`)."""
    return NEW_TOKENS.get(device_kind(device), NEW_TOKENS["cpu"])


def run_llm(workload: Workload, device: str, mode: str, batch_size: int, dtype: str, context: int,
            plan: TimingPlan, telemetry_interval_s: float = 0.1, profile: bool = True,
            clock: Clock = time.perf_counter) -> LlmMeasurement:
    """Measure ``mode`` (``prefill`` or ``decode``) of ``workload`` at ``batch_size`` sequences of ``context``
    prompt tokens. ``plan.rounds`` timed rounds after ``plan.warmup_steps`` untimed ones (at least one).

    Raises:
        ValueError: ``workload`` is not a causal LM, or ``mode`` is not prefill/decode.
        OutOfMemory: the batch did not fit; device memory has been released.
    """
    if workload.task != "causal-lm":
        raise ValueError(f"{mode} needs a causal language model; {workload.name!r} is a {workload.task} workload")
    if mode not in ("prefill", "decode"):
        raise ValueError(f"mode must be prefill or decode, got {mode!r}")
    prepare_process(device)
    return out_of_memory_released(
        lambda: _measure(workload, device, mode, batch_size, dtype, context, plan, telemetry_interval_s, profile, clock),
        device, batch_size)


def _measure(workload: Workload, device: str, mode: str, batch_size: int, dtype: str, context: int,
             plan: TimingPlan, telemetry_interval_s: float, profile: bool, clock: Clock) -> LlmMeasurement:
    new_tokens = new_tokens_for(device)
    # a CPU batch that cannot fit ends as oom before the kernel's OOM killer can end the session; the prompt pass
    # is the footprint (the KV cache of a few dozen new tokens adds little to it)
    guard_host_memory(workload, device, "infer", batch_size, dtype, context)
    with PeakMemoryMeter(device) as memory:
        model, quantized = quantization.prepare(workload.build().to(device).eval(), dtype, device, mode)
        inputs, _ = make_batch(workload, batch_size, device, seq_len=context)
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        sampler = TelemetrySampler(device, telemetry_interval_s)
        with precision(device, dtype):
            if mode == "prefill":
                with sampler:
                    seconds = prefill_rounds(model, ids, mask, plan.rounds, device, clock, warmup=plan.warmup_steps)
                latency = {"prefill_ms": statistics.median(seconds) * 1000.0}
                work_per_round, per_sample = batch_size * context, context
            else:
                with sampler:
                    timing = decode_rounds(model, ids, mask, new_tokens, plan.rounds, device, clock, warmup=1)
                seconds = [p + sum(steps) for p, steps in zip(timing.prefill_s, timing.step_s, strict=True)]
                latency = _decode_latency(timing)
                work_per_round, per_sample = batch_size * new_tokens, new_tokens
    window = Timing(round_seconds=seconds, steps_per_round=1, warmup_steps=plan.warmup_steps,
                    stable=relative_iqr(seconds) <= plan.max_rel_iqr)
    measurement = Measurement(window, work_per_round, memory.peak_bytes, sampler.summary(), sampler.compact_series(),
                              health=sampler.health, work_per_sample=per_sample, quantized_layers=quantized)
    if profile:
        measurement.flops_per_sample = _flops(model, ids, mask, mode, new_tokens, device, dtype) / batch_size
    synchronize(device)
    latency.update(context=context, new_tokens=new_tokens if mode == "decode" else None)
    return LlmMeasurement(measurement, latency)


def _decode_latency(timing: DecodeTiming) -> dict[str, Any]:
    percentiles = timing.tpot_percentiles_ms() if timing.new_tokens > 1 else {}
    return {"ttft_ms": timing.ttft_ms(), **{f"tpot_{k}_ms": v for k, v in percentiles.items()},
            "decode_tokens_per_s": statistics.median(timing.decode_tokens_per_s()) if timing.new_tokens > 1 else None,
            "prefill_tokens_per_s": statistics.median(timing.prefill_tokens_per_s())}


def _flops(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, mode: str, new_tokens: int, device: str,
           dtype: str) -> float:
    """FLOPs of one untimed prompt pass (prefill) or one whole generation of ``new_tokens`` (decode)."""
    def run() -> None:
        with precision(device, dtype):
            if mode == "prefill":
                prefill_rounds(model, ids, mask, rounds=1, device=device, warmup=0)
            else:
                decode_rounds(model, ids, mask, new_tokens, rounds=1, device=device, warmup=0)

    return float(profiling.count_flops(run))

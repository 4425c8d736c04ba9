"""Prefill and decode windows of a causal language model on one device: the serving-side modes.

``prefill``: the prompt pass alone (``use_cache=True``, logits of the last position only, as a server runs it),
timed per round; throughput in tokens/s of prompt (batch x context per round). ``decode``: greedy generation of
``new_tokens`` per sequence with a KV cache (:func:`hwregress.measure.llm.decode.decode_rounds`), one round per
generation. Both windows take their rounds as every other window does (:func:`hwregress.measure.timing.run_rounds`):
``plan.rounds`` first; then, judged against a baseline, on to planned looks while undecided (a lean to a regression
confirmed over ``plan.confirm_s``), or without one while noisy, within ``plan.budget_s`` of judged seconds (a decode
round's: its decode steps').

What a decode record judges is the decode steps on their own: its throughput samples are the tokens/s of the
``new_tokens - 1`` cached steps of each round (``B * (new_tokens - 1) / sum(step seconds)``) and its latency is the
inter-token latency p50 (ITL, one step), judged against the baseline's (the throughput family declares its decode
mode's latency judged: ``judged_latency_modes``, :class:`hwregress.plugin.families.protocol.FamilyTraits`).
The prompt pass is prefill's figure, not decode's. Reported beside them (``details.llm``): output tokens/s end to
end (time to first token included: vLLM's ``output_throughput``, MLPerf Inference's LLM tokens/s), the time to
first token (TTFT), TPOT per request ``(e2e - TTFT) / (new_tokens - 1)`` as vLLM and MLPerf define it, and the ITL
percentiles p50/p90/p99 over every step (:class:`hwregress.measure.llm.decode.DecodeTiming`). Decode FLOPs per sample
(hence achieved TFLOP/s and MFU) count the decode steps only, the prompt pass left out.

Both windows run inside the telemetry sampler and the peak memory meter, like every other window, under the TF32
flags of the dtype; bf16/fp16 run the model cast to the dtype
(:func:`hwregress.measure.precision.numerics.model_for_mode`: weights and KV cache in bf16/fp16, no autocast). FLOPs per
sample are counted on extra, untimed passes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
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
from hwregress.measure.precision.numerics import forward_precision, model_for_mode, runs_in_dtype
from hwregress.measure.timing import Rounds, Timing, TimingPlan, VerdictCheck, in_work_units, run_rounds
from hwregress.measure.window import Measurement, guard_host_memory, prepare_process
from hwregress.summary import relative_iqr
from hwregress.workloads import Workload, build_on, make_batch

# output tokens per sequence and round: with 10 rounds, 150 (CPU) to 310 (CUDA, MPS) per-token times for the
# percentiles. CUDA generated 64 until the GPU tier had to fit 10 minutes: a Llama 3.2 1B generation is launch-bound
# (~1,200 operators per token), and 32 tokens halve its decode tests (hwregress.plugin.tier_estimate)
NEW_TOKENS = {"cpu": 16, "cuda": 32, "mps": 32}
# untimed generations before a decode window, whatever --warmup says, and the record's warmup_steps: a decode round
# is a whole generation (a prompt pass and new_tokens - 1 cached steps), so one already runs every shape the timed
# rounds run (each KV length once) and grows the allocator to their peak; --warmup counts the steps of a step window
# (3 by default), and as many generations would triple a decode test's warmup on the GPU tier (a Llama 3.2 1B
# generation: 32 tokens of ~1,200 launch-bound operators each) for no shape it had not run
DECODE_WARMUP_GENERATIONS = 1


@dataclass
class LlmMeasurement:
    """A prefill or decode window: the common measurement and its serving figures (``details.llm``: ms, tokens/s)."""

    measurement: Measurement
    latency: dict[str, Any] = field(default_factory=dict)


def new_tokens_for(device: str) -> int:
    """Output tokens per sequence of a decode round on ``device`` (:data:`NEW_TOKENS`)."""
    return NEW_TOKENS.get(device_kind(device), NEW_TOKENS["cpu"])


def run_llm(workload: Workload, device: str, mode: str, batch_size: int, dtype: str, context: int,
            plan: TimingPlan, telemetry_interval_s: float = 0.1, profile: bool = True,
            clock: Clock = time.perf_counter, settled: VerdictCheck | None = None) -> LlmMeasurement:
    """Measure ``mode`` (``prefill`` or ``decode``) of ``workload`` at ``batch_size`` sequences of ``context``
    prompt tokens. ``plan.rounds`` timed rounds after untimed ones: ``plan.warmup_steps`` prompt passes (prefill),
    :data:`DECODE_WARMUP_GENERATIONS` whole generations (decode); the record's ``warmup_steps`` is the count run.
    Then more at the looks ``settled`` takes on the throughput samples so far
    (:func:`hwregress.measure.timing.run_rounds`; None: no baseline, more rounds only while noisy).

    Returns:
        the measurement (prefill: prompt tokens/s per pass; decode: tokens/s of the decode steps per round, FLOPs of
        the decode steps per sequence) and ``latency``: prefill ``prefill_ms``; decode ``ttft_ms``, ``itl_p50_ms``,
        ``itl_p90_ms``, ``itl_p99_ms``, ``tpot_ms``, ``output_tokens_per_s``, ``decode_tokens_per_s``,
        ``prefill_tokens_per_s``, ``kv_cache_dtype``; both ``context`` and ``new_tokens`` (None for prefill).

    Raises:
        ValueError: ``workload`` is not a causal LM, ``mode`` is not prefill/decode, or decode on a device kind whose
            :data:`NEW_TOKENS` is below 2 (no decode step to judge).
        OutOfMemory: the batch did not fit; device memory has been released.
    """
    if workload.task != "causal-lm":
        raise ValueError(f"{mode} needs a causal language model; {workload.name!r} is a {workload.task} workload")
    if mode not in ("prefill", "decode"):
        raise ValueError(f"mode must be prefill or decode, got {mode!r}")
    if mode == "decode" and new_tokens_for(device) < 2:
        raise ValueError(f"decode on {device} generates {new_tokens_for(device)} token(s) per sequence (NEW_TOKENS): "
                         "the first comes from the prompt pass, so no decode step is timed; set it to 2 or more")
    prepare_process(device)
    return out_of_memory_released(
        lambda: _measure(workload, device, mode, batch_size, dtype, context, plan, telemetry_interval_s, profile,
                         clock, settled),
        device, batch_size)


def _measure(workload: Workload, device: str, mode: str, batch_size: int, dtype: str, context: int,
             plan: TimingPlan, telemetry_interval_s: float, profile: bool, clock: Clock,
             settled: VerdictCheck | None) -> LlmMeasurement:
    new_tokens = new_tokens_for(device)
    work_per_round = batch_size * (context if mode == "prefill" else new_tokens - 1)
    rounds: list[Rounds] = []

    def driver(run_round: Callable[[], float], warmup_round_s: float | None) -> None:
        # the looks are planned with the warmup round's time, at most min_round_s: a decode warmup is the process's
        # first generation and may carry one-time costs, and a slow estimate would leave the window too few looks
        # (more looks than the budget allows only spend alpha more thinly: the budget cuts them short)
        round_s = min(warmup_round_s or plan.min_round_s, plan.min_round_s)
        rounds.append(run_rounds(run_round, plan, round_s=round_s, settled=in_work_units(settled, work_per_round)))

    # a CPU batch that cannot fit ends as oom before the kernel's OOM killer can end the session; the prompt pass
    # is the footprint (the KV cache of a few dozen new tokens adds little to it)
    guard_host_memory(workload, device, "infer", batch_size, dtype, context)
    with PeakMemoryMeter(device) as memory:
        model = model_for_mode(build_on(workload, device).eval(), workload.task, mode, dtype)
        inputs, _ = make_batch(workload, batch_size, device, seq_len=context)
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        model, quantized = quantization.prepare(model, dtype, device, mode,
                                                probe=quantization_probe(mode, ids, mask))
        sampler = TelemetrySampler(device, telemetry_interval_s)
        with forward_precision(device, dtype, runs_in_dtype(workload.task, mode, dtype)):
            if mode == "prefill":
                with sampler:
                    seconds = prefill_rounds(model, ids, mask, plan.rounds, device, clock, warmup=plan.warmup_steps,
                                             after_warmup=memory.settle, driver=driver)
                latency = {"prefill_ms": statistics.median(seconds) * 1000.0}
                per_sample = context
            else:
                with sampler:
                    timing = decode_rounds(model, ids, mask, new_tokens, plan.rounds, device, clock,
                                           warmup=DECODE_WARMUP_GENERATIONS, after_warmup=memory.settle, driver=driver)
                seconds = [sum(steps) for steps in timing.step_s]  # the decode steps alone: the judged window
                latency = _decode_latency(timing)
                per_sample = new_tokens - 1
    warmup = plan.warmup_steps if mode == "prefill" else DECODE_WARMUP_GENERATIONS
    window = Timing(round_seconds=seconds, steps_per_round=1, warmup_steps=warmup,
                    stable=relative_iqr(seconds) <= plan.max_rel_iqr, extended_rounds=rounds[0].extended,
                    verdict_rounds=rounds[0].verdict_rounds, looks=rounds[0].looks)
    measurement = Measurement(window, work_per_round, memory.peak_bytes, sampler.summary(), sampler.compact_series(),
                              health=sampler.health, work_per_sample=per_sample, quantized_layers=quantized,
                              quantized_base_dtype=quantization.base_dtype_name(dtype, device),
                              quantization=quantization.algorithm(dtype, device, mode))
    if profile:
        in_dtype = runs_in_dtype(workload.task, mode, dtype)
        measurement.flops_per_sample = _flops(model, ids, mask, mode, new_tokens, device, dtype, in_dtype) / batch_size
    synchronize(device)
    latency.update(context=context, new_tokens=new_tokens if mode == "decode" else None)
    return LlmMeasurement(measurement, latency)


def quantization_probe(mode: str, ids: torch.Tensor, mask: torch.Tensor) -> Callable[[torch.nn.Module], Any]:
    """One forward shaped like the judged step of ``mode``, for :func:`hwregress.measure.precision.quantization.prepare`
    to count the rows each Linear multiplies: the prompt pass (prefill: ``batch x context`` rows), or one token per
    sequence (decode: each cached step multiplies ``batch`` rows, whatever the prompt pass does)."""
    if mode == "decode":
        ids, mask = ids[:, :1], mask[:, :1]
    return lambda model: model(input_ids=ids, attention_mask=mask, use_cache=False)


def _decode_latency(timing: DecodeTiming) -> dict[str, Any]:
    """The decode figures of ``details.llm`` (ms, tokens/s): medians over the rounds, ITL percentiles over every
    step."""
    itl = timing.itl_percentiles_ms()
    return {"ttft_ms": timing.ttft_ms(), **{f"itl_{k}_ms": v for k, v in itl.items()},
            "tpot_ms": statistics.median(timing.tpot_ms()),
            "output_tokens_per_s": statistics.median(timing.output_tokens_per_s()),
            "decode_tokens_per_s": statistics.median(timing.decode_tokens_per_s()),
            "prefill_tokens_per_s": statistics.median(timing.prefill_tokens_per_s()),
            "kv_cache_dtype": timing.kv_cache_dtype}


def _flops(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, mode: str, new_tokens: int, device: str,
           dtype: str, in_dtype: bool = False) -> float:
    """FLOPs of one untimed prompt pass (prefill), or of the ``new_tokens - 1`` decode steps of one generation
    (decode): a whole generation's count less its prompt pass's. The two prompt passes are the same call on the
    same inputs (:func:`hwregress.measure.llm.decode.prefill_rounds` and the first pass of
    :func:`hwregress.measure.llm.decode.decode_rounds`), so the difference is the cached steps' FLOPs exactly."""
    def prompt_pass() -> None:
        with forward_precision(device, dtype, in_dtype):
            prefill_rounds(model, ids, mask, rounds=1, device=device, warmup=0)

    def generation() -> None:
        with forward_precision(device, dtype, in_dtype):
            decode_rounds(model, ids, mask, new_tokens, rounds=1, device=device, warmup=0)

    prompt = profiling.count_flops(prompt_pass)
    if mode == "prefill":
        return float(prompt)
    return float(profiling.count_flops(generation) - prompt)

"""LLM numerics on the CPU with small random-weight transformers models: what the decode window judges (the decode
steps: ITL and their tokens/s) beside what it reports (end-to-end output tokens/s, TTFT, TPOT per request), decode
FLOPs without the prompt pass, and the dtype a model runs in (bf16 inference casts the model, so its KV cache is
bf16; training keeps autocast; train and plain infer windows build no KV cache), and the planned looks both windows
take against a baseline (issue 28)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from hwregress.measure import profiling
from hwregress.measure.llm import model_api
from hwregress.measure.llm import window as llm_bench
from hwregress.measure.llm.decode import decode_rounds
from hwregress.measure.llm.window import run_llm
from hwregress.measure.precision import numerics
from hwregress.measure.timing import TimingPlan
from hwregress.measure.window import RunOptions, build_step, run_model
from hwregress.plugin.families import registry
from hwregress.store.verdicts import Verdict
from hwregress.workloads import Workload, causal_lm_loss, make_batch

VOCAB, CONTEXT = 128, 8
# what a window measures, not how long: a loaded CI machine would extend a noisy window to its 30-s budget
PLAN = TimingPlan(warmup_steps=1, rounds=3, min_round_s=0.001, max_rel_iqr=math.inf)


def _tiny_llama() -> nn.Module:
    from hwregress.workloads.transformers import import_transformers

    transformers = import_transformers()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(config)


def _cache_key_dtype(output: Any) -> torch.dtype | None:
    """The dtype of the first layer's keys in a forward output's KV cache, None without one. transformers >= 4.56:
    ``Cache.layers[i].keys``; 4.36-4.55: ``Cache.key_cache[i]``; older: a tuple of ``(key, value)`` per layer. The
    output field is ``cache`` from transformers 5.2x on (``past_key_values`` kept as an alias), before it
    ``past_key_values``."""
    cache = getattr(output, "cache", None)
    if cache is None:
        cache = getattr(output, "past_key_values", None)
    if cache is None:
        return None
    layers = getattr(cache, "layers", None)
    if layers:
        return layers[0].keys.dtype
    key_cache = getattr(cache, "key_cache", None)
    if key_cache:
        return key_cache[0].dtype
    return cache[0][0].dtype


class Probe:
    """Builds the tiny Llama with a forward hook that records, per call of the whole model: the ``use_cache`` it was
    given, its parameters' dtype, whether CPU autocast was on, and its output's cache key dtype."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def build(self) -> nn.Module:
        model = _tiny_llama()
        model.register_forward_hook(self._record, with_kwargs=True)
        return model

    def _record(self, module: nn.Module, _args: Any, kwargs: dict[str, Any], output: Any) -> None:
        self.calls.append({"use_cache": kwargs.get("use_cache"), "weights": next(module.parameters()).dtype,
                           "autocast": torch.is_autocast_enabled("cpu"), "cache_keys": _cache_key_dtype(output)})

    def workload(self) -> Workload:
        return Workload("tiny_llama", self.build, num_classes=VOCAB, loss=causal_lm_loss, input_kind="tokens",
                        seq_len=CONTEXT, vocab_size=VOCAB, task="causal-lm")


@pytest.fixture
def probe() -> Probe:
    return Probe()


class StepClock:
    """Reads a decode round as a TTFT of ``ttft_s`` then steps of ``step_s`` each; rounds start 1 s apart."""

    def __init__(self, new_tokens: int, ttft_s: float, step_s: float) -> None:
        self._times = self._readings(new_tokens, ttft_s, step_s)

    @staticmethod
    def _readings(new_tokens: int, ttft_s: float, step_s: float) -> Iterator[float]:
        start = 0.0
        while True:
            yield start
            yield start + ttft_s
            for step in range(1, new_tokens):
                yield start + ttft_s + step * step_s
            start += 1.0

    def __call__(self) -> float:
        return next(self._times)


def test_decode_judges_its_steps_and_reports_end_to_end_throughput_ttft_and_tpot(probe):
    new_tokens, batch = llm_bench.new_tokens_for("cpu"), 2
    result = run_llm(probe.workload(), "cpu", "decode", batch, "fp32", CONTEXT, PLAN, telemetry_interval_s=0.05,
                     profile=False, clock=StepClock(new_tokens, ttft_s=0.010, step_s=0.002))
    measurement, figures = result.measurement, result.latency
    # the judged samples: tokens/s of the decode steps alone, B x (n - 1) tokens over the steps' time
    assert measurement.throughput_samples == pytest.approx([batch * (new_tokens - 1) / ((new_tokens - 1) * 0.002)] * 3)
    assert measurement.work_per_sample == new_tokens - 1
    assert figures["decode_tokens_per_s"] == pytest.approx(batch / 0.002)
    # reported: output tokens/s end to end (TTFT included), TTFT, TPOT per request, ITL percentiles of the steps
    assert figures["output_tokens_per_s"] == pytest.approx(batch * new_tokens / (0.010 + (new_tokens - 1) * 0.002))
    assert figures["ttft_ms"] == pytest.approx(10.0)
    assert figures["tpot_ms"] == pytest.approx(2.0)
    assert [figures[f"itl_{p}_ms"] for p in ("p50", "p90", "p99")] == pytest.approx([2.0] * 3)
    assert not any(key.startswith("tpot_p") for key in figures)  # per-step percentiles are ITL, not TPOT
    assert registry.traits("throughput").judged_latency_modes == {"decode"}  # the record's latency (ITL p50) too


def _step_flops(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, new_tokens: int) -> int:
    """FLOPs of the ``new_tokens - 1`` cached decode steps of a greedy generation, counted apart from its prompt
    pass."""
    model.eval()
    with torch.inference_mode():
        positions = mask.cumsum(-1) - 1
        output = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        token = output.logits[:, -1].argmax(-1, keepdim=True)

        def steps() -> None:
            nonlocal output, token, mask, positions
            for _ in range(new_tokens - 1):
                mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
                positions = positions[:, -1:] + 1
                output = model(input_ids=token, attention_mask=mask, position_ids=positions, use_cache=True,
                               **{model_api.cache_argument(model): model_api.output_cache(output)})
                token = output.logits[:, -1].argmax(-1, keepdim=True)

        return profiling.count_flops(steps)


def test_decode_flops_and_mfu_count_the_decode_steps_not_the_prompt_pass(probe):
    new_tokens, batch = llm_bench.new_tokens_for("cpu"), 2
    result = run_llm(probe.workload(), "cpu", "decode", batch, "fp32", CONTEXT, PLAN, telemetry_interval_s=0.05,
                     profile=True, clock=StepClock(new_tokens, ttft_s=0.010, step_s=0.002))
    inputs, _ = make_batch(probe.workload(), batch, "cpu", seq_len=CONTEXT)
    expected = _step_flops(_tiny_llama(), inputs["input_ids"], inputs["attention_mask"], new_tokens)
    assert expected > 0
    assert result.measurement.flops_per_sample * batch == expected
    # achieved TFLOP/s (hence MFU) = FLOPs per sample x samples/s: the decode steps' FLOPs over the decode steps' time
    samples_per_s = result.measurement.throughput_samples[0] / result.measurement.work_per_sample
    assert result.measurement.flops_per_sample * samples_per_s == pytest.approx(expected / ((new_tokens - 1) * 0.002))


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_bf16_serving_modes_run_the_model_in_bf16_and_its_kv_cache_holds_bf16(probe, mode):
    run_llm(probe.workload(), "cpu", mode, 1, "bf16", CONTEXT, PLAN, telemetry_interval_s=0.05, profile=True)
    timed = [call for call in probe.calls if call["use_cache"]]
    assert timed, "no serving forward pass was seen"
    assert all(call["weights"] == torch.bfloat16 and not call["autocast"] for call in timed)
    assert all(call["cache_keys"] == torch.bfloat16 for call in timed)


def test_bf16_decode_records_the_kv_cache_dtype(probe):
    result = run_llm(probe.workload(), "cpu", "decode", 1, "bf16", CONTEXT, PLAN, telemetry_interval_s=0.05,
                     profile=False)
    assert result.latency["kv_cache_dtype"] == "bfloat16"


def test_the_decode_record_says_how_many_warmup_generations_ran(probe):
    # a decode warmup round is a whole generation: the record's warmup_steps counts the generations run untimed,
    # whatever --warmup (which counts steps of a step window) asks for
    prompt_passes = []

    def build() -> nn.Module:
        model = probe.build()
        model.register_forward_hook(lambda _m, _args, kwargs, _out: prompt_passes.append(  # not the memory probes'
            bool(kwargs.get("use_cache")) and kwargs["input_ids"].shape[1] > 1), with_kwargs=True)
        return model

    workload = dataclasses.replace(probe.workload(), build=build)
    plan = TimingPlan(warmup_steps=3, rounds=3, min_round_s=0.001, max_rel_iqr=math.inf)
    result = run_llm(workload, "cpu", "decode", 1, "fp32", CONTEXT, plan, telemetry_interval_s=0.05, profile=False)
    generations = sum(prompt_passes)  # one prompt pass per generation
    timed = len(result.measurement.timing.round_seconds)  # the planned rounds, or more where a noisy window extended
    assert timed >= plan.rounds
    assert result.measurement.timing.warmup_steps == generations - timed == llm_bench.DECODE_WARMUP_GENERATIONS


class FixedTimer:
    def time_round(self, run_steps, steps):
        run_steps()
        return steps * 0.002


def test_bf16_infer_casts_a_causal_lm_while_training_keeps_fp32_weights_under_autocast(probe):
    options = RunOptions(PLAN, telemetry_interval_s=0.05, profile_steps=1)
    run_model(probe.workload(), "cpu", "infer", 1, "bf16", FixedTimer(), options)
    assert probe.calls and all(call["weights"] == torch.bfloat16 and not call["autocast"] for call in probe.calls)
    probe.calls.clear()
    run_model(probe.workload(), "cpu", "train", 1, "bf16", FixedTimer(), options)
    assert probe.calls and all(call["weights"] == torch.float32 and call["autocast"] for call in probe.calls)


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_train_and_infer_windows_build_no_kv_cache(probe, mode):
    workload = probe.workload()
    model = workload.build()
    inputs, labels = make_batch(workload, 2, "cpu", seq_len=CONTEXT)
    build_step(workload, model, mode, inputs, labels, "cpu", "fp32")()
    assert [(call["use_cache"], call["cache_keys"]) for call in probe.calls] == [(False, None)]


def test_train_and_infer_measurements_pass_use_cache_false_everywhere(probe):
    # the timed window, the profiled window, the FLOP count and the host-memory probes alike
    options = RunOptions(PLAN, telemetry_interval_s=0.05, profile_steps=1)
    for mode in ("train", "infer"):
        run_model(probe.workload(), "cpu", mode, 1, "fp32", FixedTimer(), options)
    assert probe.calls and all(call["use_cache"] is False and call["cache_keys"] is None for call in probe.calls)


def test_decode_rounds_of_a_bf16_model_match_generate_in_bf16(probe):
    # the cast model still decodes exactly as transformers' generate does with the same bf16 weights
    model = probe.build().to(torch.bfloat16)
    ids = torch.randint(0, VOCAB, (2, 6), generator=torch.Generator().manual_seed(7))
    timing = decode_rounds(model, ids, None, new_tokens=5, rounds=1, device="cpu", warmup=0)
    with torch.inference_mode():
        generated = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=5,
                                   min_new_tokens=5,
                                   do_sample=False, pad_token_id=0, eos_token_id=None)
    assert timing.tokens == generated[:, ids.shape[1]:].tolist()
    assert timing.kv_cache_dtype == "bfloat16"


@pytest.mark.parametrize(("task", "mode", "dtype", "cast"), [
    ("causal-lm", "infer", "bf16", True), ("causal-lm", "prefill", "fp16", True), ("causal-lm", "decode", "bf16", True),
    ("causal-lm", "train", "bf16", False), ("causal-lm", "decode", "fp32", False), ("causal-lm", "decode", "tf32",
                                                                                    False),
    ("causal-lm", "decode", "int8", False), ("classification", "infer", "bf16", False),
])
def test_which_runs_cast_the_model(task, mode, dtype, cast):
    assert numerics.runs_in_dtype(task, mode, dtype) is cast


def test_fp16_serving_casts_to_half_and_leaves_autocast_off():
    # fp16 kernels are the GPU's; on the CPU the cast and the precision context are checked without a forward pass
    model = numerics.model_for_mode(nn.Linear(4, 4), "causal-lm", "decode", "fp16")
    assert next(model.parameters()).dtype == torch.float16
    with numerics.forward_precision("cpu", "fp16", in_dtype=True):
        assert not torch.is_autocast_enabled("cpu")
    with numerics.forward_precision("cpu", "bf16", in_dtype=False):
        assert torch.is_autocast_enabled("cpu")
    assert (next(numerics.model_for_mode(nn.Linear(4, 4), "causal-lm", "train", "fp16").parameters()).dtype
            == torch.float32)


# -- the looks: the serving windows take them as every judged window does ------------------------------------------

class PassAtLook:
    """A window check that is undecided until look ``deciding``, then passes; it keeps what each look was shown."""

    def __init__(self, deciding: int) -> None:
        self.deciding = deciding
        self.seen: list[tuple[list[float], int, int]] = []

    def __call__(self, samples: list[float], look: int, looks: int) -> Verdict | None:
        self.seen.append((samples, look, looks))
        return Verdict.PASS if look >= self.deciding else None


def test_a_decode_window_judged_against_a_baseline_stops_at_the_look_that_decides(probe):
    new_tokens, batch = llm_bench.new_tokens_for("cpu"), 2
    check = PassAtLook(2)
    result = run_llm(probe.workload(), "cpu", "decode", batch, "fp32", CONTEXT, PLAN, telemetry_interval_s=0.05,
                     profile=False, clock=StepClock(new_tokens, ttft_s=0.010, step_s=0.002), settled=check)
    timing = result.measurement.timing
    assert timing.looks is not None and timing.looks.decision == "pass"
    assert timing.looks.rounds == timing.looks.planned[:2] and timing.looks.rounds[0] == PLAN.rounds
    assert len(timing.round_seconds) == timing.looks.rounds[-1] and timing.verdict_rounds > 0
    samples, look, looks = check.seen[-1]
    assert (look, looks) == (2, len(timing.looks.planned))
    assert samples == pytest.approx([batch / 0.002] * timing.looks.rounds[-1])  # the decode steps' tokens/s


def test_a_prefill_window_that_passes_its_first_look_keeps_its_planned_rounds(probe):
    check = PassAtLook(1)
    result = run_llm(probe.workload(), "cpu", "prefill", 2, "fp32", CONTEXT, PLAN, telemetry_interval_s=0.05,
                     profile=False, settled=check)
    timing = result.measurement.timing
    assert timing.looks is not None and timing.looks.rounds == [PLAN.rounds] and len(timing.round_seconds) == 3
    assert [(look, looks) for _, look, looks in check.seen] == [(1, len(timing.looks.planned))]


def test_without_a_baseline_a_serving_window_takes_no_looks(probe):
    result = run_llm(probe.workload(), "cpu", "prefill", 1, "fp32", CONTEXT, PLAN, telemetry_interval_s=0.05,
                     profile=False)
    assert result.measurement.timing.looks is None and len(result.measurement.timing.round_seconds) >= PLAN.rounds


@pytest.mark.parametrize(("mode", "rows"), [("prefill", 2 * CONTEXT), ("decode", 2)])
def test_the_quantization_probe_feeds_each_linear_the_rows_of_a_timed_step(probe, mode, rows):
    # CUDA int8 quantizes a Linear only where torch._int_mm takes its rows: a decode window times steps of one token
    # per sequence (2 rows at batch 2), whatever its prompt pass multiplies
    from hwregress.measure.precision import quantization

    inputs, _ = make_batch(probe.workload(), 2, "cpu", seq_len=CONTEXT)
    step = llm_bench.quantization_probe(mode, inputs["input_ids"], inputs["attention_mask"])
    fed = quantization.linear_rows(probe.build(), step)
    assert len(fed) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer and the LM head
    assert set(fed.values()) == {rows}

"""LLM decode timing: exact arithmetic on a scripted clock, KV-cache correctness against a no-cache
recomputation, the growing attention mask, synchronization discipline and argument checks."""

from __future__ import annotations

import copy
import types
import warnings
from collections.abc import Iterable, Iterator

import pytest
import torch
from torch import nn

import hwregress.measure.llm.decode as decode
import hwregress.measure.llm.model_api as model_api
from hwregress.measure.llm.decode import DecodeTiming, decode_rounds, prefill_rounds
from hwregress.workloads import import_torchvision


def _transformers():
    import_torchvision()  # transformers imports torchvision, whose wheel here may need the op-schema shim
    import transformers

    return transformers


def _tiny_gpt2() -> nn.Module:
    transformers = _transformers()
    torch.manual_seed(0)
    # at the default initializer_range (0.02) the tied-embedding GPT-2 only repeats its last input token, whatever the
    # context: a cache bug would go unseen, so the weights are drawn wider to make attention decide the next token
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512, initializer_range=0.3,
                                     bos_token_id=None, eos_token_id=None)
    return transformers.GPT2LMHeadModel(config)


def _tiny_llama() -> nn.Module:
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=512)
    return transformers.LlamaForCausalLM(config)


MODELS = {"gpt2": _tiny_gpt2, "llama": _tiny_llama}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request) -> nn.Module:
    # left in training mode, as built: decode_rounds must switch to eval itself (and restore the flag)
    return MODELS[request.param]()


@pytest.fixture(scope="module")
def gpt2() -> nn.Module:
    return _tiny_gpt2()


def _prompt(batch: int = 2, length: int = 5, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 512, (batch, length), generator=generator)


class ScriptedClock:
    """Returns the scripted times (seconds) in order; fails the test if read more often than scripted."""

    def __init__(self, times: Iterable[float], events: list[str] | None = None) -> None:
        self.times = list(times)
        self.reads = 0
        self.events = events

    def __call__(self) -> float:
        if self.reads >= len(self.times):
            raise AssertionError(f"clock read {self.reads + 1} times, only {len(self.times)} scripted")
        if self.events is not None:
            self.events.append("clock")
        self.reads += 1
        return self.times[self.reads - 1]


class Recording(nn.Module):
    """Delegates to a causal LM and records the shapes of what each call was given. Its forward names ``cache`` and
    hands the KV cache on under the name the inner model's release takes (:func:`model_api.cache_argument`)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.calls: list[dict[str, object]] = []

    def forward(self, cache=None, **kwargs):
        self.calls.append({
            "input_ids": tuple(kwargs["input_ids"].shape),
            "attention_mask": tuple(kwargs["attention_mask"].shape),
            "position_ids": kwargs["position_ids"].tolist(),
            "has_cache": cache is not None,
            "use_cache": kwargs.get("use_cache"),
            "inference_mode": torch.is_inference_mode_enabled(),
            "training": self.inner.training,
        })
        if cache is not None:
            kwargs[model_api.cache_argument(self.inner)] = cache
        return self.inner(**kwargs)


def _greedy_without_cache(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                          new_tokens: int) -> list[list[int]]:
    """Reference: recompute the whole sequence every step, no KV cache, positions counted over the mask."""
    ids, mask = input_ids, attention_mask
    model.eval()
    with torch.inference_mode():
        for _ in range(new_tokens):
            positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
    return ids[:, input_ids.shape[1]:].tolist()


# round 1: prefill 10 ms, steps 2, 3, 4 ms; round 2: prefill 20 ms, steps 1, 5, 6 ms
SCRIPT = [0.000, 0.010, 0.012, 0.015, 0.019, 1.000, 1.020, 1.021, 1.026, 1.032]


def test_scripted_clock_gives_exact_ttft_itl_tpot_and_throughputs(gpt2):
    clock = ScriptedClock(SCRIPT)
    recording = Recording(gpt2)
    timing = decode_rounds(recording, _prompt(2, 5), None, new_tokens=4, rounds=2, device="cpu", clock=clock, warmup=1)

    assert clock.reads == len(SCRIPT)  # new_tokens + 1 readings per timed round, none during warmup
    assert len(recording.calls) == (1 + 2) * 4  # warmup ran, untimed
    assert (timing.batch_size, timing.prompt_tokens, timing.new_tokens) == (2, 5, 4)
    assert timing.prefill_s == pytest.approx([0.010, 0.020])
    assert timing.step_s[0] == pytest.approx([0.002, 0.003, 0.004])
    assert timing.step_s[1] == pytest.approx([0.001, 0.005, 0.006])
    assert timing.ttft_ms() == pytest.approx(15.0)
    # inter-token latency: all steps sorted, 1..6 ms; linear percentile index q/100 * 5
    assert timing.itl_percentiles_ms() == pytest.approx({"p50": 3.5, "p90": 5.5, "p99": 5.95})
    # TPOT per request (vLLM, MLPerf): (e2e - TTFT) / (n - 1) = (19 - 10) / 3 and (32 - 20) / 3 ms
    assert timing.tpot_ms() == pytest.approx([3.0, 4.0])
    assert timing.output_tokens_per_s() == pytest.approx([2 * 4 / 0.019, 2 * 4 / 0.032])  # TTFT included
    assert timing.decode_tokens_per_s() == pytest.approx([2 * 3 / 0.009, 2 * 3 / 0.012])
    assert timing.prefill_tokens_per_s() == pytest.approx([2 * 5 / 0.010, 2 * 5 / 0.020])
    assert len(timing.tokens) == 2 and all(len(row) == 4 for row in timing.tokens)


def test_every_clock_reading_follows_a_device_synchronization(gpt2, monkeypatch):
    events: list[str] = []
    monkeypatch.setattr(decode, "synchronize", lambda device: events.append(f"sync {device}"))
    decode_rounds(gpt2, _prompt(), None, new_tokens=3, rounds=1, device="cpu",
                  clock=ScriptedClock([0, 1, 2, 3], events))
    assert events == ["sync cpu", "clock"] * 4

    events.clear()
    seconds = prefill_rounds(gpt2, _prompt(), None, rounds=2, device="cpu",
                             clock=ScriptedClock([0, 0.25, 1, 1.5], events))
    assert events == ["sync cpu", "clock"] * 4
    assert seconds == [0.25, 0.5]


def test_kv_cache_tokens_equal_no_cache_recomputation(model):
    input_ids = _prompt(3, 6)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :2] = 0  # a left-padded row: positions must follow the mask in both paths
    timing = decode_rounds(model, input_ids, attention_mask, new_tokens=8, rounds=1, device="cpu", warmup=0)
    assert any(len(set(row)) > 2 for row in timing.tokens)  # the context matters: not one token repeated
    assert timing.tokens == _greedy_without_cache(model, input_ids, attention_mask, 8)


def test_kv_cache_tokens_equal_transformers_generate(model):
    input_ids = _prompt(2, 6, seed=3)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :3] = 0
    timing = decode_rounds(model, input_ids, attention_mask, new_tokens=6, rounds=1, device="cpu", warmup=0)
    model.eval()  # generate() keeps the training flag: GPT-2's dropout would make its tokens random
    with torch.inference_mode():
        generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6,
                                   min_new_tokens=6,
                                   do_sample=False, pad_token_id=0, eos_token_id=None)
    assert timing.tokens == generated[:, input_ids.shape[1]:].tolist()


def test_attention_mask_grows_one_column_per_step(gpt2):
    recording = Recording(gpt2)
    recording.train()
    decode_rounds(recording, _prompt(2, 5), None, new_tokens=4, rounds=1, device="cpu", warmup=0)

    assert [call["attention_mask"] for call in recording.calls] == [(2, 5), (2, 6), (2, 7), (2, 8)]
    assert [call["input_ids"] for call in recording.calls] == [(2, 5), (2, 1), (2, 1), (2, 1)]
    assert [call["has_cache"] for call in recording.calls] == [False, True, True, True]
    assert [call["position_ids"] for call in recording.calls[1:]] == [[[5], [5]], [[6], [6]], [[7], [7]]]
    assert all(call["use_cache"] and call["inference_mode"] and not call["training"] for call in recording.calls)
    assert recording.training  # the caller's training flag is restored


def test_single_new_token_has_no_decode_steps(gpt2):
    timing = decode_rounds(gpt2, _prompt(), None, new_tokens=1, rounds=1, device="cpu", clock=ScriptedClock([0, 0.5]))
    assert timing.step_s == [[]]
    assert timing.output_tokens_per_s() == [2 / 0.5]
    with pytest.raises(ValueError, match="new_tokens=1"):
        timing.itl_percentiles_ms()
    with pytest.raises(ValueError, match="new_tokens=1"):
        timing.tpot_ms()
    with pytest.raises(ValueError, match="new_tokens=1"):
        timing.decode_tokens_per_s()


def test_inconsistent_timing_is_rejected():
    with pytest.raises(ValueError, match="expected new_tokens - 1 = 2"):
        DecodeTiming(prefill_s=[0.1], step_s=[[0.1]], batch_size=1, prompt_tokens=4, new_tokens=3)
    with pytest.raises(ValueError, match=r"round 0 prefill took 0\.0 s"):
        DecodeTiming(prefill_s=[0.0], step_s=[[]], batch_size=1, prompt_tokens=4, new_tokens=1).prefill_tokens_per_s()


@pytest.mark.parametrize(("overrides", "message"), [
    ({"new_tokens": 0}, "new_tokens must be an integer >= 1, got 0"),
    ({"rounds": 0}, "rounds must be an integer >= 1, got 0"),
    ({"warmup": -1}, "warmup must be an integer >= 0, got -1"),
    ({"input_ids": torch.zeros(2, 5)}, r"got \(2, 5\) torch.float32"),
    ({"input_ids": torch.zeros(5, dtype=torch.long)}, r"got \(5,\) torch.int64"),
    ({"input_ids": torch.zeros(2, 0, dtype=torch.long)}, r"got shape \(2, 0\)"),
    ({"attention_mask": torch.ones(2, 4, dtype=torch.long)},
     r"attention_mask shape \(2, 4\) differs from input_ids \(2, 5\)"),
])
def test_bad_arguments_raise_value_error_naming_the_value(gpt2, overrides, message):
    arguments = {"input_ids": _prompt(2, 5), "attention_mask": None, "new_tokens": 2, "rounds": 1, "warmup": 0,
                 **overrides}
    with pytest.raises(ValueError, match=message):
        decode_rounds(gpt2, device="cpu", **arguments)


def test_prefill_rounds_rejects_bad_rounds(gpt2):
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got 0"):
        prefill_rounds(gpt2, _prompt(), None, rounds=0, device="cpu")


def test_tpot_is_the_mean_step_per_request_while_itl_percentiles_pool_every_step():
    # one round of even steps and one with a single slow step: ITL p99 sees the stall, TPOT averages it away
    timing = DecodeTiming(prefill_s=[0.050, 0.050], step_s=[[0.010] * 4, [0.010, 0.010, 0.010, 0.050]], batch_size=1,
                          prompt_tokens=8, new_tokens=5)
    assert timing.tpot_ms() == pytest.approx([10.0, 20.0])  # (e2e 90 - TTFT 50) / 4, (130 - 50) / 4
    assert timing.itl_percentiles_ms()["p50"] == pytest.approx(10.0)
    assert timing.itl_percentiles_ms()["p99"] == pytest.approx(50.0 - 0.07 * 40.0)  # index 0.99 * 7 = 6.93 of 8 sorted


def _logits_lengths(model: nn.Module) -> tuple[list[int], object]:
    """The sequence length of the logits of each forward call of ``model`` (recorded by a forward hook)."""
    lengths: list[int] = []
    handle = model.register_forward_hook(lambda _module, _args, output: lengths.append(output.logits.shape[1]))
    return lengths, handle


def _gpt2_takes_logits_to_keep() -> bool:
    from packaging.version import Version

    return Version(_transformers().__version__) >= Version(model_api.GPT2_LOGITS_TO_KEEP_SINCE)


def test_prefill_asks_the_logits_of_the_last_position_only(model):
    # as servers and transformers' generate do (logits_to_keep=1): the prompt pass projects one position on the vocab,
    # on every release whose forward takes the argument (GPT-2's from 4.53; before, all 7 prompt positions)
    kept = 1 if type(model).__name__ != "GPT2LMHeadModel" or _gpt2_takes_logits_to_keep() else 7
    lengths, handle = _logits_lengths(model)
    try:
        prefill_rounds(model, _prompt(2, 7), None, rounds=1, device="cpu", warmup=0)
        assert lengths == [kept]
        lengths.clear()
        decode_rounds(model, _prompt(2, 7), None, new_tokens=3, rounds=1, device="cpu", warmup=0)
        assert lengths == [kept, 1, 1]
    finally:
        handle.remove()


def test_a_model_without_logits_to_keep_still_decodes_from_its_last_position(gpt2):
    # a forward that names neither logits_to_keep nor num_logits_to_keep (older transformers, a model of your own)
    # gets neither: its full logits are computed and the last position's taken, with the same tokens
    recording = Recording(gpt2)
    input_ids = _prompt(2, 6, seed=5)
    timing = decode_rounds(recording, input_ids, None, new_tokens=4, rounds=1, device="cpu", warmup=0)
    assert timing.tokens == _greedy_without_cache(gpt2, input_ids, torch.ones_like(input_ids), 4)
    assert model_api.logits_to_keep_argument(recording) == {}


def test_gpt2_is_asked_for_its_last_logits_on_the_releases_whose_forward_takes_it(gpt2):
    # GPT2LMHeadModel.forward gained logits_to_keep in transformers 4.53.0 (absent from 4.52.4's modeling_gpt2.py);
    # pyproject allows >= 4.45, so the argument is detected, not assumed
    assert model_api.logits_to_keep_argument(gpt2) == ({"logits_to_keep": 1} if _gpt2_takes_logits_to_keep() else {})


def test_num_logits_to_keep_is_used_where_the_forward_names_it_so():
    class OlderLlama(nn.Module):  # transformers 4.45-4.48 spelled it num_logits_to_keep (LlamaForCausalLM.forward)
        def forward(self, input_ids=None, attention_mask=None, num_logits_to_keep: int = 0):
            raise AssertionError("not called")

    assert model_api.logits_to_keep_argument(OlderLlama()) == {"num_logits_to_keep": 1}


def test_the_kv_cache_dtype_of_a_bf16_model_is_recorded(model):
    timing = decode_rounds(model, _prompt(2, 5), None, new_tokens=2, rounds=1, device="cpu", warmup=0)
    assert timing.kv_cache_dtype == "float32"
    cast = copy.deepcopy(model).to(torch.bfloat16)
    timing = decode_rounds(cast, _prompt(2, 5), None, new_tokens=2, rounds=1, device="cpu", warmup=0)
    assert timing.kv_cache_dtype == "bfloat16"


def test_after_warmup_runs_once_between_the_warmup_and_the_timed_rounds(gpt2):
    """The LLM windows settle their peak-memory meter there, so the warmup's one-time transients are not the test's."""
    from hwregress.measure.llm.decode import prefill_rounds

    recording = Recording(gpt2)
    for run, passes_per_round in ((lambda **kw: decode_rounds(recording, _prompt(), None, new_tokens=3, **kw), 3),
                                  (lambda **kw: prefill_rounds(recording, _prompt(), None, **kw), 1)):
        recording.calls.clear()
        events: list[str] = []
        run(rounds=1, device="cpu", warmup=2, clock=ScriptedClock(range(10), events),
            after_warmup=lambda events=events: events.append(f"settle after {len(recording.calls)} passes"))
        assert [event for event in events if event != "clock"] == [f"settle after {2 * passes_per_round} passes"]
        assert events[0].startswith("settle")  # nothing timed before it


def test_a_driver_runs_the_timed_rounds_and_learns_the_warmups_time(gpt2):
    """The serving windows' rounds go through the looks of every judged window
    (:func:`hwregress.measure.timing.run_rounds`): the driver runs them, each returning the seconds it judges (a
    decode round's decode steps, a prefill round's pass), and plans with the warmup round's wall time."""
    seen: list = []

    def driver(run_round, warmup_round_s):
        seen.append(warmup_round_s)
        seen.append([run_round() for _ in range(2)])

    timing = decode_rounds(gpt2, _prompt(), None, new_tokens=3, rounds=1, device="cpu", driver=driver,
                           clock=ScriptedClock([0, 1, 1.5, 2, 10, 11, 11.25, 11.5]))
    assert seen[0] > 0 and seen[1] == pytest.approx([1.0, 0.5])
    assert timing.prefill_s == pytest.approx([1.0, 1.0]) and len(timing.step_s) == 2

    seen.clear()
    seconds = prefill_rounds(gpt2, _prompt(), None, rounds=1, device="cpu", driver=driver,
                             clock=ScriptedClock([0, 0.25, 1, 1.5]))
    assert seen[0] > 0 and seen[1] == pytest.approx([0.25, 0.5]) == seconds


@pytest.fixture
def transformers_log() -> Iterator[list]:
    """The records transformers logs at warning level while the test runs, its once-only cache cleared first (a
    deprecation logged earlier in the process would not be logged again)."""
    import logging

    from transformers.utils import logging as hf_logging

    logging.Logger.warning_once.cache_clear()
    records: list = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    library = hf_logging.get_logger()
    library.addHandler(handler)
    yield records
    library.removeHandler(handler)


def test_decoding_passes_the_kv_cache_as_the_installed_release_names_it(model, transformers_log):
    # transformers 5.x renamed the forward's past_key_values to cache, warning "`past_key_values` is deprecated and
    # will be removed in version 5.40.0": every decode step of every run warned (and 5.40 drops the old name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        timing = decode_rounds(model, _prompt(2, 5), None, new_tokens=3, rounds=1, device="cpu", warmup=1)
    said = [str(w.message) for w in caught] + [record.getMessage() for record in transformers_log]
    assert [text for text in said if "Use `cache` instead" in text] == []  # the argument's and the output's
    assert timing.tokens == _greedy_without_cache(model, _prompt(2, 5), torch.ones_like(_prompt(2, 5)), 3)


def test_a_forward_that_names_past_key_values_gets_its_cache_under_that_name():
    # transformers before 5.x, and a model of your own written to the older Hugging Face call
    class OlderLm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.caches: list = []

        def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None):
            self.caches.append(past_key_values)
            length = 0 if past_key_values is None else past_key_values[0][0].shape[2]
            cache = ((torch.zeros(input_ids.shape[0], 1, length + input_ids.shape[1], 2),) * 2,)
            return types.SimpleNamespace(logits=torch.zeros(*input_ids.shape, 8), past_key_values=cache)

    older = OlderLm()
    timing = decode_rounds(older, _prompt(2, 5), None, new_tokens=3, rounds=1, device="cpu", warmup=0)
    assert [None if cache is None else cache[0][0].shape[2] for cache in older.caches] == [None, 5, 6]
    assert timing.kv_cache_dtype == "float32"

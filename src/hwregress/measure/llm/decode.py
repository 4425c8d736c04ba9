"""LLM serving timings: the prompt pass (prefill) and greedy autoregressive decoding with a KV cache.

Decoding is driven by hand rather than through ``model.generate`` so every step can be timed alone:
the prompt pass produces the first new token (its time is the *time to first token*, TTFT), then
each further token is one forward pass over the single newest token with the model's
``past_key_values`` (its time is one *inter-token latency*, ITL). Every interval is bounded by a
device synchronization before the clock is read, so queued kernels are never mistaken for done work.

The figures follow vLLM's serving benchmark (``vllm/benchmarks/serve.py``, ``calculate_metrics``, commit
009e6d4a): per request ``tpot = (latency - ttft) / (output_len - 1)`` (the *time per output token*, TPOT, the
end-to-end latency less TTFT over the tokens after the first; MLPerf Inference's LoadGen likewise keeps one TPOT
per sample, ``time_per_output_token_arr`` in ``loadgen/results.cc``, ``ProcessTokenLatencies``), while
``itls += outputs[i].itl`` pools every gap between consecutive tokens of every request and its percentiles are
``np.percentile(itls, p)``. TPOT is a per-request mean; ITL percentiles see a single slow step.

The prompt pass asks for the logits of the last position only (``logits_to_keep=1``), as transformers'
``generate`` and serving engines do: ``slice_logits_to_keep`` in transformers' ``modeling_utils.py`` "keep[s]
the last `logits_to_keep` positions ... in `generate`, we use `logits_to_keep=1` whenever possible to only
project the last logit onto the (usually huge) vocab size dimension since we only care about the next token".
See :func:`logits_to_keep_argument` for older spellings.

The model is any Hugging Face style causal LM: ``model(input_ids=..., attention_mask=...,
position_ids=..., past_key_values=..., use_cache=True)`` returning an object with ``logits``
[B, S, vocab] and ``past_key_values``; where the forward names ``cache`` instead (transformers 5.x, whose
``past_key_values`` warns and goes in 5.40) the cache goes in and comes out under that name (:func:`cache_argument`,
:func:`output_cache`). Decoding is greedy (argmax): nothing here is random.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from hwregress.hardware.devices import synchronize
from hwregress.measure.llm.model_api import cache_argument, cache_key_dtype, logits_to_keep_argument, output_cache
from hwregress.measure.timing import RoundsDriver, drive_rounds, warm_up

ITL_PERCENTILES = (50, 90, 99)


class Clock(Protocol):
    """A monotonic clock: each call returns the current time in seconds (``time.perf_counter``)."""

    def __call__(self) -> float: ...


@dataclass
class DecodeTiming:
    """Timed greedy generation, one entry per timed round.

    Attributes:
        prefill_s: seconds of each round's prompt pass including the argmax that yields the first new
            token, i.e. the time to first token (TTFT).
        step_s: each round's per-step seconds for the ``new_tokens - 1`` tokens after the first (one
            forward pass over the newest token with the KV cache, plus its argmax), i.e. ITL samples.
        batch_size: sequences generated in parallel (B).
        prompt_tokens: prompt length per sequence (S, padding positions included).
        new_tokens: tokens generated per sequence, the first one included.
        tokens: the generated token ids of the last timed round, ``batch_size`` lists of ``new_tokens``
            ids each (empty when not recorded); the cache-correctness check compares them.
        kv_cache_dtype: the dtype of the KV cache's keys after the last timed round (``"bfloat16"``), None when
            the model returned no cache this module can read (see :func:`cache_key_dtype`).

    Raises:
        ValueError: the per-round lists disagree in length with each other or with ``new_tokens``.
    """

    prefill_s: list[float]
    step_s: list[list[float]]
    batch_size: int
    prompt_tokens: int
    new_tokens: int
    tokens: list[list[int]] = field(default_factory=list)
    kv_cache_dtype: str | None = None

    def __post_init__(self) -> None:
        if len(self.prefill_s) != len(self.step_s):
            raise ValueError(f"{len(self.prefill_s)} prefill times but {len(self.step_s)} rounds of step times")
        for index, steps in enumerate(self.step_s):
            if len(steps) != self.new_tokens - 1:
                raise ValueError(f"round {index} has {len(steps)} step times, expected new_tokens - 1 = "
                                 f"{self.new_tokens - 1}")

    def output_tokens_per_s(self) -> list[float]:
        """End-to-end output throughput per round, tokens/s, TTFT included:
        ``batch_size * new_tokens / (prefill_s + sum(step_s))``.

        This is the "output token throughput" of vLLM's ``benchmark_serving`` and MLPerf Inference's
        LLM "tokens per second": generated tokens over the whole request time, prompt pass included.
        """
        return [
            _rate(self.batch_size * self.new_tokens, prefill + sum(steps), f"round {index} prefill + steps")
            for index, (prefill, steps) in enumerate(zip(self.prefill_s, self.step_s, strict=True))
        ]

    def decode_tokens_per_s(self) -> list[float]:
        """Decode-step throughput per round, tokens/s, TTFT excluded: ``batch_size * (new_tokens - 1) / sum(step_s)``
        (the steps' own rate, what a decode-bound server sustains; the end-to-end rate is :meth:`output_tokens_per_s`).

        Raises:
            ValueError: ``new_tokens == 1`` (no decode steps were run).
        """
        self._require_steps()
        return [
            _rate(self.batch_size * (self.new_tokens - 1), sum(steps), f"round {index} steps")
            for index, steps in enumerate(self.step_s)
        ]

    def prefill_tokens_per_s(self) -> list[float]:
        """Prompt throughput per round, tokens/s: ``batch_size * prompt_tokens / prefill_s`` (the prefill
        time includes the first token's argmax, negligible beside the prompt pass)."""
        return [
            _rate(self.batch_size * self.prompt_tokens, prefill, f"round {index} prefill")
            for index, prefill in enumerate(self.prefill_s)
        ]

    def ttft_ms(self) -> float:
        """Median time to first token over the rounds, ms."""
        return float(np.median(self.prefill_s)) * 1000.0

    def e2e_s(self) -> list[float]:
        """End-to-end latency of each round's requests, seconds: ``prefill_s + sum(step_s)``."""
        return [prefill + sum(steps) for prefill, steps in zip(self.prefill_s, self.step_s, strict=True)]

    def tpot_ms(self) -> list[float]:
        """Time per output token of each round, ms, as vLLM and MLPerf define it per request:
        ``(e2e - TTFT) / (new_tokens - 1)`` (vLLM ``calculate_metrics``: ``tpot = latency_minus_ttft /
        (output_len - 1)``). The B sequences of a round are B requests served together with the same times, so
        one value per round stands for all of them (their median and mean are those of these values).

        Raises:
            ValueError: ``new_tokens == 1`` (no decode steps were run).
        """
        self._require_steps()
        return [(e2e - ttft) / (self.new_tokens - 1) * 1000.0
                for e2e, ttft in zip(self.e2e_s(), self.prefill_s, strict=True)]

    def itl_percentiles_ms(self) -> dict[str, float]:
        """Inter-token latency over every step of every round, ms: ``{"p50": .., "p90": .., "p99": ..}``
        (``numpy.percentile``, linear interpolation, as vLLM's ``percentiles_itl_ms`` over its pooled ``itls``). One
        step yields a token for each of the B sequences.

        Raises:
            ValueError: ``new_tokens == 1`` (no decode steps were run).
        """
        self._require_steps()
        all_steps_ms = np.asarray([s for steps in self.step_s for s in steps], dtype=float) * 1000.0
        return {f"p{q}": float(np.percentile(all_steps_ms, q, method="linear")) for q in ITL_PERCENTILES}

    def _require_steps(self) -> None:
        if self.new_tokens < 2:
            raise ValueError(f"no decode steps to report: new_tokens={self.new_tokens} (the first "
                             "token comes from prefill)")


def decode_rounds(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                  new_tokens: int, rounds: int, device: str, clock: Clock = time.perf_counter,
                  warmup: int = 1, after_warmup: Callable[[], None] | None = None,
                  driver: RoundsDriver | None = None) -> DecodeTiming:
    """Time greedy generation of ``new_tokens`` tokens per sequence, ``rounds`` times after ``warmup`` untimed rounds.

    Each round: the prompt pass ``model(input_ids [B, S], attention_mask [B, S], use_cache=True)`` (with
    ``logits_to_keep=1`` where the forward takes it: logits [B, 1, vocab]) and the argmax of ``logits[:, -1]`` give
    the first token; then ``new_tokens - 1`` steps each feed the newest token [B, 1] with the previous KV cache
    (``cache`` or ``past_key_values``: :func:`cache_argument`), the attention mask extended by one column of ones
    and the next position ids. Position ids follow the attention mask as ``transformers``' ``generate``
    does (``cumsum(mask) - 1``), so left-padded prompts decode as they would there. The clock is read
    after a device synchronization at every interval boundary: ``new_tokens + 1`` readings per timed
    round, none in warmup. Runs under ``torch.inference_mode()`` with the model in eval mode (its
    training flag is restored afterwards).

    Args:
        model: a causal LM already on ``device`` (see the module docstring for the call it must accept).
        input_ids: prompt token ids [B, S], dtype ``torch.long``; moved to ``device``.
        attention_mask: [B, S], 1 where a position is attended, 0 at padding; None means all ones.
        new_tokens: tokens to generate per sequence, the first (from the prompt pass) included, >= 1.
        rounds: timed rounds, >= 1 (unless ``driver`` decides them).
        device: torch device string to synchronize (``"cuda:0"``, ``"cpu"``).
        clock: seconds; injectable for tests.
        warmup: untimed rounds first (allocator growth, kernel selection), >= 0.
        after_warmup: called once between the warmup and the timed rounds (a peak-memory meter's ``settle``, say).
        driver: runs the timed rounds instead of ``rounds`` of them (:data:`RoundsDriver`); a round's judged seconds
            are its decode steps' (the prompt pass left out). With a driver the last warmup round is timed by the
            wall clock after a synchronization.

    Returns:
        :class:`DecodeTiming` with TTFT and per-step seconds of each round, the last round's tokens and the dtype
        of its KV cache.

    Raises:
        ValueError: ``new_tokens < 1``, ``rounds < 1``, ``warmup < 0``, ``input_ids`` not a non-empty 2-D
            long tensor, or an ``attention_mask`` of another shape; the message names the value.
    """
    _check_counts(new_tokens=new_tokens, rounds=rounds, warmup=warmup)
    input_ids, attention_mask = _prepare_inputs(input_ids, attention_mask, device)
    prefill_s: list[float] = []
    step_s: list[list[float]] = []
    tokens: list[list[int]] = []
    cache_dtype: torch.dtype | None = None

    def run_round() -> float:
        nonlocal tokens, cache_dtype
        generated, boundaries, cache_dtype = _generate(model, input_ids, attention_mask, new_tokens, device,
                                                       clock=clock)
        intervals = [end - start for start, end in itertools.pairwise(boundaries)]
        prefill_s.append(intervals[0])
        step_s.append(intervals[1:])
        tokens = generated.tolist()
        return sum(intervals[1:])

    with _inference(model):
        warmup_round_s = warm_up(lambda: _generate(model, input_ids, attention_mask, new_tokens, device, clock=None),
                                 warmup, device, timed=driver is not None)
        if after_warmup is not None:
            after_warmup()
        drive_rounds(run_round, rounds, driver, warmup_round_s)
    return DecodeTiming(prefill_s=prefill_s, step_s=step_s, batch_size=input_ids.shape[0],
                        prompt_tokens=input_ids.shape[1], new_tokens=new_tokens, tokens=tokens,
                        kv_cache_dtype=None if cache_dtype is None else str(cache_dtype).removeprefix("torch."))


def prefill_rounds(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                   rounds: int, device: str, clock: Clock = time.perf_counter, warmup: int = 1,
                   after_warmup: Callable[[], None] | None = None, driver: RoundsDriver | None = None) -> list[float]:
    """Seconds of each of ``rounds`` prompt passes ``model(input_ids [B, S], attention_mask [B, S], use_cache=True)``
    after ``warmup`` untimed ones; the KV cache is built and only the last position's logits [B, 1, vocab] are
    asked for (``logits_to_keep=1`` where the forward takes it), as serving runs it. Each pass is bounded by a
    device synchronization before each clock reading. Tokens/s of a pass: ``B * S / seconds``.

    Runs under ``torch.inference_mode()`` with the model in eval mode (training flag restored afterwards);
    ``after_warmup`` is called once between the warmup and the timed passes. ``driver`` runs the timed passes instead
    of ``rounds`` of them (:data:`RoundsDriver`, as :func:`decode_rounds`).

    Raises:
        ValueError: ``rounds < 1``, ``warmup < 0``, ``input_ids`` not a non-empty 2-D long tensor, or an
            ``attention_mask`` of another shape; the message names the value.
    """
    _check_counts(rounds=rounds, warmup=warmup)
    input_ids, attention_mask = _prepare_inputs(input_ids, attention_mask, device)
    position_ids = _positions_from_mask(attention_mask)
    last_logits = logits_to_keep_argument(model)
    seconds: list[float] = []

    def prompt_pass() -> None:
        model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True,
              **last_logits)

    def run_round() -> float:
        synchronize(device)
        start = clock()
        prompt_pass()
        synchronize(device)
        seconds.append(clock() - start)
        return seconds[-1]

    with _inference(model):
        warmup_round_s = warm_up(prompt_pass, warmup, device, timed=driver is not None)
        if after_warmup is not None:
            after_warmup()
        drive_rounds(run_round, rounds, driver, warmup_round_s)
    return seconds


def _generate(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, new_tokens: int,
              device: str, clock: Clock | None) -> tuple[torch.Tensor, list[float], torch.dtype | None]:
    """One greedy generation. Returns the new ids [B, new_tokens], when ``clock`` is given the ``new_tokens + 1``
    synchronized clock readings bounding the prompt pass and each step (seconds), and the KV cache's key dtype."""
    boundaries: list[float] = []
    last_logits = logits_to_keep_argument(model)
    cache_name = cache_argument(model)

    def mark() -> None:
        if clock is not None:
            synchronize(device)
            boundaries.append(clock())

    mask = attention_mask
    positions = _positions_from_mask(mask)
    mark()
    outputs = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, **last_logits)
    token = outputs.logits[:, -1].argmax(dim=-1, keepdim=True)  # [B, 1]
    mark()
    generated = [token]
    for _ in range(new_tokens - 1):
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
        positions = positions[:, -1:] + 1
        outputs = model(input_ids=token, attention_mask=mask, position_ids=positions, use_cache=True,
                        **{cache_name: output_cache(outputs)}, **last_logits)
        token = outputs.logits[:, -1].argmax(dim=-1, keepdim=True)
        mark()
        generated.append(token)
    return torch.cat(generated, dim=1), boundaries, cache_key_dtype(output_cache(outputs))


def _positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids [B, S] counting attended positions from 0; padding gets 0 (as ``transformers``' generate)."""
    positions = attention_mask.long().cumsum(dim=-1) - 1
    return positions.masked_fill(attention_mask == 0, 0)


def _prepare_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                    device: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype != torch.long:
        described = (f"{tuple(input_ids.shape)} {input_ids.dtype}" if isinstance(input_ids, torch.Tensor)
                     else type(input_ids))
        raise ValueError(f"input_ids must be a 2-D torch.long tensor [batch, prompt tokens], got {described}")
    if input_ids.numel() == 0:
        raise ValueError(f"input_ids must hold at least one token per sequence, got shape {tuple(input_ids.shape)}")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    elif attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} differs from input_ids "
                         f"{tuple(input_ids.shape)}")
    return input_ids.to(device), attention_mask.to(device)


def _check_counts(**counts: int) -> None:
    minimum = {"new_tokens": 1, "rounds": 1, "warmup": 0}
    for name, value in counts.items():
        if not isinstance(value, int) or value < minimum[name]:
            raise ValueError(f"{name} must be an integer >= {minimum[name]}, got {value!r}")


def _rate(tokens: int, seconds: float, what: str) -> float:
    if seconds <= 0:
        raise ValueError(f"{what} took {seconds} s; a rate needs a positive time (clock too coarse?)")
    return tokens / seconds


@contextmanager
def _inference(model: torch.nn.Module) -> Iterator[None]:
    """``torch.inference_mode()`` with ``model.eval()``, the model's training flag restored on exit."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)

"""The seeded request trace a serving window replays: when each request arrives and how long its prompt and its
output are. The same seed and settings give a byte-identical trace (:meth:`Trace.to_json`), which the record keeps
with its digest, so a baseline and a later run replay the same load.

Arrivals follow ``vllm bench serve`` (``vllm/benchmarks/serve.py``, ``get_request``): the gaps between requests are
gamma-distributed with shape ``burstiness`` and scale ``1 / (rate * burstiness)``, so their mean is ``1 / rate``
and their coefficient of variation ``1 / sqrt(burstiness)``: 1 is a Poisson process, below 1 burstier, above 1 more
even, and infinity constant gaps. As there, the cumulative arrival times are rescaled so that the last request
arrives at exactly ``requests / rate`` seconds: seeds then differ in the pattern, not in the load. A closed loop
(``concurrency`` clients, each sending its next request when its last one ended) has no arrival times.

Lengths come from a :class:`LengthProfile`: fixed, or long-tailed (log-normal around the given median, as real
chat prompts and answers are, capped at ``cap`` times it). Arrivals, lengths and prompt contents draw from three
independent streams spawned from the seed (NumPy's ``SeedSequence.spawn``), so a change of length profile leaves
the arrival pattern as it was.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

TRACE_SCHEMA = 1
ARRIVAL_DIGITS = 6  # arrival times are kept to the microsecond: an asyncio scheduler is not finer


class TraceError(ValueError):
    """A trace's settings or a stored trace that cannot be used; the message names the value, where it came from
    and what to give instead."""


@dataclass(frozen=True)
class Arrivals:
    """How requests arrive.

    Attributes:
        rate: requests per second of an open loop (> 0); None for a closed loop.
        burstiness: the gamma shape of the gaps (> 0; 1 = Poisson, ``math.inf`` = constant gaps); open loop only.
        concurrency: clients of a closed loop (>= 1), each sending its next request when its last one ended; None
            for an open loop.
    """

    rate: float | None = None
    burstiness: float = 1.0
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if (self.rate is None) == (self.concurrency is None):
            raise TraceError(f"arrivals rate={self.rate!r}, concurrency={self.concurrency!r}: give a request rate "
                             "(an open loop) or a number of concurrent clients (a closed loop), exactly one")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise TraceError(f"request rate {self.rate!r}: give a finite number of requests per second > 0")
        if not self.burstiness > 0:  # NaN too
            raise TraceError(f"burstiness {self.burstiness!r}: give a gamma shape > 0 (1 is a Poisson process)")
        if self.concurrency is not None and (isinstance(self.concurrency, bool) or self.concurrency < 1):
            raise TraceError(f"concurrency {self.concurrency!r}: give a whole number of clients >= 1")

    @property
    def closed(self) -> bool:
        """Whether this is a closed loop (no arrival times: each client sends when its last request ended)."""
        return self.concurrency is not None


@dataclass(frozen=True)
class LengthProfile:
    """Prompt and output lengths, in tokens.

    Attributes:
        name: how the report names it (``fixed``, ``long-tail``).
        prompt_tokens: the prompt length, or its median when ``sigma > 0`` (>= 1).
        output_tokens: the output length asked for (``max_tokens``), or its median (>= 1).
        sigma: the log-normal's sigma (0 = every request the same lengths; 1 puts a p99 about 10x the median).
        cap: no length exceeds ``cap`` times its median (>= 1).
    """

    name: str
    prompt_tokens: int
    output_tokens: int
    sigma: float = 0.0
    cap: float = 8.0

    def __post_init__(self) -> None:
        for what, value in (("prompt_tokens", self.prompt_tokens), ("output_tokens", self.output_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TraceError(f"length profile {self.name!r}: {what} {value!r} is not a whole number of tokens "
                                 ">= 1")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise TraceError(f"length profile {self.name!r}: sigma {self.sigma!r} is not a finite number >= 0")
        if not (math.isfinite(self.cap) and self.cap >= 1):
            raise TraceError(f"length profile {self.name!r}: cap {self.cap!r} is not a finite number >= 1")

    @property
    def longest_tokens(self) -> int:
        """The most tokens one request of this profile holds, prompt and output together."""
        if self.sigma == 0:
            return self.prompt_tokens + self.output_tokens
        return math.floor(self.cap * self.prompt_tokens) + math.floor(self.cap * self.output_tokens)

    def draw(self, median: int, count: int, rng: np.random.Generator) -> list[int]:
        """``count`` lengths around ``median`` (tokens, each in [1, cap x median])."""
        if self.sigma == 0:
            return [median] * count
        drawn = rng.lognormal(mean=math.log(median), sigma=self.sigma, size=count)
        return [int(n) for n in np.clip(np.rint(drawn), 1, math.floor(self.cap * median))]


def fixed_lengths(prompt_tokens: int, output_tokens: int) -> LengthProfile:
    """Every request ``prompt_tokens`` in and ``output_tokens`` out."""
    return LengthProfile("fixed", prompt_tokens, output_tokens)


def long_tail_lengths(prompt_tokens: int, output_tokens: int, sigma: float = 1.0, cap: float = 8.0) -> LengthProfile:
    """Log-normal lengths with these medians, capped at ``cap`` times them."""
    return LengthProfile("long-tail", prompt_tokens, output_tokens, sigma, cap)


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace.

    Attributes:
        index: its place in the trace (0-based).
        arrival_s: when it is sent, seconds after the window starts; None in a closed loop.
        prompt_tokens: its prompt's length (tokens).
        output_tokens: the tokens it asks for (``max_tokens``; the server may stop sooner at an end token unless
            the client asks it to ignore them).
        prompt_seed: seeds the prompt's token ids (:meth:`prompt_token_ids`).
    """

    index: int
    arrival_s: float | None
    prompt_tokens: int
    output_tokens: int
    prompt_seed: int

    def __post_init__(self) -> None:
        for what, value, least in (("index", self.index, 0), ("prompt_tokens", self.prompt_tokens, 1),
                                   ("output_tokens", self.output_tokens, 1), ("prompt_seed", self.prompt_seed, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise TraceError(f"request {self.index!r}: {what} {value!r} is not a whole number >= {least}")
        arrival = self.arrival_s
        if arrival is not None and (isinstance(arrival, bool) or not isinstance(arrival, (int, float))
                                    or not (math.isfinite(arrival) and arrival >= 0)):
            raise TraceError(f"request {self.index}: arrival_s {arrival!r} is not a finite number of seconds >= 0 "
                             "(or null in a closed loop)")

    def prompt_token_ids(self, vocab_size: int, low: int = 0) -> list[int]:
        """The prompt's ``prompt_tokens`` token ids, drawn uniformly from ``[low, vocab_size)`` with this request's
        seed: the same ids every replay.

        Raises:
            TraceError: an empty id range.
        """
        if not 0 <= low < vocab_size:
            raise TraceError(f"token ids from {low} to {vocab_size}: the vocabulary range is empty")
        rng = np.random.default_rng(self.prompt_seed)
        return [int(i) for i in rng.integers(low, vocab_size, size=self.prompt_tokens)]


@dataclass(frozen=True)
class Trace:
    """A seeded segment of load: the requests one window sends, in order.

    Attributes:
        seed: what the trace was drawn from.
        arrivals: how the requests arrive.
        lengths: how long their prompts and outputs are.
        requests: the requests, by index.
    """

    seed: int
    arrivals: Arrivals
    lengths: LengthProfile
    requests: tuple[TraceRequest, ...]

    def __post_init__(self) -> None:
        _check_seed(self.seed)
        if not self.requests:
            raise TraceError(f"trace of seed {self.seed}: no requests; a window replays at least one")
        if [r.index for r in self.requests] != list(range(len(self.requests))):
            raise TraceError(f"trace of seed {self.seed}: the requests are not indexed 0 to {len(self.requests) - 1}")
        times = [r.arrival_s for r in self.requests]
        if self.arrivals.closed != (times[0] is None) or (None in times and set(times) != {None}):
            raise TraceError(f"trace of seed {self.seed}: arrival times must be all null (a closed loop) or all "
                             "given (an open loop), as its arrivals say")
        if not self.arrivals.closed and any(b < a for a, b in itertools.pairwise(times)):
            raise TraceError(f"trace of seed {self.seed}: arrival times go back in time")

    @property
    def span_s(self) -> float | None:
        """Seconds from the window's start to the last arrival (``requests / rate``); None in a closed loop."""
        return None if self.arrivals.closed else self.requests[-1].arrival_s

    def to_json(self) -> str:
        """The canonical text of the trace: sorted keys, no spaces, so that equal traces are equal strings."""
        return json.dumps(_document(self), sort_keys=True, separators=(",", ":"), allow_nan=False)

    @property
    def digest(self) -> str:
        """The SHA-256 of :meth:`to_json`, hex: names the load a record replayed."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()


def make_trace(seed: int, requests: int, arrivals: Arrivals, lengths: LengthProfile) -> Trace:
    """Draw a trace of ``requests`` requests (see the module docstring).

    Raises:
        TraceError: ``seed`` not a whole number >= 0, or ``requests`` < 1.
    """
    _check_seed(seed)
    if isinstance(requests, bool) or not isinstance(requests, int) or requests < 1:
        raise TraceError(f"trace of {requests!r} requests: give a whole number >= 1")
    arrival_rng, length_rng, prompt_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    times = [None] * requests if arrivals.closed else _arrival_times(arrivals, requests, arrival_rng)
    prompts = lengths.draw(lengths.prompt_tokens, requests, length_rng)
    outputs = lengths.draw(lengths.output_tokens, requests, length_rng)
    prompt_seeds = prompt_rng.integers(0, 2**63, size=requests)
    return Trace(seed, arrivals, lengths, tuple(
        TraceRequest(i, times[i], prompts[i], outputs[i], int(prompt_seeds[i])) for i in range(requests)))


def _check_seed(seed: object) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TraceError(f"trace seed {seed!r}: give a whole number >= 0")


def _arrival_times(arrivals: Arrivals, requests: int, rng: np.random.Generator) -> list[float]:
    rate, shape = float(arrivals.rate), arrivals.burstiness
    if math.isinf(shape):
        gaps = np.full(requests, 1.0 / rate)
    else:
        gaps = rng.gamma(shape=shape, scale=1.0 / (rate * shape), size=requests)
    times = np.cumsum(gaps)
    times *= (requests / rate) / times[-1]  # the last arrival at requests / rate, as vLLM rescales
    return [round(float(t), ARRIVAL_DIGITS) for t in times]


def _document(trace: Trace) -> dict[str, Any]:
    arrivals = asdict(trace.arrivals)
    if math.isinf(arrivals["burstiness"]):
        arrivals["burstiness"] = "inf"  # JSON has no infinity
    return {"schema": TRACE_SCHEMA, "seed": trace.seed, "arrivals": arrivals, "lengths": asdict(trace.lengths),
            "requests": [[r.arrival_s, r.prompt_tokens, r.output_tokens, r.prompt_seed] for r in trace.requests]}


def trace_from_json(text: str, source: str) -> Trace:
    """Read a trace written by :meth:`Trace.to_json`.

    Args:
        source: where ``text`` came from, for the error message (a file, a record's test id).

    Raises:
        TraceError: ``text`` is not such a trace; the message names ``source``, what is wrong, and the fix.
    """
    try:
        document = json.loads(text)
        if not isinstance(document, Mapping) or document.get("schema") != TRACE_SCHEMA:
            raise TraceError(f"schema {document.get('schema') if isinstance(document, Mapping) else None!r}")
        arrivals = dict(document["arrivals"])
        if arrivals.get("burstiness") == "inf":
            arrivals["burstiness"] = math.inf
        trace = Trace(document["seed"], Arrivals(**arrivals), LengthProfile(**document["lengths"]), tuple(
            TraceRequest(i, arrival, prompt, output, seed)
            for i, (arrival, prompt, output, seed) in enumerate(document["requests"])))
    except (ValueError, KeyError, TypeError) as error:
        raise TraceError(f"{source}: not a request trace of schema {TRACE_SCHEMA} ({error}); write it again with "
                         "hwregress.serving.trace.Trace.to_json") from error
    if trace.to_json() != json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False):
        raise TraceError(f"{source}: the trace's fields do not read back as written (a value of the wrong type or an "
                         "unknown key); write it again with hwregress.serving.trace.Trace.to_json")
    return trace

"""What the ``serving`` family's options decided, and its defaults per device kind (docs/serving.md, 'Defaults').

On the CPU the defaults are sized from the probe of ``llama_small`` under ``transformers serve`` on the 2-core
development VM (docs/data/serving_probe_2026-11-30.md): 4 requests/s, half of what it sustains within the SLOs (its
goodput stopped rising at 8), in windows of about 8 s; SLOs of TTFT 1 s and TPOT 100 ms, about 5x and 3x the p99 a
quiet window shows. The GPU defaults follow MLPerf Inference's Server-scenario bounds for a 7-8B model (TTFT 2 s,
TPOT 100 ms) and are not yet measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from hwregress.hardware.facts import device_kind
from hwregress.serving.figures import MLPERF_LLAMA3_8B, Slo
from hwregress.serving.trace import Arrivals, LengthProfile, fixed_lengths, long_tail_lengths

T = TypeVar("T")
LENGTH_PROFILES = ("fixed", "long-tail")
DEFAULT_MODELS = {"cpu": ("llama_small",), "cuda": ("llama_small",), "mps": ("llama_small",)}
DEFAULT_RATES = {"cpu": (4.0,), "cuda": (8.0,), "mps": (4.0,)}  # requests/s of the open loop
DEFAULT_CONCURRENCY = {"cpu": (4,), "cuda": (32,), "mps": (4,)}  # clients of the closed loop
# the rate sweep runs only when asked for (--serving-sweep): its capacity sits at the knee of the goodput curve, which
# on the development VM moved one step (32 to 16 requests/s) in 1 of 4 unchanged sessions (docs/serving.md)
SWEEP_EXAMPLE = (4.0, 8.0, 16.0, 32.0, 64.0)  # requests/s: the CPU sweep measured on the VM, as the docs suggest it
DEFAULT_REQUESTS = {"cpu": 32, "cuda": 200, "mps": 32}  # per window
DEFAULT_LENGTHS = {"cpu": (32, 16), "cuda": (256, 128), "mps": (64, 32)}  # (prompt, output) tokens
DEFAULT_SLO = {"cpu": Slo(ttft_ms=1000.0, tpot_ms=100.0), "cuda": MLPERF_LLAMA3_8B, "mps": MLPERF_LLAMA3_8B}
DEFAULT_WINDOWS = 5
# a sweep point lasts at least this long (s): at a high rate it replays rate x this many requests, not the window's
# requests, so the server reaches its steady state (queue included) instead of taking one burst: 32 requests at 64
# requests/s arrive in half a second and were served as one batch, goodput still rising (docs/serving.md)
SWEEP_POINT_S = {"cpu": 4.0, "cuda": 10.0, "mps": 4.0}
# transformers' ContinuousBatchingConfig.page_size: a KV-cache block holds this many tokens of every layer
KV_PAGE_TOKENS = 256
TRACE_SEED = 0
MODEL_SEED = 0


@dataclass(frozen=True)
class ServingSettings:
    """The ``--serving-*`` options; None: the device kind's default.

    Attributes:
        engine: ``transformers`` or ``vllm`` (``--serving-engine``).
        rates: open-loop request rates, requests/s (``--serving-rates``), one test each.
        concurrency: closed-loop client counts (``--serving-concurrency``), one test each.
        sweep: the request rates of the rate-sweep test (``--serving-sweep``), one window each; None or empty: no sweep
            test (it runs only when asked for). Of ``rates`` and ``concurrency``, an empty tuple asks for no such test,
            and None for the device kind's default (the options give the unasked one as empty where any load is
            asked).
        requests: requests per window (``--serving-requests``).
        windows: measured replays of the trace per test, after an untimed one (``--serving-windows``).
        lengths: the length profiles (``--serving-lengths``: ``fixed``, ``long-tail``), one test each.
        request_timeout_s: the most one request may take before it counts as failed.
        start_timeout_s: how long a server may take to answer its health check.
    """

    engine: str = "transformers"
    rates: tuple[float, ...] | None = None
    concurrency: tuple[int, ...] | None = None
    sweep: tuple[float, ...] | None = None
    requests: int | None = None
    windows: int = DEFAULT_WINDOWS
    lengths: tuple[str, ...] = ("fixed",)
    request_timeout_s: float = 120.0
    start_timeout_s: float = 300.0

    def models_for(self, device: str) -> tuple[str, ...]:
        return _by_kind(DEFAULT_MODELS, device)

    def rates_for(self, device: str) -> tuple[float, ...]:
        return self.rates if self.rates is not None else _by_kind(DEFAULT_RATES, device)

    def concurrency_for(self, device: str) -> tuple[int, ...]:
        return self.concurrency if self.concurrency is not None else _by_kind(DEFAULT_CONCURRENCY, device)

    def sweep_requests(self, rate: float, device: str) -> int:
        """Requests of a sweep point at ``rate`` requests/s: a window's, or as many as arrive in
        :data:`SWEEP_POINT_S` at that rate where more."""
        return max(self.requests_for(device), math.ceil(rate * _by_kind(SWEEP_POINT_S, device)))

    def sweep_for(self, device: str) -> tuple[float, ...]:
        """The sweep's rates, ascending; empty: no sweep (none by default on any device)."""
        return tuple(sorted(self.sweep or ()))

    def requests_for(self, device: str) -> int:
        return self.requests or _by_kind(DEFAULT_REQUESTS, device)

    def kv_cache_blocks(self, device: str) -> int:
        """KV-cache blocks (of :data:`KV_PAGE_TOKENS` tokens) a server on ``device`` holds: every request of a window
        in flight at once at the longest its length profiles draw. Without it ``transformers serve``'s continuous
        batching sizes its cache from memory: 60% of the machine's RAM on a CPU (13 GiB of the 23 of the development
        VM, per server: two of an A/B session's ran the machine out of memory) and 90% of a GPU's."""
        return kv_cache_blocks(self.requests_for(device), [self.length_profile(name, device) for name in self.lengths])

    def slo_for(self, device: str) -> Slo:
        return _by_kind(DEFAULT_SLO, device)

    def arrivals(self, rate: float | None = None, concurrency: int | None = None) -> Arrivals:
        """An open loop at ``rate`` requests/s, or a closed loop of ``concurrency`` clients (exactly one given)."""
        return Arrivals(rate=rate, concurrency=concurrency)

    def length_profile(self, name: str, device: str) -> LengthProfile:
        """The profile ``name`` (:data:`LENGTH_PROFILES`) at the device kind's prompt and output lengths.

        Raises:
            ValueError: an unknown profile name; lists the known ones.
        """
        prompt, output = _by_kind(DEFAULT_LENGTHS, device)
        if name == "fixed":
            return fixed_lengths(prompt, output)
        if name == "long-tail":
            return long_tail_lengths(prompt, output)
        raise ValueError(f"length profile {name!r}: choose from {', '.join(LENGTH_PROFILES)}")


def kv_cache_blocks(requests: int, profiles: Sequence[LengthProfile]) -> int:
    """KV-cache blocks of :data:`KV_PAGE_TOKENS` tokens that hold ``requests`` requests at once, each at the longest
    any of ``profiles`` draws (see :meth:`ServingSettings.kv_cache_blocks`)."""
    longest = max(profile.longest_tokens for profile in profiles)
    return requests * math.ceil(longest / KV_PAGE_TOKENS)


def _by_kind(table: Mapping[str, T], device: str) -> T:
    """The entry of ``device``'s kind, the CPU's for a kind the table lacks."""
    return table.get(device_kind(device), table["cpu"])

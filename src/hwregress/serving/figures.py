"""A serving window's figures from its requests' timestamps, with ``vllm bench serve``'s definitions
(``vllm/benchmarks/serve.py``, ``calculate_metrics``) so that the numbers compare:

- latency percentiles (TTFT, TPOT, ITL, E2EL, ms) over the completed requests, by NumPy's linear interpolation
  (``np.percentile``, as vLLM); each also with MLPerf's early-stopping bound where the count states it
  (:mod:`hwregress.judge.early_stopping`): a p99 of fewer than 459 values is an estimate, not a stated figure;
- request throughput: completed requests per second of the window; output throughput: their output tokens per
  second;
- goodput: requests per second that completed within every SLO (DistServe, OSDI 2024; vLLM's ``--goodput``): a
  request at exactly its bound meets it, an output of one token has a TPOT of 0 for the SLO (as vLLM);
- the error rate: failed requests over those sent. Here a failed request is never dropped: it counts in the error
  rate and, unlike in vLLM (which leaves it out of everything but its ``failed`` count), as a request that missed
  its SLOs, so a server that fails fast cannot look better.

The window's duration is the caller's: from the window's start to its last request's end, as vLLM's ``dur_s``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hwregress.judge import early_stopping
from hwregress.serving.requests import RequestTiming

LATENCIES = ("ttft", "tpot", "itl", "e2el")  # a window's latency summaries, as WindowFigures and its JSON name them
PERCENTILES = (50, 90, 99)  # the percentiles a window states, as vllm bench serve's default "99" and MLPerf's 90/99
ERRORS_SHOWN = 5  # the distinct errors of failed requests a record keeps and a failure names
CDF_LEVELS = 101  # the quantiles a test's pooled latency keeps for the report's CDF: levels 0, 0.01, ..., 1


@dataclass(frozen=True)
class Slo:
    """Service-level objectives of one request (ms); None leaves that figure unbounded.

    Attributes:
        ttft_ms: the time to first token a request must not exceed.
        tpot_ms: the time per output token after the first.
        e2el_ms: the end-to-end latency.
    """

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def __post_init__(self) -> None:
        for what, bound in (("ttft_ms", self.ttft_ms), ("tpot_ms", self.tpot_ms), ("e2el_ms", self.e2el_ms)):
            if bound is not None and not (isinstance(bound, (int, float)) and math.isfinite(bound) and bound > 0):
                raise ValueError(f"SLO {what} {bound!r}: give a finite number of milliseconds > 0, or None")

    def met_by(self, request: RequestTiming) -> bool:
        """Whether ``request`` completed within every bound (at a bound counts as within)."""
        if not request.completed:
            return False
        tpot = request.tpot_s or 0.0
        return all(bound is None or value * 1000.0 <= bound
                   for bound, value in ((self.ttft_ms, request.ttft_s), (self.tpot_ms, tpot),
                                        (self.e2el_ms, request.e2el_s)))


# MLPerf Inference's Server-scenario latency bounds for llama3.1-8b: the published SLOs of a 7-8B model on a GPU
MLPERF_LLAMA3_8B = Slo(ttft_ms=2000.0, tpot_ms=100.0)


@dataclass(frozen=True)
class LatencySummary:
    """One latency over a window's completed requests, ms.

    Attributes:
        count: the values summarized (requests; for ITL, gaps).
        mean: their mean.
        percentiles: ``{50: p50, 90: p90, 99: p99}`` by linear interpolation; empty when ``count`` is 0.
        bounds: each percentile's early-stopping upper bound at confidence 0.99, None where ``count`` is too few to
            state it (:func:`hwregress.judge.early_stopping.percentile_bound`).
    """

    count: int
    mean: float | None
    percentiles: dict[int, float] = field(default_factory=dict)
    bounds: dict[int, float | None] = field(default_factory=dict)

    @property
    def stated(self) -> tuple[int, ...]:
        """The percentiles whose count states them (a p99 needs 459 values)."""
        return tuple(p for p, bound in self.bounds.items() if bound is not None)

    def to_json(self) -> dict[str, Any]:
        """The summary as records keep it (:class:`hwregress.store.serving_figures.LatencyFigures`): ``count``,
        ``mean``, ``p50``/``p90``/``p99`` and their ``_bound``s."""
        return {"count": self.count, "mean": self.mean, **{f"p{p}": value for p, value in self.percentiles.items()},
                **{f"p{p}_bound": value for p, value in self.bounds.items()}}


def summarize_latency(values_s: Sequence[float]) -> LatencySummary:
    """Summarize latencies given in seconds (see :class:`LatencySummary`: figures in ms)."""
    if not values_s:
        return LatencySummary(0, None, {}, {p: None for p in PERCENTILES})
    ms = np.asarray(values_s, dtype=float) * 1000.0
    return LatencySummary(len(ms), float(ms.mean()),
                          {p: float(np.percentile(ms, p)) for p in PERCENTILES},
                          {p: early_stopping.percentile_bound(ms.tolist(), p / 100) for p in PERCENTILES})


@dataclass(frozen=True)
class WindowFigures:
    """What one replay of a trace measured.

    Attributes:
        sent: requests sent.
        completed: requests that ended with their output.
        failed: requests that ended with an error.
        duration_s: the window's wall time, s (its start to its last request's end).
        request_throughput: completed requests per second.
        output_throughput: output tokens of the completed requests per second.
        goodput: requests per second that completed within every SLO.
        error_rate: ``failed / sent``.
        slo: the SLOs goodput counted against.
        ttft, tpot, itl, e2el: the latencies' summaries (ms).
    """

    sent: int
    completed: int
    failed: int
    duration_s: float
    request_throughput: float
    output_throughput: float
    goodput: float
    error_rate: float
    slo: Slo
    ttft: LatencySummary
    tpot: LatencySummary
    itl: LatencySummary
    e2el: LatencySummary

    @property
    def output_speed_per_user(self) -> float | None:
        """tokens/s/user, ``1000 / TPOT p50`` (NVIDIA GenAI-Perf's "output token throughput per user"): a serving
        test's sample; None where no completed request had two output tokens (no TPOT)."""
        p50 = self.tpot.percentiles.get(50)
        return 1000.0 / p50 if p50 else None

    def to_json(self) -> dict[str, Any]:
        """The window as records keep it (:class:`hwregress.store.serving_figures.ServingWindowFigures`)."""
        return {"duration_s": self.duration_s, "completed": self.completed, "failed": self.failed,
                "request_throughput": self.request_throughput, "output_throughput": self.output_throughput,
                "goodput": self.goodput, "error_rate": self.error_rate,
                **{name: getattr(self, name).to_json() for name in LATENCIES}}


def window_figures(requests: Sequence[RequestTiming], duration_s: float, slo: Slo) -> WindowFigures:
    """The figures of one window from its requests' timestamps.

    Args:
        requests: every request the window sent, completed or failed.
        duration_s: the window's wall time, s (> 0).
        slo: the bounds of goodput.

    Raises:
        ValueError: no requests, or a duration that is not a finite number > 0.
    """
    if not requests:
        raise ValueError("a serving window without requests has no figures: its trace sends at least one")
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"window duration {duration_s!r} s: give the finite wall time > 0 from its start to its last "
                         "request's end")
    done = [r for r in requests if r.completed]
    return WindowFigures(
        sent=len(requests), completed=len(done), failed=len(requests) - len(done), duration_s=duration_s,
        request_throughput=len(done) / duration_s,
        output_throughput=sum(r.output_tokens for r in done) / duration_s,
        goodput=sum(slo.met_by(r) for r in done) / duration_s,
        error_rate=(len(requests) - len(done)) / len(requests), slo=slo, **latency_summaries(done))


def latency_summaries(requests: Sequence[RequestTiming]) -> dict[str, LatencySummary]:
    """``{"ttft", "tpot", "itl", "e2el"}``: each latency summarized over the completed ones of ``requests`` (of one
    window, or of several pooled)."""
    return {name: summarize_latency(seconds) for name, seconds in _latencies_s(requests).items()}


def _latencies_s(requests: Sequence[RequestTiming]) -> dict[str, list[float]]:
    """Each latency's values (s) over the completed ones of ``requests``: TPOT of those with two output tokens or
    more, ITL every gap."""
    done = [r for r in requests if r.completed]
    return {"ttft": [r.ttft_s for r in done], "tpot": [r.tpot_s for r in done if r.tpot_s is not None],
            "itl": [gap for r in done for gap in r.itls_s], "e2el": [r.e2el_s for r in done]}


def latency_quantiles(values_ms: Sequence[float], levels: int = CDF_LEVELS) -> list[float]:
    """``values_ms`` at ``levels`` evenly spaced levels from 0 to 1 (ms; linear interpolation, as
    :func:`summarize_latency`): the empirical CDF a report draws, the same size however many requests; empty without
    values."""
    if not values_ms:
        return []
    return [float(q) for q in np.quantile(np.asarray(values_ms, dtype=float), np.linspace(0.0, 1.0, levels))]


def pooled_json(requests: Sequence[RequestTiming]) -> dict[str, dict[str, Any]]:
    """``{"ttft", "tpot", "itl", "e2el"}``: each latency over the completed ones of ``requests`` (of every window) as
    a record keeps it, :meth:`LatencySummary.to_json` with its CDF's ``quantiles`` (ms, :func:`latency_quantiles`)."""
    return {name: {**summarize_latency(seconds).to_json(),
                   "quantiles": latency_quantiles([value * 1000.0 for value in seconds])}
            for name, seconds in _latencies_s(requests).items()}


def distinct_errors(requests: Sequence[RequestTiming]) -> list[str]:
    """The errors of the failed ones of ``requests``, each once, in the order they first appear."""
    return list(dict.fromkeys(r.error for r in requests if r.error))


def capacity(rates: Sequence[float], goodputs: Sequence[float], tolerance: float = 0.05) -> float:
    """The request rate at which goodput stops rising in a rate sweep: the lowest swept rate whose goodput is within
    ``tolerance`` (a fraction) of the sweep's highest, so a plateau's start and not its noisy top.

    Args:
        rates: the swept request rates (requests/s), one per point.
        goodputs: the goodput measured at each (requests/s).

    Raises:
        ValueError: empty or unequal sequences, or a tolerance outside [0, 1).
    """
    if not rates or len(rates) != len(goodputs):
        raise ValueError(f"a sweep of {len(rates)} rates and {len(goodputs)} goodputs: give one goodput per rate, "
                         "at least one")
    if not 0 <= tolerance < 1:
        raise ValueError(f"capacity tolerance {tolerance!r}: give a fraction in [0, 1)")
    best = max(goodputs)
    return min(rate for rate, good in zip(rates, goodputs, strict=True) if good >= (1 - tolerance) * best)

"""The figures of a serving test (:mod:`hwregress.serving`, docs/serving.md), as a typed sub-record of
:class:`hwregress.store.results.TestRecord` (``record.serving``); descriptions as in :mod:`hwregress.store.figures`."""

from __future__ import annotations

from dataclasses import dataclass

from hwregress.store.figures import Figures, doc


@dataclass
class LatencyFigures(Figures):
    """One latency over requests (ms): its count, mean, percentiles and what the count states."""

    count: int | None = doc("values summarized (requests; ITL: gaps between chunks)")
    mean: float | None = doc("ms, their mean")
    p50: float | None = doc("ms, the median (linear interpolation, as vLLM's np.percentile)")
    p90: float | None = doc("ms, the 90th percentile")
    p99: float | None = doc("ms, the 99th percentile")
    p50_bound: float | None = doc("ms, MLPerf's early-stopping bound of the p50 at confidence 0.99 (null: too few "
                                  "values to state it)")
    p90_bound: float | None = doc("ms, the p90's bound (null: fewer than 44 values)")
    p99_bound: float | None = doc("ms, the p99's bound (null: fewer than 459 values)")
    quantiles: list[float | None] = doc("ms at 101 evenly spaced levels 0, 0.01, ..., 1 (the CDF the report draws); "
                                        "a test's pooled latencies only, empty in a window's", factory=list)


@dataclass
class ServingWindowFigures(Figures):
    """One replay of the trace (a window): its throughputs, goodput, errors and latency percentiles."""

    duration_s: float | None = doc("s, from the window's start to its last request's end")
    completed: int | None = doc("requests that ended with their output")
    failed: int | None = doc("requests that ended with an error")
    request_throughput: float | None = doc("requests/s completed")
    output_throughput: float | None = doc("tokens/s of the completed requests' output")
    goodput: float | None = doc("requests/s that completed within every SLO")
    error_rate: float | None = doc("fraction of the requests sent that failed")
    ttft: LatencyFigures | None = doc("time to first token")
    tpot: LatencyFigures | None = doc("time per output token after the first")
    itl: LatencyFigures | None = doc("inter-token latency (each gap between chunks with text)")
    e2el: LatencyFigures | None = doc("end-to-end latency")


@dataclass
class SweepPointFigures(ServingWindowFigures):
    """One point of a rate sweep: a window of the trace's requests arriving at ``rate``."""

    rate: float | None = doc("requests/s the point's open loop offered")


@dataclass
class ServingFigures(Figures):
    """A served model under a seeded load: the server, the trace every window replayed, the SLOs, each window's
    figures and the requests of all windows pooled (``ttft``, ``tpot``, ``itl``, ``e2el``; docs/serving.md). The
    record's samples are the windows' output speeds per user (tokens/s/user, 1000 / TPOT p50), its declared metrics
    the pooled latency percentiles the requests state and the mean goodput. In an A/B test ``windows`` and the pooled
    latencies are stack B's and ``reference_windows``, ``reference_ttft`` and ``reference_tpot`` stack A's. A rate
    sweep's record has no samples: its points (``sweep``), its ``capacity`` (declared) and ``peak_goodput`` instead."""

    engine: str | None = doc("the server: transformers (transformers serve) or vllm (vllm serve)")
    engine_version: str | None = doc("the serving package's version")
    server_start_s: float | None = doc("s, from the server's start to its first healthy answer")
    model_seed: int | None = doc("the seed of the served model's random weights (null: published weights)")
    model_source: str | None = doc("published weights' Hugging Face repository and revision (null: seeded weights)")
    rate: float | None = doc("requests/s of the open loop (null: a closed loop)")
    burstiness: float | None = doc("the gamma shape of the gaps between requests (1: Poisson; null: constant gaps)")
    concurrency: int | None = doc("clients of a closed loop (null: an open loop)")
    sweep: list[SweepPointFigures] = doc("a rate-sweep test's points, by rising rate (else empty)", factory=list)
    capacity: float | None = doc("requests/s, a rate sweep's lowest rate whose goodput is within 5% of its highest "
                                 "(where goodput stops rising)")
    peak_goodput: float | None = doc("requests/s, a rate sweep's highest goodput (kept, not judged: it sits at the "
                                     "curve's knee)")
    lengths: str | None = doc("the length profile: fixed or long-tail")
    prompt_tokens: int | None = doc("tokens of a prompt (its median where long-tailed)")
    output_tokens: int | None = doc("tokens asked of an output (its median where long-tailed)")
    requests: int | None = doc("requests of the trace a window replays")
    trace_seed: int | None = doc("the seed the trace was drawn from")
    trace_digest: str | None = doc("SHA-256 of the trace's canonical JSON: the same digest, the same load")
    trace: str | None = doc("the trace's canonical JSON (hwregress.serving.trace.trace_from_json reads it)")
    slo_ttft_ms: float | None = doc("ms, the TTFT bound of goodput (null: unbounded)")
    slo_tpot_ms: float | None = doc("ms, the TPOT bound of goodput (null: unbounded)")
    warmup_s: float | None = doc("s, the untimed replay before the windows")
    windows: list[ServingWindowFigures] = doc("each measured window, in order (A/B: stack B's)", factory=list)
    reference_windows: list[ServingWindowFigures] = doc("an A/B test's stack A windows, in order (else empty)",
                                                        factory=list)
    ttft: LatencyFigures | None = doc("time to first token over the completed requests of every window")
    tpot: LatencyFigures | None = doc("time per output token after the first, over every window's requests")
    itl: LatencyFigures | None = doc("inter-token latency over every window's requests")
    e2el: LatencyFigures | None = doc("end-to-end latency over every window's requests")
    reference_ttft: LatencyFigures | None = doc("an A/B test's stack A time to first token over its windows")
    reference_tpot: LatencyFigures | None = doc("an A/B test's stack A time per output token over its windows")
    errors: list[str] = doc("the first distinct errors of failed requests", factory=list)
    server_log_tail: str | None = doc("the last lines of the server's log, where the server died or failed")

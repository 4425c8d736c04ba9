"""The ``serving`` family: a served LLM under a seeded load (:mod:`hwregress.serving`, docs/serving.md). One real
server per pytest process and model (``transformers serve``, or ``vllm serve``), started by the first serving test
under its keeper, restarted where it died, stopped when the pytest session ends; per test one open-loop trace (a
request rate and a length profile) replayed once untimed and then ``--serving-windows`` times.

The unit of the verdict is the window, not the request (a window's requests queue behind each other): the record's
samples are each window's output speed per user (tokens/s/user, ``1000 / TPOT p50``: NVIDIA GenAI-Perf's "output
token throughput per user"), judged as every family's samples are; the pooled TTFT p90 and p99, TPOT p50, p90 and
p99 and E2EL p50, each where the windows' requests are enough to state it (a p99 needs 459), and the windows' mean
goodput are declared metrics (:mod:`hwregress.store.metrics`, the threshold rule), and a request that failed fails
the test. Opt-in on every device (``-m serving``, or ``--serving-rates``/``--serving-requests``).

A machine without the serving packages skips the family as ``unsupported`` with the install command; a server that
does not start or dies fails the test with the last lines of its log, and the next test starts a fresh one. In an A/B
session (``--ab-python``, ``--ab-env``) a test compares the two stacks' servers instead
(:mod:`hwregress.plugin.families.serving_ab`)."""

from __future__ import annotations

import importlib.metadata
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from hwregress.hardware.telemetry import TelemetrySampler
from hwregress.plugin.context import BenchContext
from hwregress.plugin.families.serving_ab import UNIT, ServingABTest, measure_serving_ab, session_model
from hwregress.plugin.matrix import Selection
from hwregress.plugin.record import fail_with, skip_with
from hwregress.serving import server as serving
from hwregress.serving.figures import (
    ERRORS_SHOWN,
    Slo,
    WindowFigures,
    distinct_errors,
    latency_summaries,
    window_figures,
)
from hwregress.serving.requests import RequestTiming
from hwregress.serving.settings import MODEL_SEED, TRACE_SEED, ServingSettings
from hwregress.serving.trace import Trace, TraceRequest, make_trace
from hwregress.store.assembly import put_measured
from hwregress.store.baseline_file import entry_key
from hwregress.store.measured import MeasuredFigures
from hwregress.store.metrics import JudgedMetric, register
from hwregress.store.results import TestRecord
from hwregress.store.serving_figures import ServingFigures
from hwregress.store.verdicts import Verdict
from hwregress.summary import relative_iqr, summarize
from hwregress.workloads.served import FIRST_WORD_ID, SERVED_SHAPES, ServedModel

if TYPE_CHECKING:  # the client needs httpx, of the serving extra: imported when a serving test runs
    from hwregress.serving.client import Replay

SERVER_KEY = pytest.StashKey["RunningServer"]()
MODE = re.compile(r"rate(?P<rate>[0-9.e+-]+)-(?P<lengths>[a-z-]+)")
# the windows' speeds within this IQR/median: stable (recorded into a baseline; judged without a direction: pass, not
# unstable). Not the model window's 10%: a serving window's median TPOT moves with the batches its Poisson arrivals
# make, and six quiet sessions of the CPU default spread 9.8-24% (docs/data/serving_verdicts_2026-11-30.md)
STABLE_REL_IQR = 0.25
# the declared metrics of a serving test, over the requests of all its windows (goodput: the windows' mean); a
# percentile is declared only where its count states it (MLPerf's early stopping: a p90 needs 44 requests, a p99 459)
PERCENTILE_METRICS = {"ttft_p90_ms": ("ttft", 90), "ttft_p99_ms": ("ttft", 99), "tpot_p50_ms": ("tpot", 50),
                      "tpot_p90_ms": ("tpot", 90), "tpot_p99_ms": ("tpot", 99), "e2el_p50_ms": ("e2el", 50)}
DECLARED = tuple(register(metric) for metric in (
    *(JudgedMetric(name, "lower", "ms", f"{latency.upper()} p{p}")
      for name, (latency, p) in PERCENTILE_METRICS.items()),
    JudgedMetric("goodput", "higher", "requests/s", "goodput")))


def serving_mode(rate: float, lengths: str) -> str:
    """A test's mode: its request rate and length profile (``rate2-fixed``)."""
    return f"rate{rate:g}-{lengths}"


def parse_mode(mode: str) -> tuple[float, str]:
    """The rate (requests/s) and length profile of :func:`serving_mode`'s ``mode``.

    Raises:
        ValueError: ``mode`` is not of that form.
    """
    matched = MODE.fullmatch(mode)
    if matched is None:
        raise ValueError(f"serving mode {mode!r} is not rate<requests per second>-<length profile>")
    return float(matched["rate"]), matched["lengths"]


class Serving:
    """The ``serving`` family (:class:`hwregress.plugin.families.protocol.Family`), and the pytest hook that stops this
    process's server."""

    name = "serving"
    marker = "serving"
    marker_help = "a served LLM under a seeded load: latency percentiles, goodput (opt-in: needs the serving extra)"
    requires: frozenset[str] = frozenset()
    sub_records = ("serving",)
    view = None
    own_ab = True  # in an A/B session: servers of both stacks, windows interleaved (plugin/families/serving_ab)

    def cases(self, selection: Selection) -> list[dict[str, Any]]:
        """When asked for: device x served model x request rate x length profile, fp32; the batch size is the
        requests a window replays."""
        if self.name not in selection.opted_in or "fp32" not in selection.dtypes:
            return []  # the served model's weights are fp32
        served = selection.serving
        return [{"device": device, "workload": model, "mode": serving_mode(rate, lengths),
                 "batch_size": served.requests_for(device), "dtype": "fp32"}
                for device in selection.devices
                for model in _models(selection, device)
                for rate in served.rates_for(device)
                for lengths in served.lengths]

    def measure(self, bench: BenchContext, *, device: str, workload: str, mode: str, batch_size: int,
                dtype: str) -> TestRecord:
        """Replay the test's trace against this process's server of ``workload`` on ``device``; judge the windows'
        output speed per user and the pooled latency percentiles and goodput against the baseline."""
        record = bench.start(self.name, device, workload, mode, batch_size, dtype)
        if bench.settings.ab is not None:
            return ServingBench(bench).measure_ab(record, device, workload, mode, batch_size)
        failures = ServingBench(bench).measure(record, device, workload, mode, batch_size)
        return bench.conclude(record, entry_key(self.name, workload, mode, batch_size, dtype), failures)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        stop_server(session.config)


def _models(selection: Selection, device: str) -> list[str]:
    """The selected models a server can load (:data:`hwregress.workloads.served.SERVED_SHAPES`), else the device
    kind's default."""
    if selection.models is not None:
        return [model for model in selection.models if model in SERVED_SHAPES]
    return list(selection.serving.models_for(device))


class RunningServer:
    """This process's server: what it serves, on which device, and the model folder it loaded."""

    def __init__(self, bench: BenchContext, settings: ServingSettings, device: str, model: str) -> None:
        self.key = (settings.engine, device, model)
        self.model = session_model(bench, model, "serve")
        log = self.model.folder.parent / f"server-{settings.engine}-{device.replace(':', '')}.log"
        self.server = serving.start_served(settings, self.model.folder, device, log)

    def stop(self) -> None:
        self.server.stop()


def stop_server(config: pytest.Config) -> None:
    """Stop this process's server, if a serving test started one."""
    running = config.stash.get(SERVER_KEY, None)
    if running is not None:
        running.stop()
        del config.stash[SERVER_KEY]


class ServingBench:
    """Runs one ``serving`` test's measurement."""

    def __init__(self, bench: BenchContext) -> None:
        self.bench = bench
        self.settings = bench.settings.selection.serving

    def measure(self, record: TestRecord, device: str, model: str, mode: str, requests: int) -> list[str]:
        """Replay the trace and fill ``record``; returns the failures the family adds to the baseline's judgement
        (failed requests)."""
        trace, slo = self._load(device, mode, requests)
        running = self._server(device, model)
        facts = {**_trace_facts(trace, self.settings.engine, slo), "server_start_s": running.server.started_s}
        put_measured(record, MeasuredFigures(unit=UNIT, serving=ServingFigures.of(facts)))
        warmup, replays, sampler = self._replays(running, trace, device)
        if not running.server.alive:
            tail = running.server.tail()
            stop_server(self.bench.config)
            put_measured(record, MeasuredFigures(serving=ServingFigures.of({**facts, "server_log_tail": tail})))
            fail_with(f"the {self.settings.engine} server died during the test; its log ends:\n{tail}")
        windows = [window_figures(done.timings, done.duration_s, slo) for done in replays]
        timings = [timing for done in replays for timing in done.timings]
        measured, serving_facts = _figures(windows, timings, sampler)
        put_measured(record, MeasuredFigures(**measured, serving=ServingFigures.of(
            {**facts, **serving_facts, "warmup_s": warmup.duration_s})))
        return _request_failures(record, timings)

    def measure_ab(self, record: TestRecord, device: str, model: str, mode: str, requests: int) -> TestRecord:
        """The test's A/B form in an A/B session: fresh servers of both stacks every few pairs, their windows
        interleaved (:mod:`hwregress.plugin.families.serving_ab`); returns the judged record."""
        trace, slo = self._load(device, mode, requests)
        facts = _trace_facts(trace, self.settings.engine, slo)
        put_measured(record, MeasuredFigures(unit=UNIT, serving=ServingFigures.of(facts)))
        return measure_serving_ab(self.bench, record, ServingABTest(device, model, trace, slo, facts, _prompt_of))

    def _load(self, device: str, mode: str, requests: int) -> tuple[Trace, Slo]:
        """The test's trace and SLOs; skips the test as ``unsupported`` where the engine is not installed."""
        reason = serving.unavailable_reason(self.settings.engine)
        if reason is not None:
            skip_with(Verdict.UNSUPPORTED, reason)
        rate, lengths = parse_mode(mode)
        trace = make_trace(TRACE_SEED, requests, self.settings.arrivals(rate),
                           self.settings.length_profile(lengths, device))
        return trace, self.settings.slo_for(device)

    def _server(self, device: str, model: str) -> RunningServer:
        stash = self.bench.config.stash
        running = stash.get(SERVER_KEY, None)
        if running is not None and (running.key != (self.settings.engine, device, model) or not running.server.alive):
            stop_server(self.bench.config)
        if SERVER_KEY not in stash:
            try:
                stash[SERVER_KEY] = RunningServer(self.bench, self.settings, device, model)
            except serving.ServerFailed as error:
                fail_with(f"ServerFailed: {error}")
        return stash[SERVER_KEY]

    def _replays(self, running: RunningServer, trace: Trace, device: str) -> tuple[Replay, list[Replay],
                                                                                   TelemetrySampler]:
        """The untimed replay, then the measured windows (until the server dies), under the device's telemetry."""
        from hwregress.serving.client import replay

        model, url = running.model, running.server.url
        prompt = _prompt_of(model)
        options = dict(timeout_s=self.settings.request_timeout_s,
                       extra_body=serving.request_extras(running.server.engine))
        warmup = replay(url, str(model.folder), trace, prompt, **options)
        sampler = TelemetrySampler(device, self.bench.settings.telemetry_interval_s)
        windows = []
        with sampler:
            for _ in range(self.settings.windows):
                if not running.server.alive:
                    break
                windows.append(replay(url, str(model.folder), trace, prompt, **options))
        return warmup, windows, sampler


def _prompt_of(model: ServedModel) -> Callable[[TraceRequest], str]:
    return lambda request: model.prompt_text(request.prompt_token_ids(model.vocab_size, FIRST_WORD_ID))


def _trace_facts(trace: Trace, engine: str, slo: Slo) -> dict[str, Any]:
    """The engine, the trace and the SLOs, for ``record.serving`` before anything is measured."""
    lengths = trace.lengths
    return dict(engine=engine, engine_version=_version(engine), model_seed=MODEL_SEED, rate=trace.arrivals.rate,
                burstiness=None if math.isinf(trace.arrivals.burstiness) else trace.arrivals.burstiness,
                concurrency=trace.arrivals.concurrency, lengths=lengths.name, prompt_tokens=lengths.prompt_tokens,
                output_tokens=lengths.output_tokens, requests=len(trace.requests), trace_seed=trace.seed,
                trace_digest=trace.digest, trace=trace.to_json(), slo_ttft_ms=slo.ttft_ms, slo_tpot_ms=slo.tpot_ms)


def _version(engine: str) -> str | None:
    try:
        return importlib.metadata.version(engine)
    except importlib.metadata.PackageNotFoundError:
        return None


def _figures(windows: list[WindowFigures], timings: list[RequestTiming],
             sampler: TelemetrySampler) -> tuple[dict[str, Any], dict[str, Any]]:
    """The record's figures (samples: each window's tokens/s/user; the declared metrics over every window's requests)
    and ``record.serving``'s windows, pooled latencies and errors."""
    speeds = [speed for speed in (w.output_speed_per_user for w in windows) if speed is not None]
    summary = summarize(speeds) if speeds else None
    pooled = latency_summaries(timings)
    declared = {name: pooled[latency].percentiles.get(p) for name, (latency, p) in PERCENTILE_METRICS.items()
                if p in pooled[latency].stated}
    declared["goodput"] = sum(w.goodput for w in windows) / len(windows) if windows else None
    measured = dict(samples=speeds, throughput=summary.median if summary else None,
                    throughput_iqr=summary.iqr if summary else None, rounds=len(speeds),
                    stable=relative_iqr(speeds) <= STABLE_REL_IQR if len(speeds) >= 2 else None,
                    telemetry=sampler.summary(), health=sampler.health,
                    declared={name: value for name, value in declared.items() if value is not None})
    facts = dict(windows=[window.to_json() for window in windows],
                 **{name: latency.to_json() for name, latency in pooled.items()},
                 errors=distinct_errors(timings)[:ERRORS_SHOWN])
    return measured, facts


def _request_failures(record: TestRecord, timings: list[RequestTiming]) -> list[str]:
    """A failed request fails the test: a healthy server under a load it sustains answers every one."""
    failed = sum(1 for t in timings if not t.completed)
    if not failed:
        return []
    shown = "; ".join(distinct_errors(timings)[:ERRORS_SHOWN])
    return [f"{record.test_id}: {failed} of {len(timings)} requests of the windows failed "
            f"({failed / len(timings):.1%}): {shown}"]


FAMILY = Serving()

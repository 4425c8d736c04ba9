"""The ``serving`` family: a served LLM under a seeded load (:mod:`hwregress.serving`, docs/serving.md). One real
server per pytest process and model (``transformers serve``, or ``vllm serve``), started by the first serving test
under its keeper, restarted where it died, stopped when the pytest session ends. Per test one load of a length
profile: an open loop at a request rate, or a closed loop of N clients, its trace replayed once untimed and then in
windows (:mod:`hwregress.plugin.families.serving_windows`: ``--serving-windows`` recording, at planned looks when
judged); or the rate sweep, one window per rate, judged on its capacity.

The unit of the verdict is the window, not the request (a window's requests queue behind each other): the record's
samples are each window's output speed per user (tokens/s/user, ``1000 / TPOT p50``: NVIDIA GenAI-Perf's "output
token throughput per user"), judged as every family's samples are; the pooled TTFT p90 and p99, TPOT p50, p90 and
p99 and E2EL p50, each where the windows' requests are enough to state it (a p99 needs 459), and the windows' mean
goodput are declared metrics (:mod:`hwregress.store.metrics`, the threshold rule), and a request that failed fails
the test. Opt-in on every device (``-m serving``, or any ``--serving-rates``/``-concurrency``/``-sweep``/``-requests``).

A machine without the serving packages skips the family as ``unsupported`` with the install command; a server that
does not start or dies fails the test with the last lines of its log, and the next test starts a fresh one. In an A/B
session (``--ab-python``, ``--ab-env``) a test compares the two stacks' servers instead
(:mod:`hwregress.plugin.families.serving_ab`)."""

from __future__ import annotations

import importlib.metadata
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from hwregress.hardware.telemetry import TelemetrySampler
from hwregress.plugin.context import BenchContext
from hwregress.plugin.families.serving_ab import UNIT, ServingABTest, measure_serving_ab, session_model
from hwregress.plugin.families.serving_cost import serving_cost
from hwregress.plugin.families.serving_windows import (
    STABLE_REL_IQR,
    ServedSweep,
    ServedWindows,
    sweep_facts,
    sweep_figures,
)
from hwregress.plugin.matrix import Selection
from hwregress.plugin.record import fail_with, skip_with
from hwregress.plugin.tier_costs import Cost, CostModel
from hwregress.serving import server as serving
from hwregress.serving.figures import (
    ERRORS_SHOWN,
    Slo,
    WindowFigures,
    distinct_errors,
    latency_summaries,
    pooled_json,
    window_figures,
)
from hwregress.serving.requests import RequestTiming
from hwregress.serving.settings import TRACE_SEED, ServingSettings
from hwregress.serving.trace import Trace, TraceRequest, make_trace
from hwregress.store.assembly import put_measured
from hwregress.store.baseline_file import entry_key
from hwregress.store.measured import MeasuredFigures
from hwregress.store.metrics import JudgedMetric, register
from hwregress.store.results import TestRecord
from hwregress.store.serving_figures import ServingFigures
from hwregress.store.verdicts import Verdict
from hwregress.summary import relative_iqr, summarize
from hwregress.workloads.pretrained_served import PRETRAINED_SERVED, is_cached
from hwregress.workloads.served import FIRST_WORD_ID, SERVED_SHAPES, ServedModel

SERVER_KEY = pytest.StashKey["RunningServer"]()
MODE = re.compile(r"(?:rate(?P<rate>[0-9.e+-]+)|closed(?P<clients>[0-9]+)|sweep(?P<sweep>[0-9.e+_]+))"
                  r"-(?P<lengths>[a-z-]+)")
# the declared metrics of a serving test, over the requests of all its windows (goodput: the windows' mean); a
# percentile is declared only where its count states it (MLPerf's early stopping: a p90 needs 44 requests, a p99 459)
PERCENTILE_METRICS = {"ttft_p90_ms": ("ttft", 90), "ttft_p99_ms": ("ttft", 99), "tpot_p50_ms": ("tpot", 50),
                      "tpot_p90_ms": ("tpot", 90), "tpot_p99_ms": ("tpot", 99), "e2el_p50_ms": ("e2el", 50)}
DECLARED = tuple(register(metric) for metric in (
    *(JudgedMetric(name, "lower", "ms", f"{latency.upper()} p{p}")
      for name, (latency, p) in PERCENTILE_METRICS.items()),
    JudgedMetric("goodput", "higher", "requests/s", "goodput"),
    # a rate sweep's (plugin/families/serving_windows): where goodput stops rising. Its peak goodput is kept, not
    # judged: the peak sits at the knee, where four unchanged sessions of the CPU default gave 16.5 to 26.4
    JudgedMetric("capacity", "higher", "requests/s", "capacity")))


@dataclass(frozen=True)
class ServingLoad:
    """A serving test's load: an open loop at ``rate`` requests/s, a closed loop of ``clients``, or a rate sweep over
    ``sweep_rates`` (requests/s, rising), exactly one; requests of the length profile ``lengths``
    (:data:`hwregress.serving.settings.LENGTH_PROFILES`)."""

    lengths: str
    rate: float | None = None
    clients: int | None = None
    sweep_rates: tuple[float, ...] | None = None

    @property
    def sweep(self) -> bool:
        return self.sweep_rates is not None

    @property
    def mode(self) -> str:
        """The test's mode: ``rate4-fixed``, ``closed4-fixed`` or ``sweep2_4_8_16_32-fixed`` (the sweep's rates name
        it: a sweep over other rates has another capacity, and another baseline entry)."""
        if self.rate is not None:
            return f"rate{self.rate:g}-{self.lengths}"
        if self.clients is not None:
            return f"closed{self.clients}-{self.lengths}"
        return f"sweep{'_'.join(f'{rate:g}' for rate in self.sweep_rates or ())}-{self.lengths}"


def parse_mode(mode: str) -> ServingLoad:
    """The load of :attr:`ServingLoad.mode`'s ``mode``.

    Raises:
        ValueError: ``mode`` is not of that form.
    """
    matched = MODE.fullmatch(mode)
    if matched is None:
        raise ValueError(f"serving mode {mode!r} is not rate<requests per second>-<length profile>, "
                         "closed<clients>-<length profile> or sweep<rate>_<rate>...-<length profile>")
    try:
        sweep = tuple(float(rate) for rate in matched["sweep"].split("_")) if matched["sweep"] else None
    except ValueError:
        raise ValueError(f"serving mode {mode!r}: a sweep's rates are numbers joined by '_'") from None
    return ServingLoad(matched["lengths"], rate=float(matched["rate"]) if matched["rate"] else None,
                       clients=int(matched["clients"]) if matched["clients"] else None, sweep_rates=sweep)


def loads_for(settings: ServingSettings, device: str) -> list[ServingLoad]:
    """The loads of ``device``'s tests, per length profile: each open-loop rate, each closed loop, the sweep."""
    sweep = settings.sweep_for(device)
    return [load for lengths in settings.lengths
            for load in (*(ServingLoad(lengths, rate=rate) for rate in settings.rates_for(device)),
                         *(ServingLoad(lengths, clients=clients) for clients in settings.concurrency_for(device)),
                         *((ServingLoad(lengths, sweep_rates=sweep),) if sweep else ()))]


class Serving:
    """The ``serving`` family (:class:`hwregress.plugin.families.protocol.Family`), and the pytest hook that stops this
    process's server."""

    name = "serving"
    marker = "serving"
    marker_help = "a served LLM under a seeded load: latency percentiles, goodput (opt-in: needs the serving extra)"
    requires: frozenset[str] = frozenset()
    sub_records = ("serving",)
    view = "serving"  # report/serving_view.py
    own_ab = True  # in an A/B session: servers of both stacks, windows interleaved (plugin/families/serving_ab)

    def cases(self, selection: Selection) -> list[dict[str, Any]]:
        """When asked for: device x served model x load (each open-loop rate, each closed loop, the rate sweep) x
        length profile, fp32; the batch size is the requests a window replays."""
        if self.name not in selection.opted_in or "fp32" not in selection.dtypes:
            return []  # the served model's weights are fp32
        served = selection.serving
        return [{"device": device, "workload": model, "mode": load.mode,
                 "batch_size": served.requests_for(device), "dtype": "fp32"}
                for device in selection.devices
                for model in _models(selection, device)
                for load in loads_for(served, device)]

    def measure(self, bench: BenchContext, *, device: str, workload: str, mode: str, batch_size: int,
                dtype: str) -> TestRecord:
        """Replay the test's trace against this process's server of ``workload`` on ``device``; judge the windows'
        output speed per user and the pooled latency percentiles and goodput against the baseline."""
        record = bench.start(self.name, device, workload, mode, batch_size, dtype)
        load = parse_mode(mode)
        if bench.settings.ab is not None:
            return ServingBench(bench).measure_ab(record, device, workload, load, batch_size)
        key = entry_key(self.name, workload, mode, batch_size, dtype)
        failures = ServingBench(bench).measure(record, key, device, workload, load, batch_size)
        return bench.conclude(record, key, failures)

    def estimated_cost(self, case: dict[str, Any], cost: CostModel) -> Cost:
        """The server's start once per process and model, the untimed replay and the recording's windows
        (:mod:`hwregress.plugin.families.serving_cost`)."""
        load = parse_mode(case["mode"])
        return serving_cost(case, cost, load.rate, load.clients, load.sweep_rates)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        stop_server(session.config)


def _models(selection: Selection, device: str) -> list[str]:
    """The selected models a server can load (:data:`hwregress.workloads.served.SERVED_SHAPES`, and the published
    ones of :data:`hwregress.workloads.pretrained_served.PRETRAINED_SERVED`), else the device kind's default and each
    published model this machine's Hugging Face cache holds."""
    if selection.models is not None:
        return [model for model in selection.models if model in SERVED_SHAPES or model in PRETRAINED_SERVED]
    return [*selection.serving.models_for(device), *(name for name in PRETRAINED_SERVED if is_cached(name))]


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

    def measure(self, record: TestRecord, key: str, device: str, model: str, load: ServingLoad,
                requests: int) -> list[str]:
        """Replay the test's load and fill ``record``; returns the failures the family adds to the baseline's judgement
        (failed requests)."""
        if load.sweep:
            return self._measure_sweep(record, device, model, load, requests)
        trace, slo = self._load(device, load, requests)
        running = self._server(device, model)
        facts = {**_trace_facts(trace, self.settings.engine, slo), **_model_facts(running)}
        put_measured(record, MeasuredFigures(unit=UNIT, serving=ServingFigures.of(facts)))
        replays = ServedWindows(running, trace, slo, self.settings, _prompt_of(running.model))
        sampler = TelemetrySampler(device, self.bench.settings.telemetry_interval_s)
        with sampler:
            rounds = replays.run(self.bench.window_check(record, key))
        if replays.died:
            self._server_died(record, running, facts)
        timings = [timing for done in replays.windows for timing in done.timings]
        measured, serving_facts = _figures(replays.figures, timings, sampler)
        put_measured(record, MeasuredFigures(**measured, looks=rounds.looks, serving=ServingFigures.of(
            {**facts, **serving_facts, "warmup_s": replays.warmup_s})))
        return _request_failures(record, timings)

    def measure_ab(self, record: TestRecord, device: str, model: str, load: ServingLoad, requests: int) -> TestRecord:
        """The test's A/B form in an A/B session: fresh servers of both stacks every few pairs, their windows
        interleaved (:mod:`hwregress.plugin.families.serving_ab`); returns the judged record. A rate sweep has no A/B
        form: skipped as ``unsupported``."""
        if load.sweep:
            skip_with(Verdict.UNSUPPORTED, "a rate sweep has no A/B form: compare the stacks at one load "
                                           "(--serving-rates or --serving-concurrency)")
        trace, slo = self._load(device, load, requests)
        facts = _trace_facts(trace, self.settings.engine, slo)
        put_measured(record, MeasuredFigures(unit=UNIT, serving=ServingFigures.of(facts)))
        return measure_serving_ab(self.bench, record, ServingABTest(device, model, trace, slo, facts, _prompt_of))

    def _measure_sweep(self, record: TestRecord, device: str, model: str, load: ServingLoad,
                       requests: int) -> list[str]:
        """The rate sweep: one window at each rate (of at least ``SWEEP_POINT_S`` seconds' requests), after an untimed
        replay of the test's requests at the highest (the largest batches); figures: each point, the capacity and the
        peak goodput."""
        rates = load.sweep_rates or ()
        traces = [self._trace(device, ServingLoad(load.lengths, rate=rate), self.settings.sweep_requests(rate, device))
                  for rate in rates]
        burst = self._trace(device, ServingLoad(load.lengths, rate=max(rates)), requests)
        slo = self.settings.slo_for(device)
        running = self._server(device, model)
        facts = {**_trace_facts(traces[0], self.settings.engine, slo), "rate": None, **_model_facts(running)}
        put_measured(record, MeasuredFigures(unit=UNIT, serving=ServingFigures.of(facts)))
        sweep = ServedSweep(running, burst, traces, self.settings, _prompt_of(running.model))
        sampler = TelemetrySampler(device, self.bench.settings.telemetry_interval_s)
        with sampler:
            sweep.run()
        if sweep.died:
            self._server_died(record, running, facts)
        points = [window_figures(done.timings, done.duration_s, slo) for done in sweep.points]
        timings = [timing for done in sweep.points for timing in done.timings]
        swept = sweep_facts(rates, points, timings)
        put_measured(record, MeasuredFigures(**sweep_figures(swept, sampler), serving=ServingFigures.of(
            {**facts, **swept, "warmup_s": sweep.warmup_s})))
        missed = [] if swept["peak_goodput"] else [
            f"{record.test_id}: no request met its SLOs (TTFT <= {slo.ttft_ms} ms, TPOT <= {slo.tpot_ms} ms) at any "
            f"rate of the sweep ({', '.join(f'{rate:g}' for rate in rates)} requests/s)"]
        return _request_failures(record, timings) + missed

    def _server_died(self, record: TestRecord, running: RunningServer, facts: dict[str, Any]) -> None:
        """Fail the test with the dead server's log tail (kept in the record); the next test starts a fresh one."""
        tail = running.server.tail()
        stop_server(self.bench.config)
        put_measured(record, MeasuredFigures(serving=ServingFigures.of({**facts, "server_log_tail": tail})))
        fail_with(f"the {self.settings.engine} server died during the test; its log ends:\n{tail}")

    def _load(self, device: str, load: ServingLoad, requests: int) -> tuple[Trace, Slo]:
        """The test's trace and SLOs; skips the test as ``unsupported`` where the engine is not installed."""
        return self._trace(device, load, requests), self.settings.slo_for(device)

    def _trace(self, device: str, load: ServingLoad, requests: int) -> Trace:
        """The seeded trace of an open or closed ``load``; skips the test as ``unsupported`` where the engine is not
        installed."""
        reason = serving.unavailable_reason(self.settings.engine)
        if reason is not None:
            skip_with(Verdict.UNSUPPORTED, reason)
        return make_trace(TRACE_SEED, requests, self.settings.arrivals(load.rate, load.clients),
                          self.settings.length_profile(load.lengths, device))

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


def _model_facts(running: RunningServer) -> dict[str, Any]:
    """The served model's seed or published source, and the server's start time, for ``record.serving``."""
    return {"model_seed": running.model.seed, "model_source": running.model.source,
            "server_start_s": running.server.started_s}


def _prompt_of(model: ServedModel) -> Callable[[TraceRequest], str]:
    return lambda request: model.prompt_text(request.prompt_token_ids(model.vocab_size, FIRST_WORD_ID))


def _trace_facts(trace: Trace, engine: str, slo: Slo) -> dict[str, Any]:
    """The engine, the trace and the SLOs, for ``record.serving`` before anything is measured."""
    lengths = trace.lengths
    return dict(engine=engine, engine_version=_version(engine), rate=trace.arrivals.rate,
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
                 **pooled_json(timings),
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

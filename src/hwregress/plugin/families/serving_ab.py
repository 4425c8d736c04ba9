"""The serving family's A/B form (docs/ab.md, docs/serving.md): in an A/B session (``--ab-python``, ``--ab-env``) a
serving test compares two stacks' servers (A: this interpreter and environment; B: ``--ab-python`` with
``--ab-env``'s settings on top), both serving the same seeded model. It replays the test's trace as pairs of windows in
the seeded, balanced AB/BA order (:func:`hwregress.ab.order.balanced_order`), one window at a time, so both stacks meet
the same load on the same host in the same minutes. A window's figure is its output speed per user (tokens/s/user =
1000 / TPOT p50), the single-stack test's sample, and each pair gives one log-ratio B/A.

The unit of the verdict is the server pair, as the worker process pair is the throughput family's
(:mod:`hwregress.ab.processes`): every ``--ab-pairs-per-process`` pairs run against a fresh server per stack, each
warmed by the trace's first quarter, untimed, and both are stopped after them. A server keeps a speed of its own for
its life: three A/A sessions of the CPU default against one pair of servers for all 20 pairs found B/A 1.032 [1.006,
1.062], 1.003 and 0.961 [0.925, 0.998]. Two of the three intervals exclude 1 (docs/data/serving_ab_2026-11-30.md). The
pairs cancel what changes over time, not what differs between two servers for their whole life. So the server pairs'
mean log-ratios are judged at the session's planned looks by the A/B engine's paired comparison
(:func:`hwregress.ab.session.judge_pairs`: Wilcoxon signed-rank and the Hodges-Lehmann interval at alpha / K per
look). The record holds B against A as the throughput family's A/B record does (``record.ab``), B's windows as
``serving.windows`` and A's as ``serving.reference_windows``.

A window with a failed request leaves its side of the pair None with the error, and its server pair's pairs are
dropped (:func:`hwregress.ab.processes.kept_processes`). A server that does not start or dies fails the test, naming
the stack, with its log's tail. Every server is stopped when its pair of servers is done, whatever ended it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hwregress.ab.pairs import Pair
from hwregress.ab.session import judged_at_looks
from hwregress.ab.stacks import Stack, fingerprint_difference, package_fingerprint
from hwregress.hardware.telemetry import TelemetrySampler
from hwregress.plugin.context import BenchContext
from hwregress.plugin.families.ab_window import ab_outcome
from hwregress.plugin.record import fail_with, skip_with
from hwregress.plugin.xdist import session_temp
from hwregress.serving import server as serving
from hwregress.serving.figures import (
    ERRORS_SHOWN,
    Slo,
    WindowFigures,
    distinct_errors,
    pooled_json,
    window_figures,
)
from hwregress.serving.settings import MODEL_SEED, ServingSettings
from hwregress.serving.trace import Trace, TraceRequest
from hwregress.store.assembly import put_measured
from hwregress.store.measured import MeasuredFigures
from hwregress.store.results import TestRecord
from hwregress.store.serving_figures import ServingFigures
from hwregress.store.verdicts import Verdict
from hwregress.workloads.pretrained_served import PRETRAINED_SERVED, PretrainedMissing, write_pretrained_served
from hwregress.workloads.served import ServedModel, write_served_model

if TYPE_CHECKING:
    from hwregress.serving.client import Replay

SERVER_PACKAGES = ("torch", "transformers", "vllm", "hwregress")  # what a server's fingerprint names
UNIT = "tokens/s/user"
UNIT_OF_VERDICT = "server pair"
# a fresh server's warm-up: the trace's first quarter (at least 4 requests), untimed
WARMUP_FRACTION = 4
WARMUP_MIN_REQUESTS = 4


class ServerDied(RuntimeError):
    """A stack's server died during the test; the message names the stack and holds its log's tail."""


@dataclass(frozen=True)
class ServingABTest:
    """One serving test's A/B: what both stacks' servers replay.

    Attributes:
        device: the torch device spec both servers use.
        model: the served model's name (:data:`hwregress.workloads.served.SERVED_SHAPES`).
        trace: the test's trace, replayed by every window.
        slo: the bounds of each window's goodput.
        facts: the trace's and SLOs' facts for ``record.serving`` (the serving family's ``_trace_facts``).
        prompt_of: a request's prompt text for ``model``'s tokenizer, from the served model.
    """

    device: str
    model: str
    trace: Trace
    slo: Slo
    facts: dict[str, Any]
    prompt_of: Callable[[ServedModel], Callable[[TraceRequest], str]]


def measure_serving_ab(bench: BenchContext, record: TestRecord, test: ServingABTest) -> TestRecord:
    """Run ``test`` as an A/B of the session's two stacks (module doc) and fill ``record`` with B against A; a
    regression fails the test with the ratio and its interval. Returns the record.

    Raises:
        pytest's failure: a regression; a server that did not start or died (its stack and log's tail named).
    """
    ab = bench.settings.ab
    assert ab is not None
    plan = ab.plan(bench.settings.plan.min_round_s, bench.settings.policy.tolerances.max_threshold)
    run = ServerPairs(ab.stacks, session_model(bench, test.model, "ab"), test, bench.settings.selection.serving)
    sampler = TelemetrySampler(test.device, bench.settings.telemetry_interval_s)
    failure = None
    try:
        with sampler:
            judged = judged_at_looks(run.server_pair, plan, UNIT_OF_VERDICT)
    except (serving.ServerFailed, ServerDied) as error:
        failure = str(error)
    if failure is not None:  # outside the except: pytest would print the error a second time, as the failure's context
        fail_with(failure)
    fingerprints = run.fingerprints
    result = replace(judged, fingerprints=fingerprints,
                     difference=fingerprint_difference(fingerprints["A"], fingerprints["B"]))
    measured, conclusion = ab_outcome(result, ab.meta()["stacks"], plan.seed, plan.looks, unit=UNIT)
    put_measured(record, measured)
    put_measured(record, MeasuredFigures(telemetry=sampler.summary(), health=sampler.health,
                                         serving=ServingFigures.of(_serving_facts(test, run))))
    return bench.settle(record, conclusion)


def session_model(bench: BenchContext, name: str, tag: str) -> ServedModel:
    """The served model ``name`` written into a folder of its own under the session's temporary folder
    (``<tag>-pid<pid>-<ns>``), beside which its servers' logs go: seeded from :data:`MODEL_SEED`, or a published
    model's cached weights (:mod:`hwregress.workloads.pretrained_served`); the test is ``unsupported`` where those are
    not in the cache."""
    folder = session_temp(bench.request) / "hwregress-serving" / f"{tag}-pid{os.getpid()}-{time.time_ns():x}"
    if name in PRETRAINED_SERVED:
        try:
            return write_pretrained_served(name, folder / name)
        except PretrainedMissing as missing:
            skip_with(Verdict.UNSUPPORTED, str(missing))
    return write_served_model(name, folder / f"{name}-seed{MODEL_SEED}", MODEL_SEED)


class ServerPairs:
    """The server pairs of one serving A/B test: each a fresh server per stack, warmed up, running its share of the
    pairs of windows, then stopped; what every window measured, by stack."""

    def __init__(self, stacks: tuple[Stack, Stack], model: ServedModel, test: ServingABTest,
                 settings: ServingSettings) -> None:
        self.stacks = {stack.label: stack for stack in stacks}
        self.model, self.test, self.settings = model, test, settings
        self.prompt = test.prompt_of(model)
        self.warmup = _prefix(test.trace, max(WARMUP_MIN_REQUESTS, len(test.trace.requests) // WARMUP_FRACTION))
        self.fingerprints = _fingerprints(list(stacks))
        self.windows: dict[str, list[WindowFigures]] = {"A": [], "B": []}
        self.replays: dict[str, list[Replay]] = {"A": [], "B": []}
        self.b_start_s: float | None = None  # B's first server's start, as a single-stack record keeps its server's

    def server_pair(self, process: int, planned: list[tuple[int, str]]) -> list[Pair]:
        """Server pair ``process``: both stacks' servers started and warmed up, the ``planned`` pairs (index, order)
        run against them, both stopped, whatever happened.

        Raises:
            hwregress.serving.server.ServerFailed: a server did not start (the message names its stack).
            ServerDied: a server died during a window or its warm-up.
        """
        with ExitStack() as stopping:
            servers = {label: self._started(stack, process, stopping) for label, stack in self.stacks.items()}
            for server in servers.values():
                self._replay(server, self.warmup)
            return [self._pair(servers, index, order, process) for index, order in planned]

    def _started(self, stack: Stack, process: int, stopping: ExitStack) -> _StackServer:
        device, folder = self.test.device, self.model.folder
        log = folder.parent / f"server-{stack.label}{process}-{self.settings.engine}-{device.replace(':', '')}.log"
        try:
            server = serving.start_served(self.settings, folder, device, log, python=stack.python, env=dict(stack.env))
        except serving.ServerFailed as error:
            raise serving.ServerFailed(f"stack {stack.describe()}: {error}") from None
        stopping.callback(server.stop)
        if stack.label == "B" and self.b_start_s is None:
            self.b_start_s = server.started_s
        return _StackServer(stack, server)

    def _pair(self, servers: dict[str, _StackServer], index: int, order: str, process: int) -> Pair:
        """Pair ``index``: the first-named stack's window, then the other's."""
        speed: dict[str, float | None] = {}
        errors: dict[str, str | None] = {}
        for label in order:
            done = self._replay(servers[label], self.test.trace)
            window = window_figures(done.timings, done.duration_s, self.test.slo)
            self.replays[label].append(done)
            self.windows[label].append(window)
            speed[label], errors[label] = _speed(window, done)
        return Pair(index, order, speed["A"], speed["B"], errors["A"], errors["B"], process=process)

    def _replay(self, server: _StackServer, trace: Trace) -> Replay:
        from hwregress.serving.client import replay

        extras = serving.request_extras(server.server.engine)
        done = replay(server.server.url, str(self.model.folder), trace, self.prompt,
                      timeout_s=self.settings.request_timeout_s, extra_body=extras)
        if not server.server.alive:
            raise ServerDied(f"stack {server.stack.describe()}'s {server.server.engine} server died during the "
                             f"test; its log ends:\n{server.server.tail()}")
        return done


@dataclass(frozen=True)
class _StackServer:
    stack: Stack
    server: serving.Server


def _prefix(trace: Trace, count: int) -> Trace:
    """The first ``count`` requests of ``trace`` (all of them where it has fewer): a fresh server's warm-up."""
    return replace(trace, requests=trace.requests[:count])


def _speed(window: WindowFigures, done: Replay) -> tuple[float | None, str | None]:
    """A window's tokens/s/user, or None and why it has none (a failed request, no TPOT)."""
    if window.failed:
        first = next(t.error for t in done.timings if t.error)
        return None, f"{window.failed} of {window.sent} requests failed: {first}"
    speed = window.output_speed_per_user
    if speed is None:
        return None, "no request had two output tokens: no TPOT"
    return speed, None


def _fingerprints(stacks: list[Stack]) -> dict[str, dict[str, Any]]:
    """Each stack's server interpreter's packages and the settings either stack sets."""
    keys = list(dict.fromkeys(key for stack in stacks for key in stack.env))
    return {stack.label: package_fingerprint(stack, SERVER_PACKAGES, keys) for stack in stacks}


def _serving_facts(test: ServingABTest, run: ServerPairs) -> dict[str, Any]:
    """``record.serving``: the trace and SLOs, B's first server start and its windows with their requests pooled, A's
    windows and pooled TTFT and TPOT, and the first distinct errors of either."""
    timings = {label: [timing for done in run.replays[label] for timing in done.timings] for label in "AB"}
    reference = pooled_json(timings["A"])
    return {**test.facts, "server_start_s": run.b_start_s, "model_seed": run.model.seed,
            "model_source": run.model.source,
            "windows": [window.to_json() for window in run.windows["B"]],
            "reference_windows": [window.to_json() for window in run.windows["A"]],
            **pooled_json(timings["B"]), "reference_ttft": reference["ttft"], "reference_tpot": reference["tpot"],
            "errors": distinct_errors(timings["A"] + timings["B"])[:ERRORS_SHOWN]}

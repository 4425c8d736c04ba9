"""The replays of one single-stack ``serving`` test on its running server (:mod:`hwregress.plugin.families.serving`):
an open- or closed-loop test's windows, at planned looks when it is judged, and a rate sweep's points.

A window replays the whole trace; its sample is its output speed per user (tokens/s/user). A test's windows run as
every timed window of this project does (:func:`hwregress.measure.timing.run_rounds`, the window being the round):
recording, ``--serving-windows`` of them, extended one at a time while their IQR/median exceeds
:data:`STABLE_REL_IQR`, up to twice as many; judged, looked at after 3 windows, then at the planned looks up to twice
``--serving-windows`` (3, 6 and 10 by default), each look at the level :mod:`hwregress.judge.looks` spends on it, and
stopped at the first that decides. The plan's round time is the untimed replay's, which replays the same trace.

A rate sweep replays a trace once at each of its rates, of the test's requests or, where more, of as many as arrive
in :data:`hwregress.serving.settings.SWEEP_POINT_S` at the rate (a point in the server's steady state, not one
burst), after an untimed replay of the test's requests at the highest rate (the largest batches); its figures are
the points', the capacity (where goodput stops rising, :func:`hwregress.serving.figures.capacity`; judged) and the
peak goodput (kept: at the knee of the curve it moves by half between unchanged sessions)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from hwregress.hardware.telemetry import TelemetrySampler
from hwregress.measure.timing import Rounds, TimingPlan, VerdictCheck, run_rounds
from hwregress.serving import server as serving
from hwregress.serving.figures import ERRORS_SHOWN, Slo, WindowFigures, capacity, distinct_errors, window_figures
from hwregress.serving.requests import RequestTiming
from hwregress.serving.settings import ServingSettings
from hwregress.serving.trace import Trace, TraceRequest
from hwregress.workloads.served import ServedModel

if TYPE_CHECKING:  # the client needs httpx, of the serving extra: imported when a serving test runs
    from hwregress.serving.client import Replay

# the windows' speeds within this IQR/median: stable (recorded into a baseline; judged without a direction: pass, not
# unstable). Not the model window's 10%: a serving window's median TPOT moves with the batches its Poisson arrivals
# make, and six quiet sessions of the CPU default spread 9.8-24% (docs/data/serving_verdicts_2026-11-30.md)
STABLE_REL_IQR = 0.25
FIRST_LOOK = 3  # windows before a judged test's first look: the fewest with a median and an IQR
WINDOWS_BUDGET = 2  # a test runs at most this many times --serving-windows (recording while noisy, judged undecided)


class Running(Protocol):
    """What the replays need of the family's running server: the served model and the server."""

    model: ServedModel
    server: serving.Server


class _ServerDied(RuntimeError):
    """The server died between two windows."""


def window_plan(windows: int, window_s: float) -> TimingPlan:
    """The timing plan of a test of ``windows`` (>= 3) windows of about ``window_s`` seconds (> 0): see the module
    doc. With 5 windows its looks are after 3, 6 and 10 (:meth:`hwregress.measure.timing.TimingPlan.look_rounds`).

    Raises:
        ValueError: fewer than 3 windows, or a window time that is not > 0.
    """
    if not window_s > 0:
        raise ValueError(f"window time {window_s!r} s: the untimed replay's wall time is > 0")
    window_s = max(1, round(window_s * 1e6)) / 1e6  # as run_rounds plans its looks, so the budget holds its windows
    return TimingPlan(warmup_steps=1, rounds=windows, first_look=FIRST_LOOK, min_round_s=window_s,
                      max_rel_iqr=STABLE_REL_IQR, budget_s=WINDOWS_BUDGET * windows * window_s, confirm_s=0.0)


class _Replays:
    """Replays against the running server with the test's prompts and the settings' request timeout."""

    def __init__(self, running: Running, settings: ServingSettings,
                 prompt_of: Callable[[TraceRequest], str]) -> None:
        self.running = running
        self.settings = settings
        self.prompt_of = prompt_of
        self.warmup_s: float | None = None
        self.died = False

    def replay(self, trace: Trace) -> Replay:
        from hwregress.serving.client import replay

        server = self.running.server
        return replay(server.url, str(self.running.model.folder), trace, self.prompt_of,
                      timeout_s=self.settings.request_timeout_s, extra_body=serving.request_extras(server.engine))

    def warm_up(self, trace: Trace) -> float:
        """Replay ``trace`` untimed; returns its wall time, s."""
        self.warmup_s = self.replay(trace).duration_s
        return self.warmup_s


class ServedWindows(_Replays):
    """The windows of an open- or closed-loop test (module doc); after :meth:`run`, ``windows`` holds each window's
    replay and ``figures`` its figures against ``slo``, ``warmup_s`` the untimed replay's wall time and ``died``
    whether the server died (the windows stop at the first one it missed)."""

    def __init__(self, running: Running, trace: Trace, slo: Slo, settings: ServingSettings,
                 prompt_of: Callable[[TraceRequest], str]) -> None:
        super().__init__(running, settings, prompt_of)
        self.trace = trace
        self.slo = slo
        self.windows: list[Replay] = []
        self.figures: list[WindowFigures] = []

    @property
    def speeds(self) -> list[float]:
        """Each window's output speed per user (tokens/s/user), those with a TPOT."""
        return [speed for speed in (w.output_speed_per_user for w in self.figures) if speed is not None]

    def run(self, check: VerdictCheck | None) -> Rounds:
        """The untimed replay, then the windows: with ``check`` (the baseline's, on the speeds so far) at the planned
        looks, else a recording's. Returns the rounds and their looks."""
        plan = window_plan(self.settings.windows, self.warm_up(self.trace))
        settled = None if check is None else lambda _seconds, look, looks: check(self.speeds, look, looks)
        try:
            rounds = run_rounds(self._window, plan, round_s=plan.min_round_s, settled=settled)
        except _ServerDied:
            rounds = Rounds([done.duration_s for done in self.windows])
        self.died = not self.running.server.alive
        return rounds

    def _window(self) -> float:
        if not self.running.server.alive:
            raise _ServerDied
        done = self.replay(self.trace)
        self.windows.append(done)
        self.figures.append(window_figures(done.timings, done.duration_s, self.slo))
        return done.duration_s


class ServedSweep(_Replays):
    """The points of a rate sweep (module doc), one trace per rate in rising order, after the untimed ``warmup``
    trace; after :meth:`run`, ``points`` holds each point's replay, ``warmup_s`` and ``died`` as
    :class:`ServedWindows`'."""

    def __init__(self, running: Running, warmup: Trace, traces: Sequence[Trace], settings: ServingSettings,
                 prompt_of: Callable[[TraceRequest], str]) -> None:
        super().__init__(running, settings, prompt_of)
        self.warmup = warmup
        self.traces = list(traces)
        self.points: list[Replay] = []

    def run(self) -> None:
        self.warm_up(self.warmup)
        for trace in self.traces:
            if not self.running.server.alive:
                break
            self.points.append(self.replay(trace))
        self.died = not self.running.server.alive


def sweep_figures(swept: dict[str, Any], sampler: TelemetrySampler) -> dict[str, Any]:
    """A sweep's :class:`hwregress.store.measured.MeasuredFigures` fields from its :func:`sweep_facts` (``swept``):
    no samples (its points are at different loads), the declared ``capacity`` (requests/s), the telemetry; no
    declared figure where no request met its SLOs (the family fails such a sweep)."""
    declared = {"capacity": swept["capacity"]} if swept["peak_goodput"] else {}
    return dict(rounds=len(swept["sweep"]), telemetry=sampler.summary(), health=sampler.health, declared=declared)


def sweep_facts(rates: Sequence[float], points: Sequence[WindowFigures],
                timings: Sequence[RequestTiming]) -> dict[str, Any]:
    """``record.serving``'s sweep: each point with its rate (:class:`hwregress.store.serving_figures.
    SweepPointFigures`), the capacity (:func:`hwregress.serving.figures.capacity`), the peak goodput (requests/s),
    the first distinct errors."""
    goodputs = [point.goodput for point in points]
    return {"sweep": [{"rate": rate, **point.to_json()} for rate, point in zip(rates, points, strict=False)],
            "capacity": capacity(rates[:len(points)], goodputs) if points else None,
            "peak_goodput": max(goodputs, default=None),
            "errors": distinct_errors(timings)[:ERRORS_SHOWN]}

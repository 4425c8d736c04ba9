"""Where and when a session's launch-bound tests take their visits (:mod:`hwregress.measure.visits`): the visit
workers of each device, and a schedule that spreads each test's visits over the session.

Workers. ``count - 1`` workers a device (:class:`hwregress.ab.workers.StackWorker` of this interpreter and
environment, with ``HWREGRESS_VISIT_WORKER`` set to its number), started at the first visit the device needs and kept
for the session, so a process draw costs one start a session, not one a test; each visit builds its case, runs its
window and releases the device's memory. Under pytest-xdist each device's tests run on one xdist worker
(:mod:`hwregress.plugin.xdist`), which owns that device's visit workers. A worker that cannot start, or dies, is
remembered: the device's later visits run in the pytest process instead, and the record says so (``pytest (no visit
worker)``). A device that is not visible here gets no visits (its tests skip).

Schedule. At collection the visited tests move to the end of the session, in their order. After every other test of
a device, the visits its visited tests still owe are spread over the tests left: ``ceil(owed / tests left)`` after
each, to the test that owes the most, on its next worker; a test's visits then fall minutes apart in a full tier.
When a visited test runs, its own window is the pytest process's visit, and the visits it still owes are taken at
once, back to back (its record's ``spread_s`` says how far apart its visits were).
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from hwregress.ab.protocol import Case
from hwregress.ab.stacks import Stack
from hwregress.ab.workers import StackWorker, WorkerError, WorkerFailed
from hwregress.hardware.devices import unavailable_reason
from hwregress.hardware.facts import device_kind
from hwregress.measure import visits
from hwregress.measure.timing import TimingPlan

VISITS_KEY = pytest.StashKey["SessionVisits"]()
WORKER_ENV = "HWREGRESS_VISIT_WORKER"  # set in each visit worker's environment to its number
VISITED_ARGS = ("device", "workload", "mode", "batch_size", "dtype")


class SessionVisits:
    """This pytest process's visit workers and the visits they took, as a pytest plugin (its hooks order and spread
    the visits).

    Args:
        setting: ``--visits`` (None: :func:`hwregress.measure.visits.visits_for`'s default).
        plan: the session's timing plan (a visit runs its warmup steps, rounds and round time).
        telemetry_interval_s: the session's sampling interval.
        cudnn_benchmark: the session's ``cudnn.benchmark``.
        workload_modules: the session's ``--workloads`` modules, imported by each worker.
        worker_window_of: whether a test item's family runs its window in worker processes (its ``worker_window``,
            :class:`hwregress.plugin.families.protocol.FamilyTraits`).
        timeout_s: the longest a worker's start or one visit may take.
    """

    def __init__(self, setting: int | None, plan: TimingPlan, telemetry_interval_s: float, cudnn_benchmark: bool,
                 workload_modules: Iterable[str] = (),
                 worker_window_of: Callable[[pytest.Item], bool] = lambda i: False, timeout_s: float = 600.0) -> None:
        self.setting = setting
        self.worker_window_of = worker_window_of
        self.plan = plan
        self.telemetry_interval_s = telemetry_interval_s
        self.cudnn_benchmark = cudnn_benchmark
        self.workload_modules = list(workload_modules)
        self.timeout_s = timeout_s
        self.workers: dict[str, list[StackWorker]] = {}
        self.unusable: dict[str, str] = {}  # device -> why its workers cannot serve (visits run here instead)
        self.taken: dict[str, list[visits.Visit]] = {}  # test id -> the workers' visits so far
        self.ran: set[str] = set()  # test ids run (their visits are no longer owed)
        self.deferred: set[str] = set()  # test ids whose visit failed between tests: taken again when they run
        self._counts: dict[str, int] = {}  # test id -> its visits (item_count, asked after every test)
        self._usable: dict[str, bool] = {}  # device -> whether it is visible here (a device that is not gets none)

    # -- which tests -------------------------------------------------------------------------------------------
    def count(self, worker_window: bool, params: dict[str, Any]) -> int:
        """Visits a test with parameters ``params`` gets: the eager, contiguous launch-bound windows of a family whose
        window the workers run (``worker_window``: the throughput family's;
        :func:`hwregress.measure.visits.visits_for`), 1 for every other test."""
        device = params.get("device")
        if not worker_window or params.get("compiler", "eager") != "eager" \
                or params.get("memory_format", "contiguous") != "contiguous" or not isinstance(device, str):
            return 1
        if device not in self._usable:  # its tests skip: no worker is started for them
            self._usable[device] = unavailable_reason(device) is None
        if not self._usable[device]:
            return 1
        return visits.visits_for(self.setting, device_kind(device), params.get("mode"), params.get("batch_size"))

    def item_count(self, item: pytest.Item) -> int:
        """Visits test ``item`` gets (:meth:`count`)."""
        if item.nodeid not in self._counts:
            params = getattr(getattr(item, "callspec", None), "params", None)
            self._counts[item.nodeid] = self.count(self.worker_window_of(item), dict(params)) if params else 1
        return self._counts[item.nodeid]

    # -- the hooks ---------------------------------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)  # after -m and -k deselected: the order of what runs
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """The visited tests to the end, each group in its order, so the others' gaps can take their visits."""
        visited = [item for item in items if self.item_count(item) > 1]
        if visited:
            chosen = set(map(id, visited))
            items[:] = [item for item in items if id(item) not in chosen] + visited

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """After a test that is not visited, the visits its device's visited tests owe, spread over the tests left."""
        self.ran.add(item.nodeid)
        if self.item_count(item) > 1:
            return
        device = _device_of(item)
        if device is None:
            return
        items = list(item.session.items)
        after = items[items.index(item) + 1:] if item in items else []
        owing = [other for other in after if _device_of(other) == device and self.item_count(other) > 1
                 and other.nodeid not in self.ran and other.nodeid not in self.deferred and self.owed(other) > 0]
        gaps = sum(1 for other in after if _device_of(other) == device and self.item_count(other) == 1) + 1
        owed_total = sum(self.owed(other) for other in owing)
        for _ in range(math.ceil(owed_total / gaps)):
            owing = [other for other in owing if other.nodeid not in self.deferred and self.owed(other) > 0]
            if not owing:
                break
            other = max(owing, key=self.owed)
            try:
                self._visit_now(other.nodeid, case_of(other, self), self.item_count(other))
            except Exception:  # the visited test meets the error itself when it runs (an oom, a model that fails)
                self.deferred.add(other.nodeid)

    def pytest_sessionfinish(self) -> None:
        self.close()

    # -- visits ------------------------------------------------------------------------------------------------
    def owed(self, item: pytest.Item) -> int:
        """Worker visits ``item`` still owes (its count less one, its own window's, less those taken)."""
        return self.item_count(item) - 1 - len(self.taken.get(item.nodeid, []))

    def visits_of(self, test_id: str, case: Case, count: int) -> list[visits.Visit]:
        """The ``count - 1`` worker visits of test ``test_id``: those taken between earlier tests, and the ones still
        owed taken now, back to back."""
        while len(self.taken.get(test_id, [])) < count - 1:
            self._visit_now(test_id, case, count)
        return list(self.taken.get(test_id, []))

    def _visit_now(self, test_id: str, case: Case, count: int) -> visits.Visit:
        """One visit of ``case`` on its next worker (the test's visits go to workers 1, 2, ... in turn); in this
        process where the device's workers cannot serve."""
        taken = self.taken.setdefault(test_id, [])
        index = len(taken) % max(count - 1, 1)
        worker = self._worker(case.device, index, count - 1)
        if worker is not None:
            try:
                answer = worker.request({"op": "visit", "case": case.to_dict(), "rounds": self.plan.rounds,
                                         "min_round_s": self.plan.min_round_s,
                                         "telemetry_interval_s": self.telemetry_interval_s})
                visit = visits.Visit(f"visit worker {index + 1}", int(answer["pid"]), float(answer["started_s"]),
                                     list(answer["samples"]), answer.get("latency_ms"), answer.get("health") or {})
                taken.append(visit)
                return visit
            except WorkerFailed:
                raise  # the worker serves on; the case itself failed there (an out-of-memory, a model that fails)
            except WorkerError as error:  # it died or hung: the device's later visits run here
                self._give_up(case.device, f"{worker.name}: {error}")
        visit = self._visit_here(case)
        taken.append(visit)
        return visit

    def _visit_here(self, case: Case) -> visits.Visit:
        """A visit in this process, where the device's workers cannot serve (one process draw: said in the record)."""
        from hwregress.ab.worker import visit_window

        answer = visit_window(case, self.plan.rounds, self.plan.min_round_s, self.telemetry_interval_s)
        return visits.Visit("pytest (no visit worker)", os.getpid(), float(answer["started_s"]),
                            list(answer["samples"]), answer.get("latency_ms"), answer.get("health") or {})

    def _worker(self, device: str, index: int, wanted: int) -> StackWorker | None:
        """Worker ``index`` of ``device`` (started on first use with the others up to ``wanted``); None where the
        device's workers cannot serve."""
        if device in self.unusable:
            return None
        workers = self.workers.setdefault(device, [])
        while len(workers) <= index:
            number = len(workers) + 1
            worker = StackWorker(Stack(f"visit {number}", sys.executable, {WORKER_ENV: str(number)}), device,
                                 self.timeout_s, self.workload_modules)
            try:
                worker.start()
                worker.hello()
            except (WorkerError, OSError) as error:
                worker.end()
                self._give_up(device, f"{worker.name}: {error}")
                return None
            workers.append(worker)
        return workers[index]

    def _give_up(self, device: str, why: str) -> None:
        """Remember that ``device``'s workers cannot serve (its later visits run here) and end them."""
        self.unusable.setdefault(device, why)
        for worker in self.workers.pop(device, []):
            worker.end()

    def close(self) -> None:
        """Close every worker (each asked to exit, then its process group ended)."""
        for workers in self.workers.values():
            for worker in workers:
                worker.close()
        self.workers.clear()


def case_of(item: pytest.Item, session_visits: SessionVisits) -> Case:
    """The visit case of a visited throughput test, from its parameters and the session's settings."""
    params = item.callspec.params  # type: ignore[attr-defined]
    return visit_case(session_visits, params["device"], params["workload"], params["mode"], params["batch_size"],
                      params["dtype"], params.get("context"))


def visit_case(session_visits: SessionVisits, device: str, workload: str, mode: str, batch_size: int, dtype: str,
               context: int | None) -> Case:
    """The :class:`hwregress.ab.protocol.Case` a visit of this window runs (the session's warmup steps and
    ``cudnn.benchmark``)."""
    return Case(workload, mode, int(batch_size), device=device, dtype=dtype, context=context,
                warmup_steps=session_visits.plan.warmup_steps, cudnn_benchmark=session_visits.cudnn_benchmark)


def _device_of(item: pytest.Item) -> str | None:
    params = getattr(getattr(item, "callspec", None), "params", None) or {}
    device = params.get("device")
    return device if isinstance(device, str) else None


def register(config: pytest.Config, setting: int | None, plan: TimingPlan, telemetry_interval_s: float,
             cudnn_benchmark: bool, workload_modules: Iterable[str],
             worker_window_of: Callable[[pytest.Item], bool]) -> SessionVisits:
    """This process's :class:`SessionVisits`, stashed under :data:`VISITS_KEY` and registered as a plugin."""
    session_visits = config.stash[VISITS_KEY] = SessionVisits(setting, plan, telemetry_interval_s, cudnn_benchmark,
                                                              workload_modules, worker_window_of)
    config.pluginmanager.register(session_visits, "hwregress-visits")
    return session_visits


def now() -> float:
    """The visits' clock: ``time.monotonic`` (system-wide on Linux, so workers' starts compare with this process's)."""
    return time.monotonic()

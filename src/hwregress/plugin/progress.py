"""What the session tells the terminal before and while it measures: the ``hwregress`` lines of pytest's header
(devices, hardware key and baselines file of each, history folder) and live lines while a scale-out job or a
Spark stream runs (each rank's phase, the stream's produced and predicted images), at most one per
:data:`INTERVAL_S` per wait.

Live lines are written by the pytest process that runs the test, through its terminal reporter, with pytest's
output capture suspended for the write (as pytest's own live logging does: ``_pytest/logging.py``,
``_LiveLoggingStreamHandler.emit``). An xdist worker has no terminal (its output never reaches the user's), so
workers write none, and the header says so; ``--hwregress-quiet`` (ini ``hwregress_quiet``) silences live lines
and keeps the header.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hwregress.hardware.devices import describe, unavailable_reason
from hwregress.plugin.ab_settings import ABSettings
from hwregress.store.baselines import BaselineStore

INTERVAL_S = 10.0
NO_BASELINES = "none: every test will be new"

JobWatcher = Callable[[dict[int, dict[str, Any]]], None]  # called with every rank's last status at each poll
StreamWatcher = Callable[[int, int, int], None]  # called with (produced, predicted, total) images at each poll
NodesWatcher = Callable[[int, int], None]  # called with (arrived, nnodes) at each poll of the nodes' check-in
WRITER_KEY = pytest.StashKey["Callable[[str], None] | None"]()  # set by start(): how this process writes a line


def add_options(parser: pytest.Parser) -> None:
    """Register ``--hwregress-quiet`` and its ini twin ``hwregress_quiet`` in the ``hwregress`` group."""
    help_text = "no live lines while scale-out jobs and Spark streams run (the header stays)"
    parser.getgroup("hwregress").addoption("--hwregress-quiet", action="store_true", dest="hwregress_quiet",
                                           default=None, help=f"{help_text} [ini: hwregress_quiet]")
    parser.addini("hwregress_quiet", f"{help_text}: true or false", default="false")


def is_quiet(config: pytest.Config) -> bool:
    """``--hwregress-quiet`` given, or the ini's ``hwregress_quiet`` true.

    Raises:
        pytest.UsageError: the ini value is neither true nor false (:func:`hwregress.plugin.options.flag_of`).
    """
    from hwregress.plugin.options import flag_of

    return flag_of(config, "hwregress_quiet")


# -- the header ------------------------------------------------------------------------------------------------
def header_lines(config: pytest.Config, devices: list[str], baseline_dir: Path, history_dir: Path | None,
                 ab: ABSettings | None = None) -> list[str]:
    """The ``hwregress`` lines of pytest's header: the selected devices, each one's hardware key and baselines file
    (or :data:`NO_BASELINES` where that file is missing), the history folder, the two stacks of an A/B session, and
    whether live lines are written."""
    store = BaselineStore(baseline_dir)
    lines = [f"hwregress: devices {', '.join(devices)}"]
    for device in devices:
        lines.append(f"hwregress: {device}: {_device_line(device, store, config.rootpath)}")
    if ab is not None:
        a, b = ab.stacks
        lines.append(f"hwregress: A/B: stack {b.describe()} against stack {a.describe()}, interleaved pairs of "
                     f"windows judged at {', '.join(map(str, ab.looks))} pairs, threshold +-{ab.threshold:.0%}")
        history = "off in an A/B session (its figures are B against A, not this machine's)"
    else:
        history = (f"{_shown(history_dir, config.rootpath)} (one <hardware-key>.jsonl)" if history_dir
                   else "off (--no-history)")
    lines.append(f"hwregress: history {history}")
    lines.append(f"hwregress: live progress {_live_state(config)}")
    return lines


def _device_line(device: str, store: BaselineStore, root: Path) -> str:
    reason = unavailable_reason(device)
    if reason is not None:
        return f"not visible ({reason}); its tests skip"
    info = describe(device)
    path = store.path_for(info.hardware_key)
    baselines = _shown(path, root) if path.is_file() else NO_BASELINES
    return f"{info.name}, hardware key {info.hardware_key}, baselines {baselines}"


def _live_state(config: pytest.Config) -> str:
    if is_quiet(config):
        return "off (--hwregress-quiet)"
    if getattr(config.option, "numprocesses", None):
        return ("off under pytest-xdist (-n): its workers have no terminal; run scale-out and Spark tests without -n "
                "to see it")
    return f"of scale-out jobs and Spark streams every {INTERVAL_S:g} s (--hwregress-quiet silences it)"


def _shown(path: Path, root: Path) -> str:
    """``path`` relative to pytest's root folder where it lies inside it."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


# -- live lines ------------------------------------------------------------------------------------------------
class Throttle:
    """Says when a wait is due its next line: first :data:`INTERVAL_S` after the wait began (a short wait says
    nothing), then at least ``interval_s`` after the last line.

    Args:
        interval_s: seconds between lines.
        clock: monotonic seconds (``time.monotonic``; the self-tests inject a fake one).
    """

    def __init__(self, interval_s: float = INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.started = self.last = clock()

    def due(self) -> float | None:
        """The seconds since the wait began when a line is due now (and counts it as written), else None."""
        now = self.clock()
        if now - self.last < self.interval_s:
            return None
        self.last = now
        return now - self.started


class LiveLines:
    """The throttled live lines of one wait: ``line(text)`` writes ``"hwregress: <label>: <s> s: <text>"`` when the
    throttle says a line is due; ``text`` is a callable, built only then."""

    def __init__(self, write: Callable[[str], None], label: str, throttle: Throttle) -> None:
        self.write, self.label, self.throttle = write, label, throttle

    def line(self, text: Callable[[], str]) -> None:
        elapsed = self.throttle.due()
        if elapsed is not None:
            self.write(f"hwregress: {self.label}: {elapsed:.0f} s: {text()}")

    def job(self, ranks_per_node: int, nnodes: int, now: Callable[[], float] = time.time) -> JobWatcher:
        """A watcher for :func:`hwregress.scaleout.launch.run_job`'s wait (see :func:`job_line`)."""
        return lambda statuses: self.line(lambda: job_line(statuses, ranks_per_node, nnodes, now()))

    def stream(self) -> StreamWatcher:
        """A watcher for :func:`hwregress.spark.stream.run_stream`'s wait (see :func:`stream_line`)."""
        return lambda produced, predicted, total: self.line(lambda: stream_line(produced, predicted, total))

    def nodes(self) -> NodesWatcher:
        """A watcher for :meth:`hwregress.scaleout.session_store.SessionStore.begin_job`'s wait for the other nodes."""
        return lambda arrived, nnodes: self.line(
            lambda: f"waiting for the other nodes: {arrived} of {nnodes} checked in")


def start(config: pytest.Config) -> None:
    """Decide once, at the session's start (pytest's terminal reporter and capture manager are registered by then),
    whether this process writes live lines, and stash the writer for :func:`live_lines`: none when they are silenced
    (``--hwregress-quiet``), on an xdist worker (no terminal) or without a terminal reporter. The families then need
    only ``config.stash`` (the project's state convention), not pytest's plugin manager or the test item."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or is_quiet(config) or hasattr(config, "workerinput"):
        config.stash[WRITER_KEY] = None
        return
    capture = config.pluginmanager.get_plugin("capturemanager")

    def write(text: str) -> None:
        if capture is None:
            reporter.write_line(text)
            return
        with capture.global_and_fixture_disabled():  # the test's own capture would swallow the line
            reporter.write_line(text)

    config.stash[WRITER_KEY] = write


def live_lines(config: pytest.Config, label: str, clock: Callable[[], float] = time.monotonic) -> LiveLines | None:
    """The live lines of one wait of the test ``label`` (its name), written to this process's terminal; None when
    :func:`start` found none to write (silenced, an xdist worker, no terminal reporter) or never ran."""
    write = config.stash.get(WRITER_KEY, None)
    return None if write is None else LiveLines(write, label, Throttle(INTERVAL_S, clock))


def job_line(statuses: dict[int, dict[str, Any]], ranks_per_node: int, nnodes: int, now: float) -> str:
    """One line on a job's ranks from their status files (:func:`hwregress.scaleout.job.read_statuses`): ranks that
    share a phase together (``"rank 0: timed round 3 of 10; ranks 1-3: warmup"``), a rank silent for over
    :data:`INTERVAL_S` with its silence, and the local ranks not yet started.

    Args:
        statuses: by global rank, each with ``phase`` and ``time`` (Unix s of its last heartbeat).
        ranks_per_node: ranks this node starts.
        nnodes: nodes of the job (more than one: ranks start once every node joined the rendezvous).
        now: Unix time (s) the silences are counted to.
    """
    groups: dict[str, list[int]] = {}
    for rank, status in sorted(statuses.items()):
        phase = str(status.get("phase", "?"))
        silent = now - float(status.get("time", now))
        if silent > INTERVAL_S and phase not in ("done", "failed", "oom"):
            phase += f" (no progress for {silent:.0f} s)"
        groups.setdefault(phase, []).append(rank)
    parts = [f"{_ranks(ranks)}: {phase}" for phase, ranks in groups.items()]
    missing = ranks_per_node - len(statuses)
    if missing > 0:
        waiting = "the rendezvous of every node" if nnodes > 1 else "start-up"
        parts.append(f"{missing} of {ranks_per_node} local ranks not started yet (waiting for {waiting})")
    return "; ".join(parts)


def _ranks(ranks: list[int]) -> str:
    """``[0]`` -> ``"rank 0"``, ``[0, 1, 2, 5]`` -> ``"ranks 0-2, 5"``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    runs: list[list[int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    return "ranks " + ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


def stream_line(produced: int, predicted: int, total: int) -> str:
    """One line on a Spark stream: ``"stream: 120 of 316 images produced, 100 predicted"`` (predicted: the rows of
    the micro-batches the query finished, warm-up images included as in ``total``)."""
    return f"stream: {produced} of {total} images produced, {predicted} predicted"

"""The live lines while scale-out jobs and Spark streams run: the throttle (a fake clock), the text from a fake
job status folder and from fake stream counters, the wait loops handing their state to a watcher, and who writes
none (quiet, xdist workers). The header and the lines in a real terminal: tests/plugin/test_plugin_e2e.py."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from hwregress.plugin import progress
from hwregress.scaleout import launch
from hwregress.scaleout.job import JobSpec, read_statuses, write_status
from hwregress.spark import stream


class FakeClock:
    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def _lines(clock: FakeClock, label: str = "test_scaling[cpu-tiny-w2]") -> tuple[progress.LiveLines, list[str]]:
    written: list[str] = []
    return progress.LiveLines(written.append, label, progress.Throttle(progress.INTERVAL_S, clock)), written


# -- the throttle ----------------------------------------------------------------------------------------------
def test_a_wait_says_nothing_for_its_first_10_s_then_at_most_one_line_per_10_s():
    clock = FakeClock()
    lines, written = _lines(clock)
    built: list[float] = []

    def text() -> str:
        built.append(clock.now)
        return "rank 0: warmup"

    for step in range(0, 451):  # 45 s of polls every 0.1 s
        clock.now = 100.0 + step / 10
        lines.line(text)
    assert written == [f"hwregress: test_scaling[cpu-tiny-w2]: {s} s: rank 0: warmup" for s in (10, 20, 30, 40)]
    assert built == [110.0, 120.0, 130.0, 140.0]  # the text is built only when a line is due


def test_polls_further_apart_than_the_interval_give_one_line_each():
    clock = FakeClock()
    lines, written = _lines(clock, "job")
    for now in (105.0, 125.0, 131.0, 160.0):
        clock.now = now
        lines.line(lambda: "x")
    assert written == ["hwregress: job: 25 s: x", "hwregress: job: 60 s: x"]  # 131 is 6 s after the line at 125


# -- the text ----------------------------------------------------------------------------------------------------
def test_job_line_from_a_fake_job_status_folder(tmp_path, monkeypatch):
    for rank, phase in ((0, "timed round 3 of 10"), (1, "warmup")):
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        write_status(tmp_path, rank, phase, device="cpu")
    now = time.time()
    assert progress.job_line(read_statuses(tmp_path), 2, 1, now) == "rank 0: timed round 3 of 10; rank 1: warmup"
    assert progress.job_line(read_statuses(tmp_path), 4, 1, now) == (
        "rank 0: timed round 3 of 10; rank 1: warmup; 2 of 4 local ranks not started yet (waiting for start-up)")


def test_job_line_groups_ranks_of_one_phase_and_names_a_silent_rank():
    now = 1000.0
    statuses = {rank: {"phase": "timed round 3 of 10", "time": now - 1} for rank in (0, 1, 2, 5)}
    statuses[3] = {"phase": "gathering", "time": now - 2}
    statuses[4] = {"phase": "timed round 2 of 10", "time": now - 42}
    statuses[6] = {"phase": "done", "time": now - 60}  # a finished rank is not silent
    assert progress.job_line(statuses, 7, 1, now) == (
        "ranks 0-2, 5: timed round 3 of 10; rank 3: gathering; rank 4: timed round 2 of 10 (no progress for 42 s); "
        "rank 6: done")


def test_job_line_before_any_rank_of_a_multi_node_job_waits_for_the_rendezvous():
    assert progress.job_line({}, 2, 2, 0.0) == (
        "2 of 2 local ranks not started yet (waiting for the rendezvous of every node)")


def test_stream_line_from_fake_counters():
    assert progress.stream_line(120, 100, 316) == "stream: 120 of 316 images produced, 100 predicted"


# -- the wait loops hand their state to the watcher --------------------------------------------------------------
def test_the_watchdog_hands_every_rank_status_to_the_watcher(tmp_path, monkeypatch):
    for rank, phase in ((0, "timed round 1 of 10"), (1, "warmup")):
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        write_status(tmp_path, rank, phase, time=time.time() + 600)  # fresh however slow this machine is
    spec = JobSpec("scaling", "cpu", 2, 1, 2, "run", str(tmp_path), timeout_s=60.0)
    clock = FakeClock()
    lines, written = _lines(clock, "job")
    seen: list[dict[int, dict[str, Any]]] = []
    watcher = lines.job(2, 1, now=lambda: time.time() + 600)

    def watch(statuses: dict[int, dict[str, Any]]) -> None:
        seen.append(statuses)
        clock.now += 10.0  # each poll a 10 s step of the fake clock
        watcher(statuses)

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"], start_new_session=True)
    try:
        assert launch._watch(process, spec, watch) is None
    finally:
        process.wait()
    assert seen and {r: s["phase"] for r, s in seen[-1].items()} == {0: "timed round 1 of 10", 1: "warmup"}
    assert written[0] == "hwregress: job: 10 s: rank 0: timed round 1 of 10; rank 1: warmup"


class _FakeQuery:
    """What :func:`hwregress.spark.stream._drain` asks of a StreamingQuery."""

    isActive = True

    def exception(self) -> None:
        return None

    def processAllAvailable(self) -> None:
        pass


class _FakeProgress:
    """A query that predicts 10 more images at each look."""

    def __init__(self) -> None:
        self.read = 0

    def rows(self) -> int:
        self.read = min(self.read + 10, 50)
        return self.read


def test_the_stream_drain_ticks_the_watcher_with_its_counters(monkeypatch):
    monkeypatch.setattr(stream.time, "sleep", lambda s: None)
    clock = FakeClock()
    lines, written = _lines(clock, "test_spark[cpu-tiny-stream]")
    watcher = lines.stream()
    fake = _FakeProgress()

    def tick() -> None:
        clock.now += 10.0
        watcher(50, fake.read, 50)

    stream._drain(_FakeQuery(), fake, 50, timeout_s=60.0, sink_ids=lambda: 0, tick=tick)
    assert written[0] == "hwregress: test_spark[cpu-tiny-stream]: 10 s: stream: 50 of 50 images produced, 10 predicted"
    assert len(written) == 4  # one per look before the query had read all 50


# -- who writes none ---------------------------------------------------------------------------------------------
def _config(quiet: bool = False, ini_quiet: bool = False, worker: bool = False) -> Any:
    class Reporter:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def write_line(self, line: str) -> None:
            self.lines.append(line)

    reporter = Reporter()
    plugins = {"terminalreporter": reporter}
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=plugins.get), stash=pytest.Stash(),
                             getoption=lambda name: quiet or None, getini=lambda name: ini_quiet, reporter=reporter)
    if worker:
        config.workerinput = {"workerid": "gw0"}
    return config


@pytest.mark.parametrize("kwargs", [{"quiet": True}, {"ini_quiet": True}, {"worker": True}],
                         ids=["--hwregress-quiet", "ini hwregress_quiet", "xdist worker"])
def test_no_live_lines_when_quiet_or_on_an_xdist_worker(kwargs):
    config = _config(**kwargs)
    progress.start(config)
    assert progress.live_lines(config, "job") is None


def test_no_live_lines_before_the_session_started_or_for_a_bare_stand_in_config():
    assert progress.live_lines(_config(), "job") is None  # start() never ran: nothing stashed
    assert progress.live_lines(SimpleNamespace(stash=pytest.Stash()), "job") is None  # a family's fake bench config


def test_live_lines_go_to_the_terminal_reporter():
    config = _config()
    progress.start(config)
    clock = FakeClock()
    lines = progress.live_lines(config, "job", clock)
    assert lines is not None
    clock.now += 10
    lines.line(lambda: "rank 0: warmup")
    assert config.reporter.lines == ["hwregress: job: 10 s: rank 0: warmup"]


def test_an_ini_quiet_that_is_neither_true_nor_false_names_the_ini_key():
    with pytest.raises(pytest.UsageError, match=r"ini option hwregress_quiet='maybe': use true or false"):
        progress.is_quiet(_config(ini_quiet="maybe"))

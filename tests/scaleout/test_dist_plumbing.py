"""The distributed plumbing with real parts but no launched job: ranks agreeing on the timing window (threads), the
driver's account of a ChildFailedError and its launch configuration, the session store of two nodes (threads on the
loopback), DDP's buckets on a one-rank gloo group, reaping a job's processes, faulthandler stack dumps, and the
watchdog's verdicts on status files."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from hwregress.measure.timing import Timing, TimingPlan, measure
from hwregress.scaleout import driver, launch
from hwregress.scaleout.ddp_window import ddp_buckets
from hwregress.scaleout.failure_text import describe_ranks, split_stack_dump
from hwregress.scaleout.job import JobSpec, status_path, write_status
from hwregress.scaleout.rank_timing import agree_on_max, max_over_ranks
from hwregress.scaleout.session_store import NodeMismatch, SessionStore, SessionStoreError
from hwregress.scaleout.topology import Topology

MISSING_ERROR_FILE = "/nonexistent/hwregress/error.json"  # a rank killed by a signal writes no error file


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _run_in_threads(*calls: Callable[[], Any], timeout_s: float = 30.0) -> list[Any]:
    """Run each call in a thread of its own; each one's return value, or the exception it raised."""
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except BaseException as error:  # the test asserts on it
            results[index] = error

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    assert not any(thread.is_alive() for thread in threads), f"a thread did not finish in {timeout_s} s"
    return results


# -- timing.measure: the ranks agree on the window ------------------------------------------------------
class ScriptedRoundTimer:
    """Runs each round's steps and reports scripted seconds for it: the first call is the calibration step."""

    def __init__(self, single_step_s: float, round_seconds: list[float]) -> None:
        self.script = [single_step_s, *round_seconds]

    def time_round(self, run_steps: Callable[[], None], steps: int) -> float:
        run_steps()
        return self.script.pop(0)


class MaxOverThreads:
    """``agree(value)`` for :func:`hwregress.measure.timing.measure` across threads, as ranks would all-reduce: every
    party's value meets at a barrier and each gets the maximum (the barrier's timeout turns a disagreement on how
    many decisions there are, which would hang real ranks, into an error)."""

    def __init__(self, parties: int) -> None:
        self.values: list[int | None] = [None] * parties
        self.barrier = threading.Barrier(parties, timeout=10)

    def agree_for(self, party: int) -> Callable[[int], int]:
        def agree(value: int) -> int:
            self.values[party] = value
            self.barrier.wait()
            agreed = max(v for v in self.values if v is not None)
            self.barrier.wait()  # nobody writes the next decision before every party has read this one
            return agreed
        return agree


PLAN = TimingPlan(warmup_steps=2, rounds=3, min_round_s=1.0, max_rel_iqr=0.10, budget_s=10.0)
QUIET = (0.25, [1.0] * 20)  # 0.25 s a step: 4 steps per round; steady rounds
NOISY = (0.5, [1.0, 3.0] * 10)  # 0.5 s a step: 2 steps per round; rounds noisy until the 10 s budget


def _measure_side(side: tuple[float, list[float]], agree: Callable[[int], int] | None) -> tuple[Timing, int]:
    """The timing of one side and how many steps it ran."""
    steps = []
    timing = measure(lambda: steps.append(1), ScriptedRoundTimer(side[0], list(side[1])), PLAN, agree=agree)
    return timing, len(steps)


def test_alone_the_two_sides_would_time_different_windows():
    quiet, _ = _measure_side(QUIET, None)
    noisy, _ = _measure_side(NOISY, None)
    assert (quiet.steps_per_round, noisy.steps_per_round) == (4, 2)
    assert quiet.extended_rounds == 0 and len(quiet.round_seconds) == 3
    assert noisy.extended_rounds == 3 and len(noisy.round_seconds) == 6  # 1+3+1+3+1+3 = 12 s > the 10 s budget


def test_agreeing_ranks_time_the_same_steps_and_rounds():
    agreement = MaxOverThreads(2)
    quiet_result, noisy_result = _run_in_threads(lambda: _measure_side(QUIET, agreement.agree_for(0)),
                                                 lambda: _measure_side(NOISY, agreement.agree_for(1)))
    assert not isinstance(quiet_result, BaseException) and not isinstance(noisy_result, BaseException), \
        (quiet_result, noisy_result)
    (quiet, quiet_steps), (noisy, noisy_steps) = quiet_result, noisy_result
    assert quiet.steps_per_round == noisy.steps_per_round == 4  # the larger choice
    assert len(quiet.round_seconds) == len(noisy.round_seconds) == 6  # the noisy side's extensions, on both
    assert quiet.extended_rounds == noisy.extended_rounds == 3
    # every round ran the agreed steps: warmup (2, the last one timed alone) + 6 rounds x 4
    assert quiet_steps == noisy_steps == 2 + 6 * 4
    assert quiet.stable and not noisy.stable  # each judges its own rounds


# -- the driver: failures and the launcher's configuration -------------------------------------------------
def _failure(local_rank: int, pid: int, exitcode: int, timestamp: int,
             error_file: str = MISSING_ERROR_FILE) -> ProcessFailure:
    failure = ProcessFailure(local_rank=local_rank, pid=pid, exitcode=exitcode, error_file=error_file)
    failure.timestamp = timestamp  # the launcher orders failures by it (whole seconds)
    return failure


def test_failures_of_lists_the_first_failure_first_with_its_signal():
    error = ChildFailedError("run_rank", {0: _failure(0, 4100, 1, timestamp=1_000_001),
                                          3: _failure(1, 4103, -9, timestamp=1_000_000)})
    killed, failed = driver.failures_of(error)
    assert {k: killed[k] for k in ("rank", "local_rank", "exitcode", "signal", "pid")} == \
        {"rank": 3, "local_rank": 1, "exitcode": -9, "signal": "SIGKILL", "pid": 4103}
    assert {k: failed[k] for k in ("rank", "local_rank", "exitcode", "signal", "pid")} == \
        {"rank": 0, "local_rank": 0, "exitcode": 1, "signal": None, "pid": 4100}
    assert "SIGKILL" in killed["message"] and isinstance(failed["message"], str)

    error = ChildFailedError("run_rank", {0: _failure(0, 4100, 1, timestamp=1_000_000),
                                          3: _failure(1, 4103, -9, timestamp=1_000_001)})
    assert [f["rank"] for f in driver.failures_of(error)] == [0, 3]


def _fail_deep(depth: int) -> None:
    if depth:
        _fail_deeper(depth - 1)  # alternating frames: a traceback prints every one (it folds repeated lines)
    raise RuntimeError("boom on rank 0")


def _fail_deeper(depth: int) -> None:
    _fail_deep(depth)


def test_failures_of_keeps_the_error_that_record_wrote_after_a_long_traceback(tmp_path, monkeypatch):
    from torch.distributed.elastic.multiprocessing.errors.error_handler import ErrorHandler

    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    try:
        _fail_deep(30)  # a traceback of several thousand characters, like a rank's
    except RuntimeError as error:
        ErrorHandler().record_exception(error)
    assert len(json.loads(error_file.read_text())["message"]["extraInfo"]["py_callstack"]) > 4000
    (failure,) = driver.failures_of(ChildFailedError("run_rank", {0: _failure(0, 4100, 1, 0, str(error_file))}))
    assert "RuntimeError: boom on rank 0" in failure["message"] and len(failure["message"]) <= 2000


def test_the_launch_config_is_one_attempt_with_a_c10d_rendezvous(tmp_path):
    spec = JobSpec("scaling", "cpu", 4, 2, 2, "hwregress-abc", str(tmp_path), timeout_s=42.0)
    config = driver.launch_config(spec, "127.0.0.1:0", True)
    assert config.max_restarts == 0 and config.rdzv_backend == "c10d" and config.rdzv_endpoint == "127.0.0.1:0"
    assert config.nproc_per_node == 2 and config.min_nodes == config.max_nodes == 2 and config.run_id == "hwregress-abc"
    assert config.rdzv_configs["is_host"] is True
    assert config.rdzv_configs["join_timeout"] == config.rdzv_configs["read_timeout"] == 42
    assert config.start_method == "spawn" and config.monitor_interval == driver.MONITOR_INTERVAL_S
    assert Path(config.logs_specs.root_log_dir) == tmp_path / "logs"
    assert driver.launch_config(spec, "10.0.0.1:29501", False).rdzv_configs["is_host"] is False


# -- the session store of two nodes ------------------------------------------------------------------------
def _node(port: int, node_rank: int, jobs: list[tuple[str, dict[str, Any]]], opened: list[SessionStore]) -> list[str]:
    """One node's session: open the store and check in for each job in turn; the run ids."""
    store = SessionStore(Topology(2, node_rank, f"127.0.0.1:{port}"), timeout_s=2.0)
    opened.append(store)  # kept by the test: node 0's store must outlive node 1's last read
    return [store.begin_job(test_id, agreement) for test_id, agreement in jobs]


def test_two_nodes_get_the_same_run_id_for_each_job():
    port, opened = _free_port(), []
    jobs = [("test_scaling[w2]", {"world_size": 2}), ("test_scaling[w4]", {"world_size": 4})]
    node0, node1 = _run_in_threads(lambda: _node(port, 0, jobs, opened), lambda: _node(port, 1, jobs, opened))
    assert isinstance(node0, list) and node0 == node1, (node0, node1)
    assert len(set(node0)) == 2 and all(run_id.startswith("hwregress-") for run_id in node0)


def test_node_0_reads_the_outcome_each_other_node_reported_for_the_job():
    port, opened = _free_port(), []
    job = ("test_scaling[w2]", {"world_size": 2})
    oom = {"ok": False, "kind": "oom", "error": "out of memory on rank 3 (cuda:1)"}

    def node0() -> list[dict[int, dict[str, Any]]]:
        store = SessionStore(Topology(2, 0, f"127.0.0.1:{port}"), timeout_s=2.0)
        opened.append(store)
        store.begin_job(*job)
        reported = store.other_outcomes(wait_s=10.0)
        store.begin_job(*job)
        started = time.monotonic()
        silent = store.other_outcomes(wait_s=0.3)  # node 1 reports nothing for the second job
        assert 0.3 <= time.monotonic() - started < 3
        return [reported, silent]

    def node1() -> None:
        store = SessionStore(Topology(2, 1, f"127.0.0.1:{port}"), timeout_s=2.0)
        opened.append(store)
        store.begin_job(*job)
        store.report_outcome(oom)
        store.begin_job(*job)

    outcomes, failure = _run_in_threads(node0, node1)
    assert failure is None and outcomes == [{1: oom}, {}]


@pytest.mark.parametrize(("other_job", "named"), [
    (("test_scaling[w8]", {"world_size": 2}), "test: node 0 runs test_scaling[w2], this node test_scaling[w8]"),
    (("test_scaling[w2]", {"world_size": 4}), "world_size: node 0 2, this node 4"),
])
def test_a_node_running_another_job_stops_both_nodes_naming_the_difference(other_job, named):
    port, opened = _free_port(), []
    same = ("test_ceilings[allreduce]", {"world_size": 2})
    node0, node1 = _run_in_threads(lambda: _node(port, 0, [same, ("test_scaling[w2]", {"world_size": 2})], opened),
                                   lambda: _node(port, 1, [same, other_job], opened))
    assert isinstance(node1, NodeMismatch) and "job 2 of the session differs" in str(node1) and named in str(node1)
    assert isinstance(node0, NodeMismatch) and named in str(node0)  # told by node 1, not left waiting


def test_a_node_without_node_0_gives_up_naming_the_endpoint():
    port = _free_port()
    started = time.monotonic()
    with pytest.raises(SessionStoreError, match=f"node 1 could not reach node 0 at --rdzv-endpoint=127.0.0.1:{port}"):
        SessionStore(Topology(2, 1, f"127.0.0.1:{port}"), timeout_s=0.2)
    # the store's timeout is 3 x 0.2 s; torch's client tries twice, with a back-off of 1 to 2 s between
    assert time.monotonic() - started < 5


# -- one rank of gloo in this process --------------------------------------------------------------------
@pytest.fixture
def gloo_world_of_one() -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_ddp_buckets_count_every_gradient_byte_after_the_rebuild(gloo_world_of_one):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)  # ~10 KB: several buckets
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    # DDP rebuilds its buckets in the second forward, and its logging data shows them from the third on
    for _ in range(3):
        optimizer.zero_grad()
        ddp(torch.randn(4, 64)).sum().backward()
        optimizer.step()
    buckets = ddp_buckets(ddp)
    assert buckets["allreduce_bytes_per_step"] == 4 * sum(p.numel() for p in model.parameters())  # fp32
    rebuilt = ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"]
    assert buckets["buckets"] == len(rebuilt.split(",")) >= 2  # the rebuilt buckets, not the first iteration's one
    assert buckets["bucket_cap_bytes"] == int(0.01 * 1024 * 1024)


def test_the_maximum_over_one_rank_is_its_own_value(gloo_world_of_one):
    assert max_over_ranks(3.5, "cpu", torch.float64) == 3.5
    assert agree_on_max("cpu")(7) == 7 and isinstance(agree_on_max("cpu")(7), int)


# -- ending a job's processes ------------------------------------------------------------------------------
GRANDCHILD = """
import os, signal, sys, time
if sys.argv[2] == "own-session":
    os.setsid()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""
# in the driver's group the grandchild drops the job's token (only the group's SIGKILL reaches it); in a session
# of its own it keeps the token (only the token sweep reaches it)
FAKE_DRIVER = f"""
import os, subprocess, sys, time
environment = dict(os.environ)
if sys.argv[2] == "driver-session":
    del environment[{launch.JOB_VARIABLE!r}]
subprocess.Popen([sys.executable, "-c", {GRANDCHILD!r}, *sys.argv[1:]], env=environment)
time.sleep(60)
"""


def _ended(pid: int) -> bool:
    """Gone, or a zombie (dead; its parent, init once the driver died, has not reaped it yet)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_for_file(path: Path, timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout_s} s"
        time.sleep(0.02)
    return path.read_text()


def _start_driver(code: str, token: str, *args: str, **popen: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code, *args], start_new_session=True,
                            env={**os.environ, launch.JOB_VARIABLE: token}, **popen)


@pytest.mark.parametrize("session", ["driver-session", "own-session"])
def test_end_job_ends_the_driver_and_a_grandchild_that_ignores_sigterm(tmp_path, session):
    token = f"selftest/{uuid.uuid4().hex}"
    pid_file = tmp_path / "grandchild.pid"
    process = _start_driver(FAKE_DRIVER, token, str(pid_file), session)
    grandchild = None
    try:
        grandchild = int(_wait_for_file(pid_file))
        carrying_the_token = {p.pid for p in launch.job_processes(token)}
        if session == "own-session":
            assert os.getpgid(grandchild) != process.pid and {process.pid, grandchild} <= carrying_the_token
        else:
            assert os.getpgid(grandchild) == process.pid and grandchild not in carrying_the_token
        started = time.monotonic()
        launch.end_job(process, token, grace_s=1)
        assert time.monotonic() - started < 10
        assert process.returncode is not None and _ended(process.pid)
        deadline = time.monotonic() + 0.5  # a SIGKILLed process may take a moment to exit
        while not _ended(grandchild) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _ended(grandchild)
        assert launch.job_processes(token) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if grandchild is not None and not _ended(grandchild):
            os.kill(grandchild, signal.SIGKILL)


# -- stack dumps -------------------------------------------------------------------------------------------
STALLED_RANK = """
import faulthandler, signal, sys, threading, time
faulthandler.register(signal.SIGUSR1, all_threads=True)
def background_loader():
    time.sleep(60)
threading.Thread(target=background_loader, daemon=True).start()
def waiting_for_a_peer_in_allreduce():
    print("step 7 ok", file=sys.stderr, flush=True)
    print("ready", flush=True)
    time.sleep(60)
waiting_for_a_peer_in_allreduce()
"""


def _start_stalled_rank(stderr_log: Path) -> subprocess.Popen[bytes]:
    """A process that dumps every thread's stack to ``stderr_log`` on SIGUSR1, once it has printed ``ready``."""
    stderr_log.parent.mkdir(parents=True, exist_ok=True)
    with open(stderr_log, "wb") as log:
        process = subprocess.Popen([sys.executable, "-c", STALLED_RANK], stdout=subprocess.PIPE, stderr=log)
    assert process.stdout is not None and process.stdout.readline() == b"ready\n"
    return process


def _wait_for_dump(path: Path, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while "<module>" not in (text := path.read_text()):  # the main thread's outermost frame, dumped last
        assert time.monotonic() < deadline, f"no stack dump in {path}: {text!r}"
        time.sleep(0.02)
    return text


def _stderr_log(out: Path, local_rank: int) -> Path:
    return out / "logs" / "run_x" / "attempt_0" / str(local_rank) / "stderr.log"


def test_a_faulthandler_dump_splits_into_the_main_threads_frames_and_the_lines_before(tmp_path):
    log = _stderr_log(tmp_path, 0)
    rank = _start_stalled_rank(log)
    try:
        rank.send_signal(signal.SIGUSR1)
        text = _wait_for_dump(log)
    finally:
        rank.kill()
        rank.wait()
    frames, before = split_stack_dump(text)
    assert "in waiting_for_a_peer_in_allreduce" in frames[0] and "in <module>" in frames[1]
    assert all(line.lstrip().startswith("File ") for line in frames)
    assert not any("background_loader" in line for line in frames)  # the other thread's stack, dumped first
    assert before == ["step 7 ok"]

    statuses = {0: {"phase": "timed round 2 of 10", "pid": rank.pid, "device": "cpu", "time": time.time() - 40,
                    "local_rank": 0}}
    described = describe_ranks(JobSpec("scaling", "cpu", 1, 1, 1, "run", str(tmp_path)), statuses, [0])
    assert f"rank 0 (pid {rank.pid}, cpu): last at 'timed round 2 of 10' 40 s ago" in described
    assert "in waiting_for_a_peer_in_allreduce" in described and "[stderr] step 7 ok" in described


def test_text_without_a_dump_is_all_lines_before():
    assert split_stack_dump("loading\n\n  step 7 ok\n") == ([], ["loading", "  step 7 ok"])
    assert split_stack_dump("") == ([], [])


# -- the watchdog's verdicts -------------------------------------------------------------------------------
@pytest.fixture
def fake_driver() -> Iterator[subprocess.Popen[bytes]]:
    token = f"selftest/{uuid.uuid4().hex}"
    process = _start_driver("import time; time.sleep(20)", token)  # a watchdog without a verdict fails in 20 s
    try:
        yield process
    finally:
        launch.end_job(process, token, grace_s=1)


def _spec(out: Path) -> JobSpec:
    return JobSpec("scaling", "cpu", 2, 1, 2, "run", str(out), timeout_s=1.0)


def test_the_watchdog_names_the_rank_without_progress_with_its_dumped_stack(tmp_path, monkeypatch, fake_driver):
    spec = _spec(tmp_path)
    monkeypatch.setenv("LOCAL_RANK", "0")
    # a heartbeat that stays fresh however slow this machine is (a stale one would be sent the dump signal, and
    # write_status records this process's pid)
    write_status(tmp_path, 0, "timed round 2 of 10", device="cpu", time=time.time() + 600)
    rank = _start_stalled_rank(_stderr_log(tmp_path, 1))
    try:
        status_path(tmp_path, 1).write_text(json.dumps({"rank": 1, "phase": "timed round 2 of 10", "pid": rank.pid,
                                                        "time": time.time() - 30, "local_rank": 1, "device": "cpu"}))
        started = time.monotonic()
        verdict = launch._watch(fake_driver, spec)
        elapsed = time.monotonic() - started
    finally:
        rank.kill()
        rank.wait()
    assert verdict is not None and verdict.startswith("no progress for 1 s (--dist-timeout) on rank(s) 1;"), verdict
    assert elapsed < 5  # its first look, then a second for the stack dump
    assert re.search(r"last at 'timed round 2 of 10' 3[01] s ago", verdict)  # 30 s old, then the dump's second
    assert "in waiting_for_a_peer_in_allreduce" in verdict and "[stderr] step 7 ok" in verdict  # the dump asked for
    assert fake_driver.poll() is None  # ending the job is end_job's work


def test_the_watchdog_ends_a_launcher_that_outlives_its_finished_ranks(tmp_path, monkeypatch, fake_driver):
    for rank in (0, 1):
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        write_status(tmp_path, rank, "done")
    (tmp_path / "driver.log").write_text("agent: waiting for workers to exit\n")
    started = time.monotonic()
    verdict = launch._watch(fake_driver, _spec(tmp_path))
    elapsed = time.monotonic() - started
    assert (verdict is not None
            and verdict.startswith("every local rank finished but the launcher did not end within 1 s"))
    assert "agent: waiting for workers to exit" in verdict
    assert 1.0 <= elapsed < 5


def test_one_finished_rank_of_two_is_not_a_finished_job(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    write_status(tmp_path, 0, "done")  # local rank 1 has not reported yet (its start-up grace is a minute)
    token = f"selftest/{uuid.uuid4().hex}"
    process = _start_driver("import time; time.sleep(2.5)", token)  # longer than the 1 s timeout, then it ends
    try:
        assert launch._watch(process, _spec(tmp_path)) is None
    finally:
        launch.end_job(process, token, grace_s=1)


def test_the_watchdog_has_no_verdict_on_a_driver_that_ends_by_itself(tmp_path):
    process = _start_driver("pass", f"selftest/{uuid.uuid4().hex}")
    try:
        assert launch._watch(process, _spec(tmp_path)) is None
    finally:
        process.wait()

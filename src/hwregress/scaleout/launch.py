"""Start one job on this node and watch it from the pytest process: the elastic agent runs in a driver process
of its own session (:mod:`hwregress.scaleout.driver`); a rank that dies ends the job through the agent, a rank that
stops making progress for ``timeout_s`` ends it here. Either way every process of the job is ended and reaped
before this returns, and the error names the rank, its exit code, where it was and its last output lines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hwregress.scaleout.failure_text import describe_failures, describe_ranks, driver_tail
from hwregress.scaleout.job import STACK_DUMP_SIGNAL, JobSpec, driver_path, read_statuses, result_path
from hwregress.scaleout.topology import Topology

# every process this node starts for a job carries a token of its own (not the run id: on one machine, two
# nodes' sessions share the run id and must not end each other's processes): how stragglers are found and ended
JOB_VARIABLE = "HWREGRESS_JOB"
# the pid of the process that launched the job (the pytest worker): the root of what each rank's health counts as "us"
JOB_OWNER_VARIABLE = "HWREGRESS_JOB_OWNER_PID"
STARTUP_GRACE_S = 60.0  # interpreter start, imports and the rendezvous, before a rank's first heartbeat counts
POLL_S = 0.2


class DistributedJobError(Exception):
    """A job did not deliver its result; the message says which rank, how and where."""


class RankFailed(DistributedJobError):
    """A rank exited with an error or was killed."""


class JobHung(DistributedJobError):
    """A rank made no progress for the job's timeout; the job was ended."""


class RankOutOfMemory(DistributedJobError):
    """A rank ran out of memory ("out of memory on rank 1 (cuda:1): ...")."""


def run_job(spec: JobSpec, topology: Topology,
            watch: Callable[[dict[int, dict[str, Any]]], None] | None = None) -> dict[str, Any]:
    """Run ``spec`` on this node's ranks and return the gathered result: ``{"ranks": [per-rank dict, ...]}`` sorted
    by global rank (the keys are the job kind's, see :mod:`hwregress.scaleout.ddp_window` and siblings). ``watch``, if
    given, is called with every rank's last status at each poll of the wait (the live lines of
    :mod:`hwregress.plugin.progress`).

    Raises:
        RankOutOfMemory: a rank's allocation failed.
        RankFailed: a rank exited non-zero or by a signal, or the launcher failed (rendezvous); names the rank.
        JobHung: no progress on some rank for ``spec.timeout_s`` seconds; names the ranks and where each was.
    """
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    job_path = spec.write()
    command = [sys.executable, "-m", "hwregress.scaleout.driver", str(job_path), "--endpoint", topology.job_endpoint(),
               "--is-host", "1" if topology.writes_records else "0"]
    token = f"{spec.run_id}/node{topology.node_rank}/{uuid.uuid4().hex[:8]}"
    with open(out / "driver.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                   env=_environment(spec, topology, token))
        try:
            hang = _watch(process, spec, watch)
        finally:
            end_job(process, token)
    if hang:
        raise JobHung(hang)
    return _outcome(spec, process.returncode)


def _environment(spec: JobSpec, topology: Topology, token: str) -> dict[str, str]:
    path = os.pathsep.join([*spec.sys_path, os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)
    return {**os.environ, JOB_VARIABLE: token, JOB_OWNER_VARIABLE: str(os.getpid()),
            "HWREGRESS_NODE_RANK": str(topology.node_rank), "PYTHONPATH": path}


def job_owner() -> Any | None:
    """The process that launched this job (a psutil process): the pytest worker whose pid :func:`run_job` put in
    ``HWREGRESS_JOB_OWNER_PID``; None without the variable, or when that pid is no longer an ancestor of this
    process (it ended and the pid was reused)."""
    import psutil

    try:
        owner = psutil.Process(int(os.environ[JOB_OWNER_VARIABLE]))
        descendants = {child.pid for child in owner.children(recursive=True)}
    except (KeyError, ValueError, psutil.Error):
        return None
    return owner if os.getpid() in descendants else None


def _watch(process: subprocess.Popen[bytes], spec: JobSpec,
           watch: Callable[[dict[int, dict[str, Any]]], None] | None = None) -> str | None:
    """Wait for the driver; None when it ended by itself, else why the job was declared hung: a rank without
    progress for the timeout (its stack is dumped into its log first), no rank at all after the timeout and a
    start-up grace, or a launcher that lingers for the timeout after every local rank finished."""
    started = time.monotonic()
    all_done_at: float | None = None
    while process.poll() is None:
        time.sleep(POLL_S)
        statuses = read_statuses(spec.out_dir)
        if watch is not None:
            watch(statuses)
        stalled = stalled_ranks(statuses, time.time(), spec.timeout_s)
        if stalled:
            dump_stacks(statuses, stalled)
            return (f"no progress for {spec.timeout_s:g} s (--dist-timeout) on rank(s) "
                    f"{', '.join(str(r) for r in stalled)}; the job was ended. Where each was (its phase, then its "
                    "stack and last output lines):\n" + describe_ranks(spec, read_statuses(spec.out_dir), stalled))
        elapsed = time.monotonic() - started
        if len(statuses) < spec.ranks_per_node and elapsed > spec.timeout_s + STARTUP_GRACE_S:
            waiting = "the other nodes to join the rendezvous" if spec.nnodes > 1 else "the ranks to start"
            return (f"waited {elapsed:.0f} s for {waiting} ({len(statuses)} of {spec.ranks_per_node} local ranks "
                    f"reported); the job was ended. " + driver_tail(spec))
        every_rank_done = statuses and all(s.get("phase") == "done" for s in statuses.values())
        if every_rank_done and len(statuses) >= spec.ranks_per_node:
            all_done_at = all_done_at or time.monotonic()
            if time.monotonic() - all_done_at > spec.timeout_s:
                return (f"every local rank finished but the launcher did not end within {spec.timeout_s:g} s; the job "
                        "was ended. " + driver_tail(spec))
    return None


def dump_stacks(statuses: dict[int, dict[str, Any]], ranks: list[int], wait_s: float = 1.0) -> None:
    """Ask each of ``ranks`` to write every thread's stack to its stderr log (``faulthandler`` on
    :data:`hwregress.scaleout.job.STACK_DUMP_SIGNAL`), and give them ``wait_s`` to do it."""
    for rank in ranks:
        try:
            os.kill(int(statuses[rank]["pid"]), STACK_DUMP_SIGNAL)
        except (KeyError, ValueError, ProcessLookupError, PermissionError):
            continue
    time.sleep(wait_s)


def stalled_ranks(statuses: dict[int, dict[str, Any]], now: float, timeout_s: float) -> list[int]:
    """Ranks whose last heartbeat is older than ``timeout_s`` and that have not finished (``done``, ``failed``,
    ``oom``), by rank."""
    finished = ("done", "failed", "oom")
    return sorted(rank for rank, status in statuses.items()
                  if status.get("phase") not in finished and now - float(status.get("time", now)) > timeout_s)


def end_job(process: subprocess.Popen[bytes], token: str, grace_s: float = 5.0) -> None:
    """End the driver's process group (the agent and its spawned ranks) with SIGTERM, then SIGKILL after
    ``grace_s``; then any process still carrying the job's ``token`` in its environment (a rank that left the
    group); reap."""
    if process.poll() is None:
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(process.pid, signal.SIGKILL)
    process.wait()
    for straggler in job_processes(token):
        try:
            straggler.kill()
            straggler.wait(grace_s)
        except Exception:  # psutil.NoSuchProcess (already gone) or TimeoutExpired: nothing more can be done
            pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the driver leads its own session: its group id is its pid
    except (ProcessLookupError, PermissionError):
        pass


def job_processes(token: str) -> list[Any]:
    """This user's processes whose environment carries ``HWREGRESS_JOB=token`` (psutil processes)."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid"]):
        try:
            if process.pid != os.getpid() and process.environ().get(JOB_VARIABLE) == token:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def _outcome(spec: JobSpec, returncode: int | None) -> dict[str, Any]:
    statuses = read_statuses(spec.out_dir)
    for rank, status in sorted(statuses.items()):
        if status.get("phase") == "oom":
            raise RankOutOfMemory(f"out of memory on rank {rank} ({status.get('device')}): {status.get('error')}")
    driver = _read_json(driver_path(spec.out_dir))
    if returncode == 0 and driver.get("ok"):
        if result_path(spec.out_dir).exists():
            return _read_json(result_path(spec.out_dir))
        raise RankFailed(f"every rank ended without error but no result was written to {result_path(spec.out_dir)} "
                         "(local rank 0 writes it after gathering); " + driver_tail(spec))
    if driver.get("failures"):
        raise RankFailed(describe_failures(spec, driver["failures"], statuses))
    raise RankFailed(f"the launcher failed (exit code {returncode}): {driver.get('error') or 'no report'}. Check that "
                     "the rendezvous endpoint is reachable and its port free. " + driver_tail(spec))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}

"""What a job runs, as a JSON file every rank reads, and where its ranks report (status, result)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwregress.store.atomic import atomic_write_json

KINDS = ("scaling", "allreduce", "colocated")
STACK_DUMP_SIGNAL = signal.SIGUSR1  # a rank's faulthandler writes every thread's stack to its stderr log on it


@dataclass(frozen=True)
class JobSpec:
    """One distributed job.

    Attributes:
        kind: ``scaling`` (DDP training over the world), ``allreduce`` (bus bandwidth sweep) or ``colocated``
            (independent training processes sharing one device, measured at the same time).
        device_kind: ``cpu`` (gloo) or ``cuda`` (NCCL; local rank r uses ``cuda:r``; co-located processes all use
            ``device``).
        world_size: ranks in the job, over every node.
        nnodes: nodes taking part.
        ranks_per_node: ranks this node starts.
        run_id: the rendezvous id, the same on every node.
        out_dir: this node's folder of the job (status and result files, the ranks' logs).
        models: the workloads: scaling reads the first (every rank trains it); colocated, one per process, by rank.
        batch_size: per rank (samples); for ``allreduce`` unused.
        dtype: numerics (:mod:`hwregress.measure.precision.numerics`).
        plan: :class:`hwregress.measure.timing.TimingPlan` fields.
        threads_per_rank: torch intra-op threads of each rank on the CPU (None: torch's default).
        timeout_s: a rank without progress for this long ends the job (``--dist-timeout``); the rendezvous waits as
            long for the other nodes, collectives twice as long.
        message_sizes: bytes per all-reduce message, ascending (``allreduce``).
        profile_steps: steps of the profiled window that measures the communication share (0: none).
        device: the device of a co-located job (``cuda:0``, ``cpu``).
        devices: this node's GPUs for a CUDA job's local ranks, in local-rank order (``--devices``).
        cudnn_benchmark: ``torch.backends.cudnn.benchmark`` in every rank (``--cudnn-benchmark``).
        telemetry_interval_s: each rank samples its device's telemetry this often over its window (s).
        workload_modules: modules that register workloads of the user's own (``--workloads``), imported by each rank.
        sys_path: the pytest process's import path, so ranks import what it imports.
        verdict: the terms of the looks a judged window takes against the baseline
            (:func:`hwregress.judge.window_verdict.window_terms`), or None (nothing to judge against).
    """

    kind: str
    device_kind: str
    world_size: int
    nnodes: int
    ranks_per_node: int
    run_id: str
    out_dir: str
    models: list[str] = field(default_factory=list)
    batch_size: int = 1
    dtype: str = "fp32"
    plan: dict[str, Any] = field(default_factory=dict)
    threads_per_rank: int | None = None
    timeout_s: float = 300.0
    message_sizes: list[int] = field(default_factory=list)
    profile_steps: int = 3
    device: str = "cpu"
    devices: list[str] = field(default_factory=list)
    cudnn_benchmark: bool = True
    telemetry_interval_s: float = 0.1
    workload_modules: list[str] = field(default_factory=list)
    sys_path: list[str] = field(default_factory=list)
    verdict: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown job kind {self.kind!r}; one of {', '.join(KINDS)}")
        if self.world_size != self.nnodes * self.ranks_per_node:
            raise ValueError(f"world size {self.world_size} != {self.nnodes} nodes x "
                             f"{self.ranks_per_node} ranks per node")
        if self.device_kind == "cuda" and self.kind != "colocated" and len(self.devices) < self.ranks_per_node:
            raise ValueError(f"{self.ranks_per_node} ranks on this node need as many GPUs, got {self.devices}")

    @property
    def backend(self) -> str:
        """NCCL for data-parallel jobs on CUDA, gloo otherwise (co-located processes only meet at a barrier)."""
        return "nccl" if self.device_kind == "cuda" and self.kind != "colocated" else "gloo"

    def agreement(self) -> dict[str, Any]:
        """What every node of a job must agree on (the same collectives in the same order): every field but this
        node's own (run id, folder, GPUs, threads, import path, and the verdict terms: each node reads its own
        baselines file, and the ranks agree on every extension of the window through a collective anyway)."""
        own = {"run_id", "out_dir", "devices", "device", "threads_per_rank", "sys_path", "verdict"}
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in own}

    def write(self) -> Path:
        """Write the spec to ``out_dir/job.json`` (atomically) and return the path."""
        path = Path(self.out_dir) / "job.json"
        atomic_write_json(path, dataclasses.asdict(self))
        return path

    @classmethod
    def read(cls, path: Path) -> JobSpec:
        """The spec written by :meth:`write`.

        Raises:
            ValueError: the file is not a job spec (names the file and the field).
        """
        data = json.loads(Path(path).read_text())
        try:
            return cls(**data)
        except TypeError as error:
            raise ValueError(f"{path}: not a hwregress job spec ({error})") from None


def status_path(out_dir: str | Path, rank: int) -> Path:
    """Where rank ``rank`` writes its progress (its heartbeat, see :func:`write_status`)."""
    return Path(out_dir) / f"rank-{rank}.status.json"


def result_path(out_dir: str | Path) -> Path:
    """Where rank 0 writes the job's gathered result (and every node's local rank 0 a copy for its session)."""
    return Path(out_dir) / "result.json"


def driver_path(out_dir: str | Path) -> Path:
    """Where the driver writes how the launcher ended (the failed ranks and their exit codes)."""
    return Path(out_dir) / "driver.json"


def write_status(out_dir: str | Path, rank: int, phase: str, **extra: Any) -> None:
    """Record rank ``rank``'s phase (``"timed round 3"``, ``"done"``, ``"failed"``, ``"oom"``) with its pid, local
    rank and the time; every write is a heartbeat the watchdog of :mod:`hwregress.scaleout.launch` reads."""
    payload = {"rank": rank, "phase": phase, "pid": os.getpid(), "time": time.time(),
               "local_rank": int(os.environ.get("LOCAL_RANK", rank)), **extra}
    atomic_write_json(status_path(out_dir, rank), payload)


def read_statuses(out_dir: str | Path) -> dict[int, dict[str, Any]]:
    """Every rank's last status, by rank (a file caught mid-replace is skipped: the next read sees it)."""
    statuses: dict[int, dict[str, Any]] = {}
    for path in Path(out_dir).glob("rank-*.status.json"):
        try:
            status = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        statuses[int(status["rank"])] = status
    return statuses

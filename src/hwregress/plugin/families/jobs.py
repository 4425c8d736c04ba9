"""The distributed jobs of the families that launch ranks (``scaling``, ``colocated`` and the ``allreduce`` ceiling):
build a job for the test, run it (:mod:`hwregress.scaleout.launch`), turn its ranks' reports into the test's record,
and a failed, hung or out-of-memory rank into the test's verdict.

On several nodes every node's session runs the job; node 0's records the figures, the others record that they
took part (a ``skipped`` record that names the job)."""

from __future__ import annotations

import dataclasses
import sys
import uuid
from typing import Any, NoReturn

import pytest

from hwregress.hardware.facts import device_kind
from hwregress.plugin import progress
from hwregress.plugin.context import BenchContext
from hwregress.plugin.matrix import node_gpus
from hwregress.plugin.record import fail_with, skip_with
from hwregress.plugin.xdist import holding_devices, session_temp
from hwregress.scaleout.job import JobSpec
from hwregress.scaleout.launch import DistributedJobError, RankOutOfMemory, run_job
from hwregress.scaleout.session_store import NodeMismatch, SessionStore, SessionStoreError
from hwregress.scaleout.topology import Topology, ranks_per_node, threads_per_rank
from hwregress.store.assembly import put_measured
from hwregress.store.atomic import safe_file_name
from hwregress.store.figures import LookFigures
from hwregress.store.measured import MeasuredFigures, energy_figures
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict
from hwregress.summary import summarize

SESSION_STORE_KEY = pytest.StashKey[SessionStore]()


class DistributedJobs:
    """Runs one test's distributed jobs for its family."""

    def __init__(self, bench: BenchContext) -> None:
        self.bench = bench
        self.settings = bench.settings
        self.topology: Topology = bench.settings.topology

    def ranks_per_node_of(self, world_size: int, device: str) -> int:
        """The ranks of a ``world_size`` job on each node; a size the nodes or the selected GPUs cannot hold skips the
        test as ``unsupported``."""
        try:
            per_node = ranks_per_node(world_size, self.topology.nnodes)
        except ValueError as error:
            skip_with(Verdict.UNSUPPORTED, str(error))
        if device_kind(device) == "cuda":
            gpus = node_gpus(self.settings.selection)
            if per_node > len(gpus):
                skip_with(Verdict.UNSUPPORTED, f"world size {world_size} needs {per_node} GPUs on each of "
                                               f"{self.topology.nnodes} node(s); {len(gpus)} selected and visible here "
                                               f"({', '.join(gpus) or 'none'}; see --devices)")
        return per_node

    def spec(self, kind: str, device: str, world_size: int, per_node: int, models: list[str], batch_size: int,
             dtype: str, nnodes: int | None = None, threads: int | None = None) -> JobSpec:
        """The job without its run id and folder (:meth:`launch` gives them)."""
        gpus = node_gpus(self.settings.selection)
        on_gpus = device_kind(device) == "cuda" and kind != "colocated"
        return JobSpec(kind=kind, device_kind=device_kind(device), world_size=world_size,
                       nnodes=nnodes or self.topology.nnodes, ranks_per_node=per_node, run_id="", out_dir="",
                       models=models, batch_size=batch_size, dtype=dtype, plan=dataclasses.asdict(self.settings.plan),
                       # each rank a share of the cores, GPU ranks too (torchrun sets OMP_NUM_THREADS=1 likewise)
                       threads_per_rank=threads or threads_per_rank(per_node),
                       timeout_s=self.settings.dist_timeout_s, profile_steps=self.settings.profile_steps, device=device,
                       devices=[device, *(g for g in gpus if g != device)][:per_node] if on_gpus else [],
                       cudnn_benchmark=self.settings.cudnn_benchmark,
                       telemetry_interval_s=self.settings.telemetry_interval_s,
                       workload_modules=list(self.settings.workload_modules), sys_path=list(sys.path))

    def launch(self, record: TestRecord, spec: JobSpec, joint: bool) -> tuple[JobSpec, list[dict[str, Any]]]:
        """Give ``spec`` its run id (on several nodes, when ``joint``, node 0's, after every node checked in with the
        same job) and folder; run it holding its GPUs; return the spec as run and its ranks' reports."""
        together = joint and self.topology.multi_node
        run_id = self._check_in(spec) if together else f"hwregress-{uuid.uuid4().hex[:12]}"
        folder = (session_temp(self.bench.request) / "hwregress-jobs"
                  / f"{safe_file_name(self.bench.item.name, 80)}-{run_id}")
        spec = dataclasses.replace(spec, run_id=run_id, out_dir=str(folder))
        with holding_devices(self.bench.request, [d for d in spec.devices if d != record.device]):
            if not together:
                return spec, self._run(spec, Topology())["ranks"]
            return spec, self._run_joint(spec)["ranks"]

    def _check_in(self, spec: JobSpec) -> str:
        lines = progress.live_lines(self.bench.config, self.bench.item.name)
        watch = None if lines is None else lines.nodes()
        try:
            return self._session_store().begin_job(self.bench.item.nodeid, spec.agreement(), watch)
        except (NodeMismatch, SessionStoreError) as error:
            pytest.fail(f"{type(error).__name__}: {error}", pytrace=False)

    def _session_store(self) -> SessionStore:
        stash = self.bench.config.stash
        if SESSION_STORE_KEY not in stash:
            try:
                stash[SESSION_STORE_KEY] = SessionStore(self.topology, self.settings.dist_timeout_s)
            except SessionStoreError as error:
                pytest.fail(f"SessionStoreError: {error}", pytrace=False)
        return stash[SESSION_STORE_KEY]

    def _run(self, spec: JobSpec, topology: Topology) -> dict[str, Any]:
        """Run ``spec``; a rank out of memory skips the test as ``oom``, any other failure fails it with the rank."""
        try:
            return run_job(spec, topology, self._watcher(spec))
        except RankOutOfMemory as error:
            skip_with(Verdict.OOM, str(error))
        except DistributedJobError as error:
            fail_with(f"{type(error).__name__}: {error}\n(job folder, with every rank's log: {spec.out_dir})")

    def _run_joint(self, spec: JobSpec) -> dict[str, Any]:
        """Run one node's part of a job over several nodes; every node posts its outcome to the session store, and a
        failure on node 0 (which writes the record) names what the other nodes saw: their own ranks' errors, an
        out-of-memory there makes the test ``oom``."""
        store = self._session_store()
        try:
            result = run_job(spec, self.topology, self._watcher(spec))
        except DistributedJobError as error:
            kind = "oom" if isinstance(error, RankOutOfMemory) else type(error).__name__
            store.report_outcome({"ok": False, "kind": kind, "error": str(error)[:4000]})
            remote = store.other_outcomes(wait_s=min(10.0, spec.timeout_s)) if self.topology.writes_records else {}
            self._judge_failure(spec, error, remote)
        store.report_outcome({"ok": True, "kind": None, "error": ""})
        return result

    def _watcher(self, spec: JobSpec) -> progress.JobWatcher | None:
        """The live lines on the job's ranks (:mod:`hwregress.plugin.progress`), None where they are not written."""
        lines = progress.live_lines(self.bench.config, self.bench.item.name)
        return None if lines is None else lines.job(spec.ranks_per_node, spec.nnodes)

    def _judge_failure(self, spec: JobSpec, error: DistributedJobError,
                       remote: dict[int, dict[str, Any]]) -> NoReturn:
        """Fail (or ``oom``) the test with this node's error and the other nodes' outcomes."""
        failed = {node: outcome for node, outcome in sorted(remote.items()) if not outcome.get("ok")}
        elsewhere = "".join(f"\nnode {node} reported {outcome.get('kind')}: {outcome.get('error')}"
                            for node, outcome in failed.items())
        text = f"{type(error).__name__}: {error}{elsewhere}"
        if isinstance(error, RankOutOfMemory) or any(o.get("kind") == "oom" for o in failed.values()):
            skip_with(Verdict.OOM, text)
        fail_with(f"{text}\n(job folder, with this node's rank logs: {spec.out_dir})")

    def participants_stop_here(self, record: TestRecord, spec: JobSpec) -> None:
        """On a node other than 0: record the part this node took and end the test (node 0 records the figures)."""
        if self.topology.writes_records:
            return
        put_measured(record, MeasuredFigures(details={"participant": {
            "node_rank": self.topology.node_rank, "nodes": spec.nnodes, "world_size": spec.world_size,
            "ranks_per_node": spec.ranks_per_node, "run_id": spec.run_id}}))
        skip_with(Verdict.SKIPPED, f"node {self.topology.node_rank} took part in job {spec.run_id} (world size "
                                   f"{spec.world_size} over {spec.nnodes} nodes); node 0 records the measurement")


def rank_figures(samples: list[float], ranks: list[dict[str, Any]]) -> MeasuredFigures:
    """A job's measured figures: the throughput figures from per-round ``samples``, the largest rank's peak memory,
    and the window's facts: stable when every rank's window was, the most rounds any rank extended by, rank 0's warmup
    steps, rounds run while a look was undecided and looks; with the telemetry of :func:`rank_telemetry`."""
    summary = summarize(samples)
    peaks = [r["peak_memory_bytes"] for r in ranks if r.get("peak_memory_bytes") is not None]
    looks = ranks[0].get("looks")  # the ranks took every look's decision together: rank 0's looks are the job's
    telemetry = rank_telemetry(ranks)
    return dataclasses.replace(
        telemetry, samples=samples, throughput=summary.median, throughput_iqr=summary.iqr, rounds=len(samples),
        steps_per_round=ranks[0].get("steps_per_round"), peak_memory_bytes=max(peaks) if peaks else None,
        stable=all(r.get("stable", True) for r in ranks), looks=LookFigures.of(looks) if looks else None,
        details={"extended_rounds": max((r.get("extended_rounds", 0) for r in ranks), default=0),
                 "verdict_rounds": ranks[0].get("verdict_rounds", 0), "warmup_steps": ranks[0].get("warmup_steps"),
                 **telemetry.details})


def rank_telemetry(ranks: list[dict[str, Any]]) -> MeasuredFigures:
    """Rank 0's window telemetry and host health (the job's own processes excluded), and the energy of the job's
    devices over the window per sample of the job (J), where every device reported its energy (co-located processes
    share one device: its energy counts once)."""
    first = ranks[0]
    telemetry = first.get("telemetry") or {}
    measured = MeasuredFigures(telemetry=telemetry, health=first.get("health") or {},
                               details={"telemetry_series": first.get("telemetry_series") or {}})
    energies = list({r.get("device"): (r.get("telemetry") or {}).get("energy_j") for r in ranks}.values())
    if not (energies and all(energies)):
        return measured  # no energy counter (CPUs), or a job without a training window (the all-reduce sweep)
    window_samples = sum(r["work_per_step"] * r["steps_per_round"] * len(r["round_seconds"])
                         / r.get("work_per_sample", 1)
                         for r in ranks)
    return dataclasses.replace(measured, **energy_figures(sum(energies), window_samples))

"""The pytest side of the distributed families: build a job for the test, run it (:mod:`hwregress.scaleout.launch`),
turn its ranks' reports into the test's record, and a failed, hung or out-of-memory rank into the test's verdict.

On several nodes every node's session runs the job; node 0's records the figures, the others record that they
took part (a ``skipped`` record that names the job)."""

from __future__ import annotations

import dataclasses
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any, NoReturn

import pytest

from hwregress import workloads
from hwregress.hardware import interconnect
from hwregress.hardware.facts import device_kind
from hwregress.measure import host_reference
from hwregress.plugin import progress
from hwregress.plugin.context import BenchContext
from hwregress.plugin.matrix import node_gpus
from hwregress.plugin.record import skip_with
from hwregress.plugin.xdist import holding_devices, session_temp
from hwregress.scaleout import collectives, figures
from hwregress.scaleout.colocation import mps_status
from hwregress.scaleout.job import JobSpec
from hwregress.scaleout.launch import DistributedJobError, RankOutOfMemory, run_job
from hwregress.scaleout.session_store import NodeMismatch, SessionStore, SessionStoreError
from hwregress.scaleout.topology import Topology, ranks_per_node, threads_per_rank
from hwregress.store.atomic import safe_file_name
from hwregress.store.baseline_file import entry_key
from hwregress.store.figures import AllreduceFigures, ColocatedFigures, ScalingFigures
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict
from hwregress.summary import summarize

SESSION_STORE_KEY = pytest.StashKey[SessionStore]()


class DistributedBench:
    """Runs one test's distributed jobs for :class:`hwregress.plugin.fixture.HwBench`."""

    def __init__(self, bench: BenchContext) -> None:
        self.bench = bench
        self.settings = bench.settings
        self.topology: Topology = bench.settings.topology

    # -- the families ---------------------------------------------------------------------------------
    def scaling(self, record: TestRecord, device: str, model: str, world_size: int, batch_size: int,
                dtype: str) -> str:
        """Measure DDP training at ``world_size`` ranks and fill ``record``; returns the baseline entry's mode."""
        record.unit = workloads.get(model).unit
        per_node = self._ranks_per_node(world_size, device)
        spec = self._spec("scaling", device, world_size, per_node, [model], batch_size, dtype)
        spec, ranks = self._launch(record, spec, joint=True)
        scaling = record.scaling = ScalingFigures.of(figures.scaling_details(ranks, spec.nnodes, spec.backend))
        self._participants_stop_here(record, spec)
        samples = figures.global_throughput_samples(ranks)
        _fill_samples(record, samples, ranks)
        record.latency_ms = scaling.step_ms
        if world_size == 1 and not self.topology.multi_node:
            self._offer_reference(device, model, batch_size, dtype, samples)
            reference = samples
        else:
            reference = self._reference(record, device, model, batch_size, dtype)
        reference_median = summarize(reference).median
        record.efficiency = figures.efficiency(record.throughput or 0.0, world_size, reference_median)
        record.reference_samples = reference
        scaling.update(efficiency=record.efficiency, reference_throughput=reference_median,
                       per_device_throughput=(record.throughput or 0.0) / world_size)
        nodes = f"-n{self.topology.nnodes}" if self.topology.multi_node else ""
        return f"train-w{world_size}{nodes}"

    def allreduce(self, record: TestRecord, device: str) -> str:
        """Sweep all-reduce message sizes over every rank of the node(s); fill ``record`` with the bus bandwidth at
        the largest message (GB/s) and the whole curve. Returns the baseline entry's mode (``roof-w<W>``)."""
        per_node = len(node_gpus(self.settings.selection)) if device_kind(device) == "cuda" else 2
        world_size = per_node * self.topology.nnodes
        if world_size < 2:
            skip_with(Verdict.UNSUPPORTED, f"all-reduce needs two ranks; this node has {per_node} selected GPU(s) and "
                                           f"--nnodes is {self.topology.nnodes} (NCCL cannot put two ranks on one GPU)")
        sizes = collectives.message_sizes(device_kind(device))
        record.batch_size = sizes[-1]
        key = entry_key("ceiling", "allreduce", f"roof-w{world_size}", sizes[-1], record.dtype or "fp32")  # as judged
        spec = dataclasses.replace(self._spec("allreduce", device, world_size, per_node, [], 1, "fp32"),
                                   message_sizes=sizes, verdict=self.bench.window_terms(record, key))
        spec, ranks = self._launch(record, spec, joint=True)
        record.allreduce = AllreduceFigures.of({"world_size": world_size, "nodes": spec.nnodes,
                                                       "backend": spec.backend, "curve": ranks[0]["curve"]})
        self._participants_stop_here(record, spec)
        _fill_samples(record, ranks[0]["busbw_samples"], ranks)
        record.stable = ranks[0].get("stable")  # the sweep's ranks time one collective together: rank 0 speaks for it
        record.details.update({name: ranks[0].get(name) for name in ("extended_rounds", "verdict_rounds")})
        roof = None if self.topology.multi_node else interconnect.published_roof("allreduce", device,
                                                                                  record.device_name or "")
        if roof is not None:
            record.details.update(published=roof[0], published_source=roof[1])
        else:
            record.details["published_missing"] = ("across nodes the network bounds the bus bandwidth: no published "
                                                   "figure" if self.topology.multi_node else
                                                   f"no published link figure for {record.device_name}")
        return f"roof-w{world_size}"

    def colocated(self, record: TestRecord, device: str, members: list[str], batch_size: int, dtype: str) -> None:
        """Run ``members`` alone one by one, then together on ``device``; fill ``record`` with the group's throughput,
        each process's interference ratio and peak memory, and whether CUDA MPS was active."""
        threads = threads_per_rank(len(members))
        solo = {}
        for model in dict.fromkeys(members):
            spec = self._spec("colocated", device, 1, 1, [model], batch_size, dtype, nnodes=1, threads=threads)
            solo[model] = self._launch(record, spec, joint=False)[1][0]
        spec = self._spec("colocated", device, len(members), len(members), members, batch_size, dtype, nnodes=1,
                          threads=threads)
        together = self._launch(record, spec, joint=False)[1]
        lines = figures.colocation_members(together, solo)
        active, detail = mps_status(device, [member.get("health") or {} for member in together])
        record.unit = workloads.get(members[0]).unit
        _fill_samples(record, figures.aggregate_samples(together), together)
        peaks = [line["peak_memory_bytes"] for line in lines]  # the device held them all at once: their sum
        record.peak_memory_bytes = sum(peaks) if all(p is not None for p in peaks) else None
        record.efficiency = statistics.fmean(line["interference"] for line in lines)
        record.reference_samples = figures.member_throughput_samples(solo[members[0]])
        record.colocated = ColocatedFigures.of({"processes": len(members), "mps_active": active,
                                                       "mps_detail": detail, "threads_per_process": threads,
                                                       "members": lines})

    # -- T(1) ------------------------------------------------------------------------------------------
    def _reference(self, record: TestRecord, device: str, model: str, batch_size: int, dtype: str) -> list[float]:
        """T(1): the global throughput samples of one rank on this node, measured once per session (any test that
        needs it first runs it; the W=1 test of the family offers its own)."""
        def measure() -> list[float]:
            spec = self._spec("scaling", device, 1, 1, [model], batch_size, dtype, nnodes=1)
            return figures.global_throughput_samples(self._launch(record, spec, joint=False)[1])

        return host_reference.measured_once(_reference_key(device, model, batch_size, dtype), measure,
                                            self._reference_folder())

    def _offer_reference(self, device: str, model: str, batch_size: int, dtype: str, samples: list[float]) -> None:
        """Offer a W=1 test's own samples as the session's T(1) (kept only if none was measured before)."""
        host_reference.measured_once(_reference_key(device, model, batch_size, dtype), lambda: samples,
                                     self._reference_folder())

    def _reference_folder(self) -> Path:
        return session_temp(self.bench.request) / "hwregress-scaling-reference"

    # -- jobs ------------------------------------------------------------------------------------------
    def _ranks_per_node(self, world_size: int, device: str) -> int:
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

    def _spec(self, kind: str, device: str, world_size: int, per_node: int, models: list[str], batch_size: int,
              dtype: str, nnodes: int | None = None, threads: int | None = None) -> JobSpec:
        """The job without its run id and folder (:meth:`_launch` gives them)."""
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

    def _launch(self, record: TestRecord, spec: JobSpec, joint: bool) -> tuple[JobSpec, list[dict[str, Any]]]:
        """Give ``spec`` its run id (on several nodes, when ``joint``, node 0's, after every node checked in with the
        same job) and folder; run it holding its GPUs; return the spec as run and its ranks' reports."""
        together = joint and self.topology.multi_node
        run_id = self._check_in(spec) if together else f"hwregress-{uuid.uuid4().hex[:12]}"
        folder = (session_temp(self.bench.request) / "hwregress-jobs"
                  / f"{safe_file_name(self.bench.item.name, 80)}-{run_id}")
        spec = dataclasses.replace(spec, run_id=run_id, out_dir=str(folder))
        with holding_devices(self.bench.request, [d for d in spec.devices if d != record.device]):
            if not together:
                return spec, self._run(record, spec, Topology())["ranks"]
            return spec, self._run_joint(record, spec)["ranks"]

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

    def _run(self, record: TestRecord, spec: JobSpec, topology: Topology) -> dict[str, Any]:
        """Run ``spec``; a rank out of memory skips the test as ``oom``, any other failure fails it with the rank."""
        try:
            return run_job(spec, topology, self._watcher(spec))
        except RankOutOfMemory as error:
            record.message = str(error)
            skip_with(Verdict.OOM, str(error))
        except DistributedJobError as error:
            _fail(record, f"{type(error).__name__}: {error}\n(job folder, with every rank's log: {spec.out_dir})")

    def _run_joint(self, record: TestRecord, spec: JobSpec) -> dict[str, Any]:
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
            self._judge_failure(record, spec, error, remote)
        store.report_outcome({"ok": True, "kind": None, "error": ""})
        return result

    def _watcher(self, spec: JobSpec) -> progress.JobWatcher | None:
        """The live lines on the job's ranks (:mod:`hwregress.plugin.progress`), None where they are not written."""
        lines = progress.live_lines(self.bench.config, self.bench.item.name)
        return None if lines is None else lines.job(spec.ranks_per_node, spec.nnodes)

    def _judge_failure(self, record: TestRecord, spec: JobSpec, error: DistributedJobError,
                       remote: dict[int, dict[str, Any]]) -> NoReturn:
        """Fail (or ``oom``) the test with this node's error and the other nodes' outcomes."""
        failed = {node: outcome for node, outcome in sorted(remote.items()) if not outcome.get("ok")}
        elsewhere = "".join(f"\nnode {node} reported {outcome.get('kind')}: {outcome.get('error')}"
                            for node, outcome in failed.items())
        text = f"{type(error).__name__}: {error}{elsewhere}"
        if isinstance(error, RankOutOfMemory) or any(o.get("kind") == "oom" for o in failed.values()):
            record.message = text
            skip_with(Verdict.OOM, text)
        _fail(record, f"{text}\n(job folder, with this node's rank logs: {spec.out_dir})")

    def _participants_stop_here(self, record: TestRecord, spec: JobSpec) -> None:
        """On a node other than 0: record the part this node took and end the test (node 0 records the figures)."""
        if self.topology.writes_records:
            return
        record.details["participant"] = {"node_rank": self.topology.node_rank, "nodes": spec.nnodes,
                                         "world_size": spec.world_size, "ranks_per_node": spec.ranks_per_node,
                                         "run_id": spec.run_id}
        skip_with(Verdict.SKIPPED, f"node {self.topology.node_rank} took part in job {spec.run_id} (world size "
                                   f"{spec.world_size} over {spec.nnodes} nodes); node 0 records the measurement")


def _fill_samples(record: TestRecord, samples: list[float], ranks: list[dict[str, Any]]) -> None:
    """The record's throughput figures from per-round samples, the largest rank's peak memory, and the window's
    facts: stable when every rank's window was, the most rounds any rank extended by, rank 0's warmup steps."""
    summary = summarize(samples)
    record.samples = samples
    record.throughput, record.throughput_iqr = summary.median, summary.iqr
    record.rounds = len(samples)
    record.steps_per_round = ranks[0].get("steps_per_round")
    peaks = [r["peak_memory_bytes"] for r in ranks if r.get("peak_memory_bytes") is not None]
    record.peak_memory_bytes = max(peaks) if peaks else None
    record.stable = all(r.get("stable", True) for r in ranks)
    record.details.update(extended_rounds=max((r.get("extended_rounds", 0) for r in ranks), default=0),
                          warmup_steps=ranks[0].get("warmup_steps"))
    _fill_telemetry(record, ranks)


def _fill_telemetry(record: TestRecord, ranks: list[dict[str, Any]]) -> None:
    """Rank 0's window telemetry and host health (the job's own processes excluded), and the energy of the job's
    devices over the window per sample of the job (J), where every device reported its energy (co-located processes
    share one device: its energy counts once)."""
    first = ranks[0]
    record.telemetry = first.get("telemetry") or {}
    record.health = dict(first.get("health") or {})
    record.throttled = bool(record.telemetry.get("throttle_reasons"))
    record.details["telemetry_series"] = first.get("telemetry_series") or {}
    energies = list({r.get("device"): (r.get("telemetry") or {}).get("energy_j") for r in ranks}.values())
    if not (energies and all(energies)):
        return  # no energy counter (CPUs), or a job without a training window (the all-reduce sweep)
    window_samples = sum(r["work_per_step"] * r["steps_per_round"] * len(r["round_seconds"])
                         / r.get("work_per_sample", 1)
                         for r in ranks)
    if window_samples:
        record.energy_j_per_sample = sum(energies) / window_samples
        record.samples_per_joule = window_samples / sum(energies)


def _reference_key(device: str, model: str, batch_size: int, dtype: str) -> str:
    return f"scaling-w1/{device}/{model}/train/bs{batch_size}/{dtype}"


def _fail(record: TestRecord, message: str) -> NoReturn:
    record.message = message
    pytest.fail(message, pytrace=False)

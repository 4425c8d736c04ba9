"""The ``scaling`` family: data-parallel training over world sizes (DistributedDataParallel; NCCL on GPUs, gloo on the
CPU): global throughput, scaling efficiency against W=1 in the same session and peak memory, judged against the
baseline. Opt-in on the CPU (``-m scaling`` or ``--world-sizes``): its jobs of spawned ranks take ~85 s there with the
co-located pair."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hwregress import workloads
from hwregress.hardware.facts import device_kind
from hwregress.measure import host_reference
from hwregress.plugin.context import BenchContext
from hwregress.plugin.families.jobs import DistributedJobs, rank_figures
from hwregress.plugin.matrix import (
    DISTRIBUTED_KINDS,
    TRAINING_DTYPES,
    Selection,
    batch_sizes_for,
    largest,
    leads_its_kind,
    node_gpus,
)
from hwregress.plugin.tier_costs import Cost, CostModel
from hwregress.plugin.xdist import session_temp
from hwregress.scaleout import figures
from hwregress.store.assembly import put_measured
from hwregress.store.baseline_file import entry_key
from hwregress.store.figures import ScalingFigures
from hwregress.store.measured import MeasuredFigures
from hwregress.store.results import TestRecord
from hwregress.summary import summarize

# models small enough for 2 cores; on GPUs the classic DDP benchmark (the GPU tier must stay within 10 minutes:
# transformers scale with --models bert_base)
SCALING_MODELS = {"cpu": ("mobilenet_v3_small",), "cuda": ("resnet50",)}


class Scaling:
    """The ``scaling`` family (:class:`hwregress.plugin.families.protocol.Family`)."""

    name = "scaling"
    marker = "scaling"
    marker_help = "data-parallel training over world sizes (opt-in: --world-sizes or -m scaling)"
    requires: frozenset[str] = frozenset()
    sub_records = ("scaling",)
    view = "scaling"  # in the report's scale-out section

    def cases(self, selection: Selection) -> list[dict[str, Any]]:
        """Device kinds with a process-group backend (the CPU when asked for), one job set per kind over every GPU of
        the node: model x world size x the largest numeric train batch x training dtypes."""
        return [{"device": device, "workload": m, "mode": "train", "world_size": w, "batch_size": b, "dtype": d}
                for device in selection.devices if self._runs_on(selection, device)
                for m in scaling_models(selection, device)
                for w in world_sizes_for(selection, device)
                for b in largest(batch_sizes_for(selection, device, "train", m))
                for d in selection.dtypes if d in TRAINING_DTYPES]

    def _runs_on(self, selection: Selection, device: str) -> bool:
        kind = device_kind(device)
        return (kind in DISTRIBUTED_KINDS and (kind != "cpu" or self.name in selection.opted_in)
                and leads_its_kind(selection, device))

    def measure(self, bench: BenchContext, *, device: str, workload: str, world_size: int, batch_size: int,
                dtype: str, mode: str = "train") -> TestRecord:
        """Train ``workload`` data-parallel over ``world_size`` ranks (batch ``batch_size`` per rank); judge global
        throughput, scaling efficiency against W=1 in this session, and peak memory against the baseline."""
        record = bench.start(self.name, device, workload, mode, batch_size, dtype)
        key_mode = _measure(DistributedJobs(bench), record, device, workload, world_size, batch_size, dtype)
        return bench.conclude(record, entry_key(self.name, workload, key_mode, batch_size, dtype))

    def estimated_cost(self, case: dict[str, Any], cost: CostModel) -> Cost:
        """A job of ``world_size`` ranks, each on a device of its own, profiled but not counted; above one rank, the
        session's T(1) job first unless a W=1 test ran it."""
        key = ("scaling-w1", case["device"], case["workload"], case["batch_size"], case["dtype"])

        def rank(process: CostModel) -> Cost:
            return process.model_window(case["workload"], case.get("mode", "train"), case["batch_size"],
                                        case["device"], case["dtype"], count=False)

        job = cost.job(rank)
        reference = cost.once(key, job.total_s, per_session=True)
        return job if case["world_size"] == 1 else job + Cost(reference)


def scaling_models(selection: Selection, device: str) -> list[str]:
    """The family's models: the selected ones that train, else :data:`SCALING_MODELS` of the device kind."""
    if selection.models is not None:
        return [m for m in selection.models if "train" in workloads.get(m).modes]
    return list(SCALING_MODELS.get(device_kind(device), SCALING_MODELS["cpu"]))


def world_sizes_for(selection: Selection, device: str) -> list[int]:
    """The selected world sizes, or powers of two up to the node's GPUs (CPU: 1 and 2) times the nodes."""
    if selection.world_sizes is not None:
        return selection.world_sizes
    from hwregress.scaleout.topology import default_world_sizes

    return default_world_sizes(device_kind(device), len(node_gpus(selection)), selection.nnodes)


def _measure(jobs: DistributedJobs, record: TestRecord, device: str, model: str, world_size: int, batch_size: int,
             dtype: str) -> str:
    """Measure DDP training at ``world_size`` ranks and fill ``record``; returns the baseline entry's mode."""
    put_measured(record, MeasuredFigures(unit=workloads.get(model).unit))
    per_node = jobs.ranks_per_node_of(world_size, device)
    nodes = f"-n{jobs.topology.nnodes}" if jobs.topology.multi_node else ""
    mode = f"train-w{world_size}{nodes}"
    key = entry_key("scaling", model, mode, batch_size, dtype)  # as judged: its looks judge against it too
    spec = dataclasses.replace(jobs.spec("scaling", device, world_size, per_node, [model], batch_size, dtype),
                               verdict=jobs.bench.window_terms(record, key))
    spec, ranks = jobs.launch(record, spec, joint=True)
    scaling = ScalingFigures.of(figures.scaling_details(ranks, spec.nnodes, spec.backend))
    put_measured(record, MeasuredFigures(scaling=scaling))  # a node other than 0 records its part
    jobs.participants_stop_here(record, spec)
    samples = figures.global_throughput_samples(ranks)
    job = dataclasses.replace(rank_figures(samples, ranks), latency_ms=scaling.step_ms)
    put_measured(record, job)  # a reference job that fails leaves this job's figures on the record
    if world_size == 1 and not jobs.topology.multi_node:
        _offer_reference(jobs, device, model, batch_size, dtype, samples)
        reference = samples
    else:
        reference = _reference(jobs, record, device, model, batch_size, dtype)
    reference_median = summarize(reference).median
    efficiency = figures.efficiency(job.throughput or 0.0, world_size, reference_median)
    scaling = dataclasses.replace(scaling, efficiency=efficiency, reference_throughput=reference_median,
                                  per_device_throughput=(job.throughput or 0.0) / world_size)
    put_measured(record, MeasuredFigures(efficiency=efficiency, reference_samples=reference, scaling=scaling))
    return mode


# -- T(1) ------------------------------------------------------------------------------------------------------------
def _reference(jobs: DistributedJobs, record: TestRecord, device: str, model: str, batch_size: int,
               dtype: str) -> list[float]:
    """T(1): the global throughput samples of one rank on this node, measured once per session (any test that needs it
    first runs it; the W=1 test of the family offers its own)."""
    def measure() -> list[float]:
        spec = jobs.spec("scaling", device, 1, 1, [model], batch_size, dtype, nnodes=1)
        return figures.global_throughput_samples(jobs.launch(record, spec, joint=False)[1])

    return host_reference.measured_once(_reference_key(device, model, batch_size, dtype), measure,
                                        _reference_folder(jobs))


def _offer_reference(jobs: DistributedJobs, device: str, model: str, batch_size: int, dtype: str,
                     samples: list[float]) -> None:
    """Offer a W=1 test's own samples as the session's T(1) (kept only if none was measured before)."""
    host_reference.measured_once(_reference_key(device, model, batch_size, dtype), lambda: samples,
                                 _reference_folder(jobs))


def _reference_folder(jobs: DistributedJobs) -> Path:
    return session_temp(jobs.bench.request) / "hwregress-scaling-reference"


def _reference_key(device: str, model: str, batch_size: int, dtype: str) -> str:
    return f"scaling-w1/{device}/{model}/train/bs{batch_size}/{dtype}"


FAMILY = Scaling()

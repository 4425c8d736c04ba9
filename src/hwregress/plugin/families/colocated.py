"""The ``colocated`` family: training processes sharing one device at once, each one's throughput beside the others
against its solo throughput in the same session (interference), their peak memory, and whether CUDA MPS was active.
Opt-in on the CPU (``-m colocated`` or ``--colocate``)."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from typing import Any

from hwregress import workloads
from hwregress.hardware.facts import device_kind
from hwregress.plugin.context import BenchContext
from hwregress.plugin.families.jobs import DistributedJobs, rank_figures
from hwregress.plugin.matrix import TRAINING_DTYPES, Selection, batch_sizes_for, smallest
from hwregress.plugin.tier_costs import Cost, CostModel
from hwregress.scaleout import figures
from hwregress.scaleout.colocation import mps_status
from hwregress.scaleout.topology import threads_per_rank
from hwregress.store.assembly import put_measured
from hwregress.store.baseline_file import entry_key
from hwregress.store.figures import ColocatedFigures
from hwregress.store.results import TestRecord

COLOCATED_MEMBERS = {"cpu": (("mobilenet_v3_small", "mobilenet_v3_small"),), "cuda": (("resnet50", "resnet50"),)}


class Colocated:
    """The ``colocated`` family (:class:`hwregress.plugin.families.protocol.Family`)."""

    name = "colocated"
    marker = "colocated"
    marker_help = "training processes sharing one device (opt-in: --colocate or -m colocated)"
    requires: frozenset[str] = frozenset()
    sub_records = ("colocated",)
    view = "colocation"  # in the report's scale-out section

    def cases(self, selection: Selection) -> list[dict[str, Any]]:
        """Every device (the CPU when asked for) x process group x the smallest numeric train batch of its first model
        x training dtypes; ``members`` joins the group's models with ``+``."""
        return [{"device": device, "members": "+".join(members), "mode": "train", "batch_size": b, "dtype": d}
                for device in selection.devices
                if device_kind(device) != "cpu" or self.name in selection.opted_in
                for members in colocated_members(selection, device)
                for b in smallest(batch_sizes_for(selection, device, "train", members[0]))
                for d in selection.dtypes if d in TRAINING_DTYPES]

    def measure(self, bench: BenchContext, *, device: str, members: str, batch_size: int, dtype: str,
                mode: str = "train") -> TestRecord:
        """Train the ``+``-joined ``members`` as processes sharing ``device`` at once and alone; judge the group's
        throughput, its interference (mean throughput beside the others / solo) and memory against the baseline."""
        record = bench.start(self.name, device, members, mode, batch_size, dtype)
        _measure(DistributedJobs(bench), record, device, members.split("+"), batch_size, dtype)
        return bench.conclude(record, entry_key(self.name, members, mode, batch_size, dtype))

    def estimated_cost(self, case: dict[str, Any], cost: CostModel) -> Cost:
        """A job per distinct member alone, then one of the group, whose processes take turns on the device."""
        members = case["members"].split("+")

        def member(name: str) -> Callable[[CostModel], Cost]:
            return lambda rank: rank.model_window(name, case["mode"], case["batch_size"], case["device"],
                                                  case["dtype"], count=False)

        solo = [cost.job(member(name)) for name in dict.fromkeys(members)]
        return sum(solo, Cost()) + cost.job(member(members[0]), sharing=len(members))


def colocated_members(selection: Selection, device: str) -> list[tuple[str, ...]]:
    """The family's process groups: ``--colocate``, else two processes of the first selected model that trains, else
    :data:`COLOCATED_MEMBERS` of the device kind."""
    if selection.colocate is not None:
        return selection.colocate
    if selection.models is not None:
        trainable = [m for m in selection.models if "train" in workloads.get(m).modes]
        return [(trainable[0], trainable[0])] if trainable else []
    return list(COLOCATED_MEMBERS.get(device_kind(device), COLOCATED_MEMBERS["cpu"]))


def _measure(jobs: DistributedJobs, record: TestRecord, device: str, members: list[str], batch_size: int,
             dtype: str) -> None:
    """Run ``members`` alone one by one, then together on ``device``; fill ``record`` with the group's throughput, each
    process's interference ratio and peak memory, and whether CUDA MPS was active."""
    threads = threads_per_rank(len(members))
    solo = {}
    for model in dict.fromkeys(members):
        spec = jobs.spec("colocated", device, 1, 1, [model], batch_size, dtype, nnodes=1, threads=threads)
        solo[model] = jobs.launch(record, spec, joint=False)[1][0]
    spec = jobs.spec("colocated", device, len(members), len(members), members, batch_size, dtype, nnodes=1,
                     threads=threads)
    together = jobs.launch(record, spec, joint=False)[1]
    lines = figures.colocation_members(together, solo)
    active, detail = mps_status(device, [member.get("health") or {} for member in together])
    peaks = [line["peak_memory_bytes"] for line in lines]  # the device held them all at once: their sum
    put_measured(record, dataclasses.replace(
        rank_figures(figures.aggregate_samples(together), together), unit=workloads.get(members[0]).unit,
        peak_memory_bytes=sum(peaks) if all(p is not None for p in peaks) else None,
        efficiency=statistics.fmean(line["interference"] for line in lines),
        reference_samples=figures.member_throughput_samples(solo[members[0]]),
        colocated=ColocatedFigures.of({"processes": len(members), "mps_active": active, "mps_detail": detail,
                                       "threads_per_process": threads, "members": lines})))


FAMILY = Colocated()

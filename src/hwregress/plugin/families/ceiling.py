"""The ``ceiling`` family: the device's roofs (dense GEMM TFLOP/s per dtype, device memory copy GB/s, the bus
bandwidths on CUDA and the all-reduce bus bandwidth over every rank of the node), judged against the baseline with the
published figure beside each; they also feed the report's roofline."""

from __future__ import annotations

import dataclasses
from typing import Any

from hwregress.hardware import interconnect, roofline
from hwregress.hardware.facts import device_kind
from hwregress.measure import ceilings
from hwregress.measure.precision.quantization import QUANTIZED_DTYPES
from hwregress.measure.record import window_figures
from hwregress.plugin.context import BenchContext
from hwregress.plugin.families.jobs import DistributedJobs, rank_figures
from hwregress.plugin.matrix import DISTRIBUTED_KINDS, Selection, leads_its_kind, node_gpus
from hwregress.plugin.record import skip_with
from hwregress.plugin.tier_costs import Cost, CostModel
from hwregress.scaleout import collectives
from hwregress.store.assembly import put_measured
from hwregress.store.baseline_file import entry_key
from hwregress.store.figures import AllreduceFigures
from hwregress.store.measured import MeasuredFigures
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict

CEILINGS = ("gemm", "copy", "h2d", "d2h", "p2p", "allreduce")
CUDA_ONLY_CEILINGS = ("h2d", "d2h", "p2p")
# GEMM roofs measured by default per device kind (plus any --dtypes): every tensor-core mode on GPUs
DEFAULT_CEILING_DTYPES = {"cpu": ("fp32",), "cuda": ("fp32", "tf32", "bf16", "fp16"), "mps": ("fp32", "fp16")}
PCIE_BYTES_S = 50e9  # pinned host <-> device copies over PCIe Gen5 x16: the H100 measured 55 GB/s (docs/measured.md)


class Ceiling:
    """The ``ceiling`` family (:class:`hwregress.plugin.families.protocol.Family`)."""

    name = "ceiling"
    marker = "ceiling"
    marker_help = "measures the device's roof (GEMM TFLOP/s, memory bandwidth)"
    requires: frozenset[str] = frozenset()
    sub_records = ("allreduce",)
    view = "ceilings"
    roof = True
    host_evidence = True  # the components (GEMM, copy) of the defective-host check

    def cases(self, selection: Selection) -> list[dict[str, Any]]:
        """Device x roof x dtype: only ``gemm`` varies the dtype (the device's defaults plus the selected ones), the
        bus roofs run on CUDA only, and the all-reduce once per device kind with a process-group backend (one job
        over every GPU of the node)."""
        out = []
        for device in selection.devices:
            for name in CEILINGS:
                if name in CUDA_ONLY_CEILINGS and device_kind(device) != "cuda":
                    continue
                if name == "allreduce" and (device_kind(device) not in DISTRIBUTED_KINDS
                                            or not leads_its_kind(selection, device)):
                    continue  # one job over every GPU of the node, not one per GPU
                for d in (_gemm_dtypes(selection, device) if name == "gemm" else ["fp32"]):
                    out.append({"device": device, "ceiling": name, "dtype": d})
        return out

    def measure(self, bench: BenchContext, *, device: str, ceiling: str, dtype: str) -> TestRecord:
        """Measure roof ``ceiling`` of ``device`` (``gemm``, ``copy``, ``h2d``, ``d2h``, ``p2p``, ``allreduce``) and
        judge it against the baseline; the published figure goes beside it."""
        if ceiling == "allreduce":
            record = put_measured(bench.start(self.name, device, ceiling, "roof", 0, dtype),
                                  MeasuredFigures(unit="GB/s"))
            mode = _allreduce(DistributedJobs(bench), record, device)
            return bench.conclude(record, entry_key(self.name, ceiling, mode, record.batch_size or 0, dtype))
        spec = ceilings.default_spec(ceiling, device)
        record = put_measured(bench.start(self.name, device, ceiling, "roof", spec.size, dtype),
                              MeasuredFigures(unit=spec.unit))
        reason = ceilings.unsupported_reason(ceiling, device)
        if reason is not None:
            skip_with(Verdict.UNSUPPORTED, reason)
        key = entry_key(self.name, ceiling, "roof", spec.size, dtype)
        measurement = ceilings.run_ceiling(spec, device, dtype, bench.timer(device), bench.settings.plan,
                                           bench.settings.telemetry_interval_s, bench.round_driver(),
                                           settled=bench.window_check(record, key))
        published = (_published_link(record, ceiling, device) if ceiling in interconnect.INTERCONNECT_CEILINGS
                     else _published_peak(record, ceiling, dtype))
        put_measured(record, window_figures(record, measurement).with_details(**measurement.facts, **published))
        bench.benchmark_extra_info(record)
        return bench.conclude(record, key)

    def estimated_cost(self, case: dict[str, Any], cost: CostModel) -> Cost:
        """A roof's window: a GEMM at 80% of the dtype's peak (the H200 measured 69-77%), a copy at 90% of the memory
        bandwidth, a bus copy at PCIe Gen5 x16's ~50 GB/s pinned (its pinned buffer once per process); the two-GPU
        roofs and the all-reduce need two ranks (``unsupported`` on one GPU), the all-reduce is a spawned job."""
        device, name = case["device"], case["ceiling"]
        two_ranks = device_kind(device) == "cpu" or cost.a.gpus >= 2
        if name in ("p2p", "allreduce") and not two_ranks:
            return cost.unsupported()
        if name == "allreduce":  # a calibrated round lasts min_round_s whatever the message
            return cost.job(lambda rank: rank.roof(device, 0.0, cost.plan.min_round_s))
        size = ceilings.default_spec(name, device).size
        if name == "gemm":
            step = 2 * size**3 / (0.8 * cost.peak_tflops(case["dtype"], device) * 1e12)
            return cost.roof(device, cost.a.ceiling_setup_s, step)
        if name == "copy":
            return cost.roof(device, cost.a.ceiling_setup_s, 2 * size / (0.9 * cost.memory_bytes_s(device)))
        return cost.roof(device, cost.a.ceiling_setup_s + cost.pinned_s(size / 2**30), size / PCIE_BYTES_S)


def _gemm_dtypes(selection: Selection, device: str) -> list[str]:
    """The GEMM roof's dtypes: the device's defaults and the selected floating dtypes. The roof multiplies float
    tensors (hwregress.measure.ceilings), so an int8 or fp8 roof would be an fp32 GEMM set against the int8 or fp8
    peak: quantized dtypes have no roof."""
    defaults = DEFAULT_CEILING_DTYPES.get(device_kind(device), ("fp32",))
    return list(dict.fromkeys([*defaults, *(d for d in selection.dtypes if d not in QUANTIZED_DTYPES)]))


def _published_peak(record: TestRecord, name: str, dtype: str) -> dict[str, Any]:
    """The details that put the device's published roof ``name`` in ``dtype`` beside the measured one
    (:func:`hwregress.hardware.roofline.peak_lookup`), or say why there is none."""
    facts = record.device_facts
    lookup = roofline.peak_lookup(record.device_name or "", facts.get("multiprocessors"), facts.get("mig", False))
    if lookup.peak is None:
        return {"published_missing": lookup.reason}
    return {"published": lookup.peak.roof(name, dtype), "published_source": lookup.peak.source}


def _published_link(record: TestRecord, name: str, device: str) -> dict[str, Any]:
    """The details that give the published bandwidth of the link a bus ceiling crosses
    (:mod:`hwregress.hardware.interconnect`), or say why there is none, and the link."""
    roof = interconnect.published_roof(name, device, record.device_name or "")
    found: dict[str, Any] = ({"published": roof[0], "published_source": roof[1]} if roof is not None else
                             {"published_missing": f"no published {name} figure for {record.device_name} on {device}"})
    link = interconnect.pcie_link(device)
    return {**found, **(link.facts() if link is not None else {})}


def _allreduce(jobs: DistributedJobs, record: TestRecord, device: str) -> str:
    """Sweep all-reduce message sizes over every rank of the node(s); fill ``record`` with the bus bandwidth at the
    largest message (GB/s) and the whole curve. Returns the baseline entry's mode (``roof-w<W>``)."""
    topology = jobs.topology
    per_node = len(node_gpus(jobs.settings.selection)) if device_kind(device) == "cuda" else 2
    world_size = per_node * topology.nnodes
    if world_size < 2:
        skip_with(Verdict.UNSUPPORTED, f"all-reduce needs two ranks; this node has {per_node} selected GPU(s) and "
                                       f"--nnodes is {topology.nnodes} (NCCL cannot put two ranks on one GPU)")
    sizes = collectives.message_sizes(device_kind(device))
    put_measured(record, MeasuredFigures(batch_size=sizes[-1]))
    key = entry_key("ceiling", "allreduce", f"roof-w{world_size}", sizes[-1], record.dtype or "fp32")  # as judged
    spec = dataclasses.replace(jobs.spec("allreduce", device, world_size, per_node, [], 1, "fp32"),
                               message_sizes=sizes, verdict=jobs.bench.window_terms(record, key))
    spec, ranks = jobs.launch(record, spec, joint=True)
    put_measured(record, MeasuredFigures(allreduce=AllreduceFigures.of({
        "world_size": world_size, "nodes": spec.nnodes, "backend": spec.backend, "curve": ranks[0]["curve"]})))
    jobs.participants_stop_here(record, spec)
    roof = None if topology.multi_node else interconnect.published_roof("allreduce", device, record.device_name or "")
    published = ({"published": roof[0], "published_source": roof[1]} if roof is not None else
                 {"published_missing": "across nodes the network bounds the bus bandwidth: no published figure"
                  if topology.multi_node else f"no published link figure for {record.device_name}"})
    # the sweep's ranks time one collective together: rank 0 speaks for its stability
    put_measured(record, dataclasses.replace(rank_figures(ranks[0]["busbw_samples"], ranks),
                                             stable=ranks[0].get("stable")).with_details(**published))
    return f"roof-w{world_size}"


FAMILY = Ceiling()

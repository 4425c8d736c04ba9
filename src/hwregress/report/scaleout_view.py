"""The report's scale-out section: data-parallel scaling over world sizes, the all-reduce bus bandwidth curve and
co-located training processes on one device.

Records read (``hwregress.store.results.TestRecord``):

- ``family="scaling"``: ``throughput`` is the global median (all ranks) in ``unit`` (samples/s or tokens/s),
  ``efficiency`` = T(W) / (W x T(1)) with T(1) the same session's world-size-1 throughput, and
  ``scaling`` (:class:`hwregress.store.figures.ScalingFigures`) the world size, nodes, backend, per-device throughput,
  reference T(1), communication share, buckets, bytes all-reduced per step and the per-rank figures.
- ``family="ceiling", model="allreduce"``: ``allreduce.curve``, one point per message size
  (bytes) with its time (us), algorithm bandwidth and bus bandwidth (GB/s = 1e9 bytes/s). Bus bandwidth =
  algbw x 2(W-1)/W, nccl-tests' definition (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md).
- ``family="colocated"``: ``colocated.members``, per process its solo and co-located throughput
  and the interference ratio co-located / solo.

A sub-record may be missing (a failed or skipped test still has a record) and any figure None or not finite:
such a figure is left out of the charts and shown as "–" in the tables, never an error.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from hwregress.report import charts
from hwregress.report.record_values import mapping, number, sort_key, text
from hwregress.store.figures import AllreduceFigures, ColocatedFigures, ScalingFigures
from hwregress.store.results import TestRecord

SCALING_VIEW = "scaling"  # the record views of data-parallel scaling and of co-located processes (TestRecord.view)
COLOCATION_VIEW = "colocation"
IDEAL_SERIES = "ideal (W x T(1))"


@dataclass(frozen=True)
class ScalingRow:
    """One scaling test as a table row. Throughputs in ``unit`` (global: all ranks; per device: one rank),
    efficiencies and ``comm_share`` as fractions (1.0 = perfect scaling, all of the step), times in ms,
    ``allreduce_bytes_per_step`` in bytes. None: not recorded."""

    record: TestRecord
    world_size: int | float | None
    nodes: int | float | None
    ranks_per_node: int | float | None
    backend: str | None
    threads_per_rank: int | float | None
    throughput: float | None
    per_device_throughput: float | None
    efficiency: float | None
    baseline_efficiency: float | None
    comm_share: float | None
    comm_ms_per_step: float | None
    step_ms: float | None
    buckets: int | float | None
    allreduce_bytes_per_step: int | float | None


@dataclass(frozen=True)
class ColocationRow:
    """One member process of a co-location test (or the test alone when it recorded no members).
    Throughputs in the record's ``unit``, ``interference`` = co-located / solo throughput (a fraction),
    memory in bytes, ``mps`` one of ``yes``, ``no``, ``unknown``."""

    record: TestRecord
    processes: int | float | None
    index: int | float | None
    model: str | None
    solo_throughput: float | None
    colocated_throughput: float | None
    interference: float | None
    peak_memory_bytes: int | float | None
    solo_peak_memory_bytes: int | float | None
    mps: str
    mps_detail: str | None


def scaleout_context(records: Sequence[TestRecord]) -> dict[str, Any]:
    """The template variables of ``_scaleout.html.j2`` from a session's records (any order, any families):
    ``scaling_charts`` (list of SVG Markup: per group a throughput and an efficiency chart over world size),
    ``scaling_rows`` (list of :class:`ScalingRow`), ``allreduce_charts`` (list of SVG Markup: GB/s over
    message bytes), ``colocation_rows`` (list of :class:`ColocationRow`) and ``has_scaleout``."""
    scaling = [r for r in records if r.view == SCALING_VIEW]
    allreduce = [r for r in records if r.measures_roof and r.model == "allreduce"]
    colocated = [r for r in records if r.view == COLOCATION_VIEW]
    context: dict[str, Any] = {
        "scaling_charts": scaling_charts(scaling),
        "scaling_rows": sorted((scaling_row(r) for r in scaling), key=_scaling_order),
        "allreduce_charts": allreduce_charts(allreduce),
        "colocation_rows": [row for r in sorted(colocated, key=lambda r: r.test_id) for row in colocation_rows(r)],
    }
    context["has_scaleout"] = any(context.values())
    return context


# --- small readers of untrusted detail values -------------------------------------------------------------

def _shown(value: Any) -> str:
    return "?" if value is None else str(value)


def _device_kind(device: Any) -> str:
    """``cuda:0`` -> ``cuda``; ``cpu`` -> ``cpu``."""
    return str(device or "").split(":")[0] or "?"


# --- data-parallel scaling --------------------------------------------------------------------------------

def scaling_row(record: TestRecord) -> ScalingRow:
    """The table row of one ``family="scaling"`` record; details it lacks are None."""
    scaling = record.scaling or ScalingFigures()
    efficiency = number(record.efficiency)
    return ScalingRow(
        record=record, world_size=number(scaling.world_size), nodes=number(scaling.nodes),
        ranks_per_node=number(scaling.ranks_per_node), backend=text(scaling.backend),
        threads_per_rank=number(scaling.threads_per_rank), throughput=number(record.throughput),
        per_device_throughput=number(scaling.per_device_throughput),
        efficiency=efficiency if efficiency is not None else number(scaling.efficiency),
        baseline_efficiency=number(record.baseline_efficiency), comm_share=number(scaling.comm_share),
        comm_ms_per_step=number(scaling.comm_ms_per_step), step_ms=number(scaling.step_ms),
        buckets=number(scaling.buckets), allreduce_bytes_per_step=number(scaling.allreduce_bytes_per_step))


def _scaling_order(row: ScalingRow) -> tuple[Any, ...]:
    r = row.record
    return (str(r.device or ""), str(r.model or ""), sort_key(r.batch_size), str(r.dtype or ""), sort_key(row.nodes),
            sort_key(row.world_size), r.test_id)


def _scaling_group(row: ScalingRow) -> tuple[str, str, str, str, bool, str]:
    """Records drawn in one chart: device kind, model, per-rank batch, dtype, several nodes or one, unit."""
    r = row.record
    multi_node = row.nodes is not None and row.nodes > 1
    return (_device_kind(r.device), str(r.model or "?"), str(r.batch_size), str(r.dtype or "?"), multi_node, r.unit)


def scaling_charts(records: Sequence[TestRecord]) -> list[Markup]:
    """Per group (:func:`_scaling_group`) two charts over world size (log x, a tick per measured size): global
    throughput beside the ideal W x T(1), and the efficiency T(W) / (W x T(1)) beside the ideal 1.0; each only
    where a figure was measured. Groups without a drawable point give no chart."""
    groups: dict[tuple[str, str, str, str, bool, str], list[ScalingRow]] = defaultdict(list)
    for row in map(scaling_row, records):
        if row.world_size is not None:
            groups[_scaling_group(row)].append(row)
    out = []
    for key, rows in sorted(groups.items()):
        kind, model, batch, dtype, multi_node, unit = key
        where = f"{kind}{', several nodes' if multi_node else ''}"
        name = f"{model} {dtype} bs{batch}/rank"
        if any(row.throughput is not None for row in rows):
            out.append(charts.line_chart(_throughput_series(rows), f"{name} — throughput vs world size — {where}",
                                         "world size (ranks)", f"global throughput ({unit})", log_x=True,
                                         ticks_at_data_x=True))
        if any(row.efficiency is not None for row in rows):
            out.append(charts.line_chart(_efficiency_series(rows), f"{name} — scaling efficiency — {where}",
                                         "world size (ranks)", "efficiency T(W) / (W x T(1))", log_x=True,
                                         ticks_at_data_x=True))
    return [chart for chart in out if chart]


def _series_name(row: ScalingRow, rows: Sequence[ScalingRow]) -> str:
    """``measured``, or ``measured <backend>`` when the group mixes backends."""
    backends = {r.backend for r in rows}
    return f"measured {row.backend}" if len(backends) > 1 else "measured"


def _throughput_series(rows: Sequence[ScalingRow]) -> dict[str, list[tuple[Any, Any]]]:
    series: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
    for row in rows:
        series[_series_name(row, rows)].append((row.world_size, row.throughput))
    reference = _reference_throughput(rows)
    if reference is not None:
        series[IDEAL_SERIES] = [(w, w * reference) for w in sorted({r.world_size for r in rows})]
    return dict(series)


def _reference_throughput(rows: Sequence[ScalingRow]) -> float | None:
    """T(1): the recorded ``reference_throughput`` of the group, else the throughput measured at world size 1."""
    recorded = (number(r.record.scaling.reference_throughput) for r in rows if r.record.scaling)
    measured_at_one = (r.throughput for r in rows if r.world_size == 1)
    return next((t for t in (*recorded, *measured_at_one) if t is not None), None)


def _efficiency_series(rows: Sequence[ScalingRow]) -> dict[str, list[tuple[Any, Any]]]:
    series: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
    for row in rows:
        series[_series_name(row, rows)].append((row.world_size, row.efficiency))
    series["ideal (1.0)"] = [(w, 1.0) for w in sorted({r.world_size for r in rows})]
    return dict(series)


# --- all-reduce bus bandwidth -----------------------------------------------------------------------------

def allreduce_charts(records: Sequence[TestRecord]) -> list[Markup]:
    """Per device kind, world size and node count one chart of GB/s over message bytes (log-log: small messages
    are latency-bound, orders of magnitude below the large ones): the bus and
    algorithm bandwidth of each record's curve and, where recorded, the published figure as a constant line
    over the measured sizes. Records without a drawable curve give no chart."""
    groups: dict[tuple[str, str, str], list[TestRecord]] = defaultdict(list)
    for r in records:
        allreduce = r.allreduce or AllreduceFigures()
        groups[(_device_kind(r.device), _shown(allreduce.world_size), _shown(allreduce.nodes))].append(r)
    out = []
    for (kind, world_size, nodes), group in sorted(groups.items()):
        series: dict[str, list[tuple[Any, Any]]] = {}
        for r in sorted(group, key=lambda r: r.test_id):
            series.update(_curve_series(r, prefix=_curve_prefix(r) if len(group) > 1 else ""))
        out.append(charts.line_chart(series, f"all-reduce bandwidth — {kind}, W={world_size}, {nodes} node(s)",
                                     "message size (bytes)", "GB/s", log_x=True, log_y=True))
    return [chart for chart in out if chart]


def _curve_prefix(record: TestRecord) -> str:
    """What tells apart records of one chart: backend and dtype (``nccl fp32 ``)."""
    backend = record.allreduce.backend if record.allreduce else None
    return " ".join(str(p) for p in (backend, record.dtype) if p) + " "


def _curve_series(record: TestRecord, prefix: str) -> dict[str, list[tuple[Any, Any]]]:
    """``busbw`` and ``algbw`` (GB/s) over bytes, and ``published (<source>)`` as a constant line."""
    points = record.allreduce.curve if record.allreduce else []
    series = {f"{prefix}{name}": [(number(p.bytes), number(getattr(p, key))) for p in points]
              for name, key in (("busbw", "busbw_gbps"), ("algbw", "algbw_gbps"))}
    published = number(mapping(record.details).get("published"))
    sizes = [b for b in (number(p.bytes) for p in points) if b is not None and b > 0]
    if published is not None and sizes:
        source = mapping(record.details).get("published_source")
        label = f"{prefix}published ({source})" if source else f"{prefix}published"
        series[label] = [(min(sizes), published), (max(sizes), published)]
    return series


# --- co-located processes ---------------------------------------------------------------------------------

def colocation_rows(record: TestRecord) -> list[ColocationRow]:
    """One row per member process of a ``family="colocated"`` record, in member order; one row with only the
    test's own figures when it recorded no members."""
    colocated = record.colocated or ColocatedFigures()
    mps_active = colocated.mps_active
    shared = {"record": record, "processes": number(colocated.processes),
              "mps": "yes" if mps_active is True else "no" if mps_active is False else "unknown",
              "mps_detail": text(colocated.mps_detail)}
    members = colocated.members
    if not members:
        return [ColocationRow(index=None, model=None, solo_throughput=None, colocated_throughput=None,
                              interference=None,
                              peak_memory_bytes=None, solo_peak_memory_bytes=None, **shared)]
    return [ColocationRow(index=number(m.index), model=text(m.model), solo_throughput=number(m.solo_throughput),
                          colocated_throughput=number(m.colocated_throughput), interference=number(m.interference),
                          peak_memory_bytes=number(m.peak_memory_bytes),
                          solo_peak_memory_bytes=number(m.solo_peak_memory_bytes), **shared)
            for m in members]

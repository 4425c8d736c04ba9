"""The HTML report: one self-contained page (inline CSS and SVG) rendered with Jinja2.

``write_report`` writes ``report.html`` and its copy under ``archive/``, beside the results the store wrote first
(:mod:`hwregress.store.result_files`); ``render_merge`` puts several machines' results side by side.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, Undefined, select_autoescape

from hwregress import __version__
from hwregress.hardware import roofline
from hwregress.report import charts
from hwregress.report.ab_view import ab_context
from hwregress.report.family_views import MODELS_VIEW, views_context
from hwregress.report.history_view import HistorySection
from hwregress.report.reach_view import reach_cells, tolerance_by_kind
from hwregress.report.regressed_chart import top_context
from hwregress.report.scaleout_view import COLOCATION_VIEW, SCALING_VIEW
from hwregress.report.template_cache import bytecode_cache
from hwregress.store.atomic import atomic_write_text
from hwregress.store.result_files import archive_copy
from hwregress.store.results import SessionResults, TestRecord, machine_label
from hwregress.store.verdicts import Verdict, verdict_rank

ROOFLINE_METHOD = (
    "Arithmetic intensity = FLOPs per sample (torch.utils.flop_counter, 2 x multiply-adds) / estimated bytes "
    "moved per sample: parameters read once per forward pass, every leaf module's output written and read once; "
    "a training step doubles activation traffic and counts parameters five times (read, gradient write, optimizer "
    "read-modify-write of weights and momentum). Caches are ignored. Roofs are the ceilings measured in this "
    "session (GEMM TFLOP/s, device copy GB/s) and, for known GPUs, the published dense peaks. Each marker is one "
    "test, labelled with its batch size; markers are not joined, as batch sizes are not a series in intensity."
)


_AUTOESCAPED = ("html", "j2")  # the template extensions whose output is escaped
_LAYOUT = {"trim_blocks": True, "lstrip_blocks": True}  # every template's whitespace control


@functools.cache
def _environment() -> Environment:
    """The pages' Jinja2 environment, built once per process: it keeps each template compiled (~70 ms for the
    report's), which a process that renders many pages (``report merge``, the self-tests) would otherwise pay per
    page; across processes, its bytecode cache (:mod:`hwregress.report.template_cache`) spares the compiling. Jinja2
    renders from one environment in any number of threads."""
    env = Environment(loader=PackageLoader("hwregress", "report/templates"),
                      autoescape=select_autoescape(_AUTOESCAPED, default=True),
                      bytecode_cache=bytecode_cache({**_LAYOUT, "autoescaped": _AUTOESCAPED}), **_LAYOUT)
    env.filters.update(num=_num, gib=_gib, pct=_pct, shortid=_short_id, anchor=_anchor, ceiling_size=_ceiling_size,
                       finding=_finding, binary_size=_binary_size_text)
    env.tests.update(present=lambda value: not _missing(value))
    env.filters.update(reach_cells=reach_cells)
    env.globals.update(has_detail=_has_detail)
    return env


def _short_id(test_id: str) -> str:
    """``bench_tests/test_throughput.py::test_throughput[cpu-resnet18-...]`` ->
    ``test_throughput[cpu-resnet18-...]``."""
    return test_id.rsplit("::", 1)[-1]


def _anchor(test_id: str) -> str:
    return hashlib.sha1(test_id.encode("utf-8")).hexdigest()[:12]


def _missing(value: Any) -> bool:
    return value is None or isinstance(value, Undefined) or (isinstance(value, float) and not math.isfinite(value))


def _num(value: Any, digits: int = 4) -> str:
    if _missing(value):
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}g}"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _gib(value: Any) -> str:
    if _missing(value) or not _is_number(value):
        return _num(value)
    return f"{value / 2**30:.3f}"


def _pct(value: Any) -> str:
    if _missing(value) or not _is_number(value):
        return _num(value)
    return f"{value:.1%}"


def _binary_size(size_bytes: float) -> str:
    """``67108864`` -> ``64 MiB`` (IEC binary prefixes, 3 significant digits)."""
    for exponent, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if abs(size_bytes) >= 1024**exponent:
            return f"{size_bytes / 1024**exponent:.3g} {unit}"
    return f"{size_bytes:.3g} B"


def _binary_size_text(value: Any) -> str:
    """A byte count as :func:`_binary_size` (``64 MiB``); anything not a finite number as ``num``."""
    if _missing(value) or not _is_number(value):
        return _num(value)
    return _binary_size(value)


CEILING_SIZE_NAMES = {"copy": "copy", "h2d": "host→device", "d2h": "device→host", "p2p": "GPU→GPU",
                      "allreduce": "all-reduce"}


def _ceiling_size(record: TestRecord) -> str:
    """What a ceiling row's ``batch_size`` holds (``hwregress.measure.ceilings.CeilingSpec.size``): the matrix
    side n for GEMM (``GEMM 4096³``), the buffer bytes for copies (``copy 256 MiB``, ``host→device 1 GiB``,
    ``device→host 1 GiB``, ``GPU→GPU 1 GiB``) and the largest message of an all-reduce (``all-reduce 64 MiB``)."""
    size = record.batch_size
    if _missing(size) or not _is_number(size):
        return _num(size)
    if record.model == "gemm":
        return f"GEMM {int(size) if float(size).is_integer() else _num(size)}³"
    name = CEILING_SIZE_NAMES.get(str(record.model), f"{record.model} size")
    return f"{name} {_binary_size(size)}"


def _finding(value: Any) -> str:
    """One health finding as text: numbers as ``num``, lists joined, mappings as ``key: value`` pairs,
    an empty list or mapping as ``none``."""
    if isinstance(value, (dict, list, tuple)) and not value:
        return "none"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_finding(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_finding(v) for v in value)
    return _num(value)


def _has_detail(record: TestRecord) -> bool:
    """Whether the record gets a section under "Per-test detail": measured samples or health findings."""
    return bool(record.samples or record.health)


def render(results: SessionResults, history: HistorySection | None = None) -> str:
    """The report page of one session, as HTML text: the generic tables and charts, each family's view
    (:mod:`hwregress.report.family_views`), the A/B view of an A/B session's tests (:mod:`hwregress.report.ab_view`);
    ``history`` adds the trend section of its tests."""
    records = sorted(results.records, key=lambda r: (verdict_rank(r.verdict), r.test_id))
    return _environment().get_template("report.html.j2").render(
        meta=results.meta,
        counts=results.counts(),
        verdict_order=[v.value for v in Verdict],
        records=records,
        has_new=any(r.verdict == "new" for r in records),
        tolerance_text=tolerance_by_kind(results.meta.get("tolerances") or {}, records),
        throughput_charts=_by_batch_charts(records, "throughput", "throughput ({unit})", by_unit=True,
                                           baseline_field="baseline_throughput"),
        memory_charts=_by_batch_charts(records, "peak_memory_bytes", "peak memory (GiB)", scale=2**-30),
        speedup_chart=_speedup_chart(records),
        roofline_charts=_roofline_charts(records),
        roofline_method=ROOFLINE_METHOD,
        details=[_detail(r) for r in records if _has_detail(r)],
        version=__version__,
        **(history or HistorySection()).context(),
        **views_context(records),  # each family's section (hwregress.report.family_views)
        **ab_context(records, results.meta),  # B against A in an A/B session, whatever the family
        **top_context(records),
    )


def write_report(results: SessionResults, report_dir: Path, stem: str,
                 history: HistorySection | None = None) -> dict[str, Path]:
    """Render the session's page (with ``history``'s trend section) and write it as ``report.html`` under
    ``report_dir`` and as its archive copy ``archive/report-<stem>.html`` (``stem``: the one its results' copy took,
    :func:`hwregress.store.result_files.write_results`), each atomically. Returns the paths written by name.

    The results are written before this, by the store: a page that cannot be rendered costs only the page.

    Raises:
        OSError: a file cannot be written, or is not a regular file (``NotARegularFileError``).
        jinja2.TemplateError, or whatever a value's formatting raises: the page cannot be rendered.
    """
    html = render(results, history)
    paths = {"report": report_dir / "report.html", "report archive": archive_copy(report_dir, "report archive", stem)}
    for path in paths.values():
        atomic_write_text(path, html)
    return paths


def _by_batch_charts(records: list[TestRecord], field: str, label: str, scale: float = 1.0,
                     by_unit: bool = False, baseline_field: str | None = None) -> list[Any]:
    """One chart per device and mode (and unit, with ``by_unit``: tokens/s and samples/s never share an axis),
    one line per model variant over batch size, and its baseline (``baseline_field`` of the same records) dashed
    beside it where recorded. ``label`` may hold ``{unit}``."""
    groups: dict[tuple[str, str, str], dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    baselines: dict[tuple[str, str, str], dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        value = getattr(r, field)
        if r.view == MODELS_VIEW and value is not None and isinstance(r.batch_size, int) and r.batch_size:
            key = (r.device or "", r.mode or "", r.unit if by_unit else "")
            groups[key][_variant_label(r)].append((r.batch_size, value * scale))
            baseline = getattr(r, baseline_field) if baseline_field else None
            if _is_number(baseline):
                baselines[key][_variant_label(r)].append((r.batch_size, baseline * scale))
    return [charts.line_chart(series, f"{label.format(unit=unit)} vs batch size — {device} {mode}", "batch size",
                              label.format(unit=unit), log_x=True, ticks_at_data_x=True,
                              baselines=baselines.get((device, mode, unit)))
            for (device, mode, unit), series in sorted(groups.items())]


def _variant_label(record: TestRecord) -> str:
    """``resnet18 fp32``, plus the context and any non-default compiler or memory format (``gpt2 ctx128 fp32``)."""
    details = record.details or {}
    parts = [record.model, f"ctx{details['context']}" if details.get("context") else None,
             *(v for v in (details.get("compiler"), details.get("memory_format"))
               if v not in (None, "eager", "contiguous")),
             record.dtype]
    return " ".join(str(p) for p in parts if p)


def _speedup_chart(records: list[TestRecord]) -> Any:
    bars = [(f"{r.model} {r.device} bs{r.batch_size}", r.speedup) for r in records if r.speedup]
    if not bars:  # same-session throughput of GPU vs CPU for identical settings
        cpu = {(r.model, r.mode, r.batch_size, r.dtype): r.throughput for r in records
               if r.view == MODELS_VIEW and r.device == "cpu" and r.throughput}
        bars = [(f"{r.model} {r.mode} bs{r.batch_size} {r.device}",
                 r.throughput / cpu[(r.model, r.mode, r.batch_size, r.dtype)])
                for r in records if r.view == MODELS_VIEW and r.device != "cpu" and r.throughput
                and (r.model, r.mode, r.batch_size, r.dtype) in cpu]
    return charts.bar_chart(bars, "speedup over the CPU (same session)", "x CPU throughput")


def _roofline_charts(records: list[TestRecord]) -> list[Any]:
    # a scaling or co-location record's figures add up several devices or processes: not one device's roofline
    records = [r for r in records if r.view not in (SCALING_VIEW, COLOCATION_VIEW)]
    out = []
    devices = sorted({r.device for r in records if r.arithmetic_intensity and r.achieved_tflops and r.device})
    for device in devices:
        roofs = _roofs(records, device)
        points = [charts.RooflinePoint(f"{r.model} {r.mode} {r.dtype}", r.batch_size, r.arithmetic_intensity,
                                       r.achieved_tflops) for r in records
                  if r.device == device and r.arithmetic_intensity and r.achieved_tflops]
        out.append(charts.roofline_chart(points, roofs, f"roofline — {device}"))
    return [c for c in out if c]


def _roofs(records: list[TestRecord], device: str) -> list[charts.Roof]:
    """The roofs of one device from this session's ceilings (GEMM TFLOP/s, device copy GB/s) and the
    published table (``hwregress.hardware.roofline.published_peak``)."""
    gemm = {r.dtype: r.throughput for r in records if r.device == device and r.measures_roof
            and r.model == "gemm" and r.throughput}
    copy = [r.throughput for r in records
            if r.device == device and r.measures_roof and r.model == "copy" and r.throughput]
    roofs = [charts.Roof(f"measured {dtype} roof", tflops, copy[0] / 1000.0)
             for dtype, tflops in sorted(gemm.items(), key=lambda kv: str(kv[0])) if copy]
    name = next((r.device_name for r in records if r.device == device and r.device_name), "")
    peak = roofline.published_peak(name or "")
    if peak is not None:
        for dtype in ("fp32", "bf16"):
            if dtype in peak.tflops:
                roofs.append(charts.Roof(f"{peak.name} {dtype} spec", peak.tflops[dtype], peak.memory_tb_s))
    return roofs


def _detail(record: TestRecord) -> dict[str, Any]:
    series = record.details.get("telemetry_series") or {}
    times = series.get("t_s", [])
    sparks = [charts.sparkline(times, series.get(key, []), label, unit) for key, label, unit in (
        ("gpu_util_pct", "GPU utilization", "%"), ("power_w", "power", "W"), ("temperature_c", "temperature", "°C"),
        ("sm_clock_mhz", "SM clock", "MHz"), ("cpu_util_pct", "CPU utilization", "%"),
        ("rss_bytes", "process RSS", "bytes"))]
    return {"record": record, "sparks": [s for s in sparks if s],
            "split": charts.stacked_bar(record.op_categories, f"time split of {record.test_id}")}


def render_merge(sessions: Iterable[SessionResults], history: HistorySection | None = None) -> str:
    """Several machines' results side by side: one row per test identity, one column per machine with
    its throughput and its ratio to the first machine that ran the test (the seed studies' K40 / P100 /
    V100 table, for whatever hardware the user has), judged against it with the gate's statistics
    (:func:`hwregress.judge.session_compare.throughput_change`); ``history`` adds trend charts, one series per hardware
    key."""
    from hwregress.judge.session_compare import throughput_change
    from hwregress.judge.tolerances import Tolerances

    sessions = list(sessions)
    labels = [machine_label(s) for s in sessions]
    rows: dict[tuple[Any, ...], list[TestRecord | None]] = {}
    for column, session in enumerate(sessions):
        for r in session.records:
            if r.throughput is None:
                continue
            key = (r.family, r.model, r.mode, r.batch_size, r.dtype, (r.device or "").split(":")[0])
            rows.setdefault(key, [None] * len(sessions))[column] = r
    table = []
    for key, cells in sorted(rows.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        first_measured = next((c for c in cells if c is not None and c.throughput), None)
        reference = first_measured.throughput if first_measured is not None else None
        first = next(c for c in cells if c is not None)
        shown = (*key[:3], _ceiling_size(first) if first.measures_roof else key[3], *key[4:])
        table.append({"key": shown, "cells": [
            None if c is None else {"throughput": c.throughput, "unit": c.unit, "verdict": c.verdict,
                                    "ratio": c.throughput / reference if reference else None,
                                    "change": None if first_measured is None or c is first_measured
                                    else throughput_change(first_measured, c, Tolerances())} for c in cells]})
    return _environment().get_template("merge.html.j2").render(labels=labels, sessions=sessions, table=table,
                                                               version=__version__,
                                                               **(history or HistorySection()).context())


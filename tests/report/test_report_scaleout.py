"""The report's scale-out section: the scaling charts and table, the all-reduce bandwidth curve, the co-location
table, the new ceiling sizes, and pages that stay whole whatever these records' details hold."""

from __future__ import annotations

import dataclasses
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from support.html_checks import report_section, svg_charts, table_rows, well_formed
from synthetic import as_loaded

from hwregress.report import render
from hwregress.report.axes import format_value
from hwregress.store.results import SessionResults, TestRecord
from hwregress.store.verdicts import Verdict

META = {"hostname": "box", "started_at": "s", "finished_at": "f", "duration_s": 1.0, "args": ["-m", "cpu"],
        "hardware": [], "baseline_dir": "baselines"}
REFERENCE = 100.0  # T(1), samples/s
GRADIENT_BYTES = 44 * 2**20


def scaling_record(world_size: int, throughput: float | None, efficiency: float | None, backend: str = "gloo",
                   reference: float | None = REFERENCE, device: str = "cpu", nodes: int = 1) -> TestRecord:
    per_device = None if throughput is None else throughput / world_size
    return TestRecord(
        f"bench_tests/test_scaling.py::test_scaling[{device}-resnet18-{backend}-w{world_size}]", family="scaling",
        device=device, model="resnet18", mode="train", batch_size=16, dtype="fp32", throughput=throughput,
        samples=[] if throughput is None else [throughput] * 3, efficiency=efficiency,
        baseline_efficiency=0.95 if world_size > 1 else None, verdict=Verdict.PASS,
        details={"scaling": {
            "world_size": world_size, "nodes": nodes, "ranks_per_node": world_size // nodes, "backend": backend,
            "threads_per_rank": 1, "per_device_throughput": per_device, "reference_throughput": reference,
            "efficiency": efficiency, "comm_share": 0.25, "comm_ms_per_step": 5.0, "step_ms": 20.0, "buckets": 3,
            "allreduce_bytes_per_step": GRADIENT_BYTES,
            "ranks": [{"rank": r, "node_rank": 0, "host": "box", "device": device, "median_step_ms": 20.0,
                       "peak_memory_bytes": None} for r in range(world_size)]}})


SCALING = [scaling_record(1, 100.0, 1.0), scaling_record(2, 180.0, 0.9), scaling_record(4, 320.0, 0.8)]
CURVE_BYTES = [2**k for k in range(10, 27, 4)]  # 1 KiB .. 64 MiB


def allreduce_record(published: float | None = 450.0, world_size: int = 4, curve: object = None) -> TestRecord:
    points = [{"bytes": b, "time_us": 10.0 + b / 3e5, "algbw_gbps": b / (10.0 + b / 3e5) / 1e3,
               "busbw_gbps": b / (10.0 + b / 3e5) / 1e3 * 2 * (world_size - 1) / world_size} for b in CURVE_BYTES]
    details = {"allreduce": {"world_size": world_size, "nodes": 1, "backend": "nccl",
                             "curve": points if curve is None else curve}}
    if published is not None:
        details.update(published=published, published_source="NVLink 4 spec")
    return TestRecord(f"bench_tests/test_ceilings.py::test_ceiling[cuda-allreduce-w{world_size}]", family="ceiling",
                      measures_roof=True, device="cuda:0", model="allreduce", mode="roof",
                      batch_size=CURVE_BYTES[-1], dtype="fp32", unit="GB/s",
                      throughput=points[-1]["busbw_gbps"], samples=[1.0] * 3, verdict=Verdict.NEW, details=details)


def colocated_record(mps_active: bool | None = None) -> TestRecord:
    members = [{"index": i, "model": "resnet18", "solo_throughput": 100.0, "colocated_throughput": solo,
                "interference": solo / 100.0, "peak_memory_bytes": 3 * 2**30, "solo_peak_memory_bytes": 2 * 2**30}
               for i, solo in enumerate((60.0, 55.0))]
    return TestRecord("bench_tests/test_colocated.py::test_colocated[cuda-resnet18+resnet18]", family="colocated",
                      device="cuda:0", model="resnet18+resnet18", mode="train", batch_size=32, dtype="fp32",
                      throughput=115.0,
                      efficiency=0.575, verdict=Verdict.PASS,
                      details={"colocated": {"processes": 2, "mps_active": mps_active, "mps_detail": "no control pipe",
                                             "threads_per_process": None, "members": members}})


def _page(records: list[TestRecord]) -> str:
    """The page of ``records`` built with version-2 ``details``, read as a results file reads them."""
    return render(SessionResults(dict(META), [as_loaded(r) for r in records]))


def _section(html: str) -> str:
    return report_section(html, "scaleout")


def _tooltips(svg: str) -> list[str]:
    return re.findall(r"<circle[^>]*><title>([^<]*)</title>", svg)


# --- the section with every kind of record ----------------------------------------------------------------

def test_scaling_table_and_charts_show_each_world_size():
    section = _section(_page([*SCALING, allreduce_record(), colocated_record()]))
    rows = table_rows(section, "scaling")
    assert [row[6] for row in rows] == ["1", "2", "4"]  # W, in order
    w2 = rows[1]
    assert w2[0] == "pass" and w2[1] == "test_scaling[cpu-resnet18-gloo-w2]"
    assert w2[9] == "gloo 1 thread/rank" and w2[10] == "180 samples/s" and w2[11] == "90"
    assert w2[12:17] == ["90.0%", "95.0%", "25.0%", "3", "44 MiB"]  # efficiency, baseline, comm share, buckets, bytes
    throughput_chart, efficiency_chart = [s for s in svg_charts(section) if "world size" in s]
    assert (set(_tooltips(throughput_chart))
            >= {"measured: 4, 320", "ideal (W x T(1)): 4, 400", "ideal (W x T(1)): 2, 200"})
    assert set(_tooltips(efficiency_chart)) >= {"measured: 2, 0.9", "measured: 4, 0.8", "ideal (1.0): 4, 1"}
    assert re.findall(r'class="tick"[^>]*>([^<]*)<', throughput_chart)[:3] == ["1", "2", "4"]  # a tick per world size


def test_the_section_reads_the_view_a_record_carries_not_its_familys_name():
    # a family of a plugin's own that declares the scaling view shows there; a scaling record whose family declared
    # no view does not
    mine = dataclasses.replace(scaling_record(2, 180.0, 0.9), family="my-ddp", view="scaling")
    rows = table_rows(_section(_page([scaling_record(1, 100.0, 1.0), mine])), "scaling")
    assert [row[6] for row in rows] == ["1", "2"]
    unviewed = dataclasses.replace(scaling_record(4, 320.0, 0.8), view=None)
    assert '<section id="scaleout">' not in _page([unviewed])


def test_allreduce_chart_draws_bus_and_algorithm_bandwidth_and_the_published_level():
    record = allreduce_record(published=450.0)
    svg = next(s for s in svg_charts(_section(_page([record]))) if "all-reduce bandwidth" in s)
    tips = _tooltips(svg)
    assert sum(t.startswith("busbw: ") for t in tips) == len(CURVE_BYTES)
    assert sum(t.startswith("algbw: ") for t in tips) == len(CURVE_BYTES)
    busbw_64mib = record.details["allreduce"]["curve"][-1]["busbw_gbps"]
    assert f"busbw: 67.1M, {float(f'{busbw_64mib:.3g}'):g}" in tips
    assert "published (NVLink 4 spec): 1.02k, 450" in tips and "published (NVLink 4 spec): 67.1M, 450" in tips
    assert "W=4, 1 node(s)" in svg and "nccl-tests/blob/master/doc/PERFORMANCE.md" in _page([record])
    assert "published" not in "".join(_tooltips(next(s for s in svg_charts(_page([allreduce_record(published=None)]))
                                                     if "all-reduce bandwidth" in s)))


def test_colocation_table_has_a_row_per_member():
    rows = table_rows(_section(_page([colocated_record(mps_active=None)])), "colocated")
    assert rows == [
        ["pass", "test_colocated[cuda-resnet18+resnet18]", "cuda:0", "2", "0", "resnet18", "100 samples/s",
         "60 samples/s",
         "60.0%", "3.000", "2.000", "unknown (no control pipe)"],
        ["pass", "test_colocated[cuda-resnet18+resnet18]", "cuda:0", "2", "1", "resnet18", "100 samples/s",
         "55 samples/s",
         "55.0%", "3.000", "2.000", "unknown (no control pipe)"]]
    assert table_rows(_page([colocated_record(mps_active=True)]), "colocated")[0][-1] == "yes (no control pipe)"
    assert table_rows(_page([colocated_record(mps_active=False)]), "colocated")[0][-1] == "no (no control pipe)"


def test_no_section_without_scale_out_records():
    plain = TestRecord("t[cpu-resnet18-bs8]", model="resnet18", mode="train", batch_size=8, device="cpu", dtype="fp32",
                       throughput=40.0, samples=[40.0] * 3)
    html = _page([plain])
    assert 'id="scaleout"' not in html and "Scale-out" not in html


def test_sub_sections_appear_only_with_their_records():
    section = _section(_page([colocated_record()]))
    assert "Co-located jobs" in section and "Data-parallel scaling" not in section and "All-reduce" not in section


def test_new_ceilings_are_named_by_size():
    records = [allreduce_record()]
    for name, size in (("d2h", 2**30), ("p2p", 2**30)):
        records.append(TestRecord(f"t::ceiling[{name}]", family="ceiling", measures_roof=True, device="cuda:0",
                                  model=name, mode="roof", batch_size=size, unit="GB/s", throughput=20.0))
    ceilings = _page(records).split("<h2>Ceilings</h2>")[1].split("</table>")[0]
    for size in ("all-reduce 64 MiB", "device→host 1 GiB", "GPU→GPU 1 GiB"):
        assert f'<td class="n">{size}</td>' in ceilings


# --- the ideal line, backends, nodes ------------------------------------------------------------------------

def test_ideal_line_falls_back_to_the_world_size_one_throughput():
    records = [scaling_record(w, t, None, reference=None) for w, t in ((1, 50.0), (2, 90.0))]
    throughput_chart = svg_charts(_section(_page(records)))[0]
    assert "ideal (W x T(1)): 2, 100" in _tooltips(throughput_chart)
    without_reference = [scaling_record(2, 90.0, None, reference=None)]  # no T(1) in the session: no ideal line
    assert "ideal (W x T(1))" not in _page(without_reference)


def test_backends_get_their_own_series_and_several_nodes_their_own_chart():
    records = [scaling_record(2, 180.0, 0.9, backend="gloo", device="cuda:0"),
               scaling_record(2, 190.0, 0.95, backend="nccl", device="cuda:0"),
               scaling_record(4, 300.0, 0.75, backend="nccl", device="cuda:0", nodes=2)]
    charts = [s for s in svg_charts(_section(_page(records))) if "throughput vs world size" in s]
    assert len(charts) == 2
    single, multi = sorted(charts, key=lambda s: "several nodes" in s)
    assert {"measured gloo: 2, 180", "measured nccl: 2, 190"} <= set(_tooltips(single))
    assert "measured: 4, 300" in _tooltips(multi)


def test_scale_out_records_stay_off_the_single_device_roofline():
    record = scaling_record(4, 320.0, 0.8)
    record.arithmetic_intensity, record.achieved_tflops = 30.0, 0.4  # summed over the 4 ranks
    assert 'class="chart roofline"' not in _page([record])


# --- failed and skipped tests -------------------------------------------------------------------------------

def test_records_without_details_render_as_dashes():
    scaling = TestRecord("t::test_scaling[cpu-w4]", family="scaling", device="cpu", model="resnet18", mode="train",
                         verdict=Verdict.FAILED, message="rank 2 exited")
    allreduce = TestRecord("t::test_ceiling[allreduce]", family="ceiling", measures_roof=True, model="allreduce",
                           mode="roof", unit="GB/s", verdict=Verdict.SKIPPED, details={"allreduce": None})
    colocated = TestRecord("t::test_colocated[x]", family="colocated", device="cuda:0", model="a+b",
                           verdict=Verdict.SKIPPED, details={"colocated": {"members": None, "mps_active": "maybe"}})
    html = _page([scaling, allreduce, colocated])
    section = _section(html)
    assert svg_charts(section) == []  # nothing to draw
    [scaling_row] = table_rows(section, "scaling")
    assert scaling_row[0] == "failed" and set(scaling_row[6:]) == {"–"}
    [colocated_row] = table_rows(section, "colocated")
    assert colocated_row[3:11] == ["–"] * 8 and colocated_row[11] == "unknown"
    assert "All-reduce" not in section


# --- any details render into a whole page --------------------------------------------------------------------

HOSTILE = ["<script>alert(1)</script>", '"><svg onload=x>', "</td></table>", "&<"]
TEXT = st.text(max_size=8) | st.sampled_from(HOSTILE)
# plausible, None, nan, inf, any
FIGURE = st.none() | st.sampled_from([1, 2, 4, 8]) | st.floats(1e-3, 1e6) | st.floats()
VALUE = FIGURE | st.integers(-(2**64), 2**64) | st.booleans() | TEXT | st.lists(st.integers(0, 4), max_size=2)
NAME = st.sampled_from(["gloo", "nccl", "resnet18"]) | st.none() | TEXT


def _details(**keys: st.SearchStrategy) -> st.SearchStrategy:
    """A details mapping: every key with a figure of its kind (so that charts get drawn), or each key perhaps
    missing and holding anything."""
    complete = st.fixed_dictionaries(keys)
    return st.one_of(complete, complete, complete,
                     st.fixed_dictionaries({}, optional={k: v | VALUE for k, v in keys.items()}))


def _figures(*names: str) -> dict[str, st.SearchStrategy]:
    return dict.fromkeys(names, FIGURE)


RANK = _details(host=NAME, device=NAME, **_figures("rank", "node_rank", "median_step_ms", "peak_memory_bytes"))
SCALING_DETAILS = _details(backend=NAME, ranks=st.lists(RANK, max_size=2), **_figures(
    "world_size", "nodes", "ranks_per_node", "threads_per_rank", "per_device_throughput", "reference_throughput",
    "efficiency", "comm_share", "comm_ms_per_step", "step_ms", "buckets", "allreduce_bytes_per_step"))
CURVE_POINT = _details(bytes=st.sampled_from(CURVE_BYTES) | FIGURE, **_figures("time_us", "algbw_gbps", "busbw_gbps"))
ALLREDUCE_DETAILS = _details(backend=NAME, curve=st.lists(CURVE_POINT, max_size=4), **_figures("world_size", "nodes"))
MEMBER = _details(model=NAME, **_figures("index", "solo_throughput", "colocated_throughput", "interference",
                                         "peak_memory_bytes", "solo_peak_memory_bytes"))
COLOCATED_DETAILS = _details(mps_active=st.none() | st.booleans(), mps_detail=NAME,
                             members=st.lists(MEMBER, max_size=3),
                             **_figures("processes", "threads_per_process"))


def _record(family: str, model: st.SearchStrategy, key: str, details: st.SearchStrategy) -> st.SearchStrategy:
    return st.builds(TestRecord, test_id=TEXT, family=st.just(family), model=model,
                     device=st.sampled_from(["cpu", "cuda:0"]) | st.none() | TEXT, mode=st.none() | TEXT,
                     batch_size=st.sampled_from([16]) | VALUE, dtype=st.none() | TEXT, unit=TEXT, throughput=FIGURE,
                     efficiency=FIGURE, baseline_efficiency=FIGURE, verdict=st.sampled_from(Verdict),
                     details=st.fixed_dictionaries({key: st.one_of(details, details, VALUE)},
                                                   optional={"published": FIGURE | VALUE, "published_source": NAME}))


SCALE_OUT_RECORD = (_record("scaling", st.sampled_from(["resnet18", "gpt2"]) | TEXT, "scaling", SCALING_DETAILS)
                    | _record("ceiling", st.just("allreduce"), "allreduce", ALLREDUCE_DETAILS)
                    | _record("colocated", st.sampled_from(["resnet18+resnet18"]) | TEXT, "colocated",
                              COLOCATED_DETAILS))


@settings(max_examples=80, deadline=None)
@given(st.lists(SCALE_OUT_RECORD, min_size=1, max_size=6))
def test_any_scale_out_details_render_a_whole_page(records):
    html = _page(records)
    assert html.lower().count("<script") == 1  # the page's own filter script: record text stayed escaped
    assert well_formed(html)
    listed = sum(r.family in ("scaling", "colocated") for r in records)
    if listed:  # no failed test goes missing from the tables
        section = _section(html)
        assert len(table_rows(section, "scaling")) + len(table_rows(section, "colocated")) >= listed


MEASURED = st.none() | st.floats(1e-3, 1e6)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), MEASURED, MEASURED), min_size=1, max_size=5), MEASURED)
def test_scaling_charts_draw_every_measured_point(points, reference):
    records = [scaling_record(w, throughput, efficiency, reference=reference) for w, throughput, efficiency in points]
    for index, record in enumerate(records):
        record.test_id += str(index)
    svgs = svg_charts(_page(records))
    throughput_chart = next((s for s in svgs if "throughput vs world size" in s), "")
    efficiency_chart = next((s for s in svgs if "scaling efficiency" in s), "")
    expected = {f"measured: {w}, {format_value(t)}" for w, t, _ in points if t is not None}
    assert {t for t in _tooltips(throughput_chart) if t.startswith("measured")} == expected
    assert bool(efficiency_chart) == any(e is not None for _, _, e in points)
    assert {t for t in _tooltips(efficiency_chart) if t.startswith("measured")} == {
        f"measured: {w}, {format_value(e)}" for w, _, e in points if e is not None}
    at_one = next((t for w, t, _ in points if w == 1 and t is not None), None)
    t1 = reference if reference is not None else at_one
    ideal = {t for t in _tooltips(throughput_chart) if t.startswith("ideal")}
    assert ideal == ({f"ideal (W x T(1)): {w}, {format_value(w * t1)}" for w, _, _ in points}
                     if t1 is not None and expected else set())

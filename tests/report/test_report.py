"""Rendering: escaping of arbitrary names, sections and charts, the merged page."""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import jinja2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markupsafe import escape
from support.html_checks import table_cells

from hwregress.report import render, render_merge, write_report
from hwregress.report.axes import nice_axis, tick_label
from hwregress.report.charts import Roof, RooflinePoint, bar_chart, line_chart, roofline_chart
from hwregress.store.figures import CompileComparison, CompileFigures, LlmFigures, LookFigures
from hwregress.store.result_files import write_results
from hwregress.store.results import SessionResults, TestRecord, load
from hwregress.store.verdicts import Verdict

META = {"hostname": "box", "started_at": "s", "finished_at": "f", "duration_s": 1.0, "args": ["-m", "cpu"],
        "hardware": [{"device": "cpu", "name": "AMD EPYC", "hardware_key": "amd-epyc-2t", "total_memory_bytes": 2**34,
                      "facts": {"threads": 2}, "environment": {"torch": "2.13.0", "python": "3.11"}}],
        "baseline_dir": "baselines"}


def throughput_record(model: str, batch: int, throughput: float, verdict: str = "pass",
                      device: str = "cpu") -> TestRecord:
    return TestRecord(f"t[{device}-{model}-bs{batch}]", device=device, model=model, mode="train", batch_size=batch,
                      dtype="fp32", throughput=throughput, samples=[throughput] * 3, peak_memory_bytes=batch * 2**20,
                      verdict=verdict, hardware_key="amd-epyc-2t", arithmetic_intensity=30.0, achieved_tflops=0.1,
                      op_categories={"compute": 0.8, "other": 0.2},
                      top_cpu_ops=[{"name": "aten::mkldnn_convolution", "calls": 3, "total_ms": 5.0, "share": 0.8,
                                    "category": "compute"}],
                      details={"telemetry_series": {"t_s": [0, 0.1, 0.2], "cpu_util_pct": [50, 90, 70]}})


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[tuple[str, tuple[str, ...]]] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add((tag, tuple(sorted(name for name, _ in attrs))))


def _tags(html: str) -> set[tuple[str, tuple[str, ...]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def _page_for(name: str) -> str:
    record = throughput_record("m", 1, 1.0)
    record.test_id = record.model = record.message = name
    return render(SessionResults(dict(META), [record]))


BENIGN_TAGS = _tags(_page_for("plain"))


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40)
       | st.sampled_from(["<script>x</script>", '"><img src=x onerror=a>', "</td><b>", "&<"]))
def test_arbitrary_test_names_are_escaped(name):
    html = _page_for(name)
    assert _tags(html) <= BENIGN_TAGS  # no element or attribute the name brought in
    assert str(escape(name)) in html


def test_script_injection_is_escaped():
    record = throughput_record("<script>alert(1)</script>", 1, 1.0)
    record.test_id = '"><img src=x onerror=alert(1)>'
    html = render(SessionResults(dict(META), [record]))
    assert "<script>alert(1)</script>" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_page_has_regressions_first_summary_and_charts():
    records = [throughput_record("resnet18", 1, 30.0), throughput_record("resnet18", 8, 40.0, "regression"),
               throughput_record("alexnet", 8, 77.0, "new")]
    html = render(SessionResults(dict(META), records))
    rows = re.findall(r'data-verdict="(\w+)"', html.split('id="results"')[1])
    assert rows[0] == "regression"
    assert 'class="badge v-regression">1 regression' in html
    assert "--update-baselines" in html  # how to record the new one
    assert html.count('<svg class="chart') >= 4  # throughput, memory, roofline, sparkline/split
    assert "aten::mkldnn_convolution" in html and "AMD EPYC" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # self-contained


def test_quantized_record_names_its_layers_and_base_dtype():
    record = throughput_record("bert_base", 1, 10.0)
    record.dtype = "int8"
    record.details.update(quantized_layers=74, quantized_base_dtype="bf16")
    assert ("74 Linear layers quantized to int8, the rest "
            "of the model in bf16." in render(SessionResults(dict(META), [record])))


def test_a_record_says_at_which_looks_its_window_was_looked_at_and_the_level_it_spent():
    record = throughput_record("resnet18", 8, 10.0)
    record.rounds, record.alpha = 25, 0.01 / 6
    record.details["extended_rounds"] = 15
    record.looks = LookFigures(planned=[10, 25, 50, 100, 200, 300], rounds=[10, 25], decision="pass")
    page = render(SessionResults(dict(META), [record]))
    assert "looked at after 10, 25 rounds (2 of 6 planned looks, α = 0.0017 each), the last deciding pass" in page
    assert "rounds added for noise" not in page


def test_charts_are_valid_svg_and_empty_without_data():
    assert line_chart({}, "t", "x", "y") == ""
    svg = line_chart({"a": [(1, 2.0), (8, 4.0)]}, "title <x>", "batch", "samples/s", log_x=True)
    assert svg.startswith("<svg") and "title &lt;x&gt;" in svg and "<polyline" in svg
    assert "<rect" in bar_chart([("gpu", 20.0)], "speedup", "x")


def write_outputs(results: SessionResults, report_dir: Path) -> dict[str, Path]:
    """The collector's order: the store writes the results, then the report its page under the same stem."""
    written = write_results(results, report_dir)
    return {**written.paths, **write_report(results, report_dir, written.stem)}


def test_write_outputs_and_merge(tmp_path):
    first = SessionResults(dict(META), [throughput_record("resnet18", 8, 40.0)])
    second_record = throughput_record("resnet18", 8, 400.0, device="cuda:0")
    second_record.hardware_key = "nvidia-h100-80gb-hbm3"
    second = SessionResults(dict(META, hostname="gpu-box"), [second_record])
    paths = write_outputs(first, tmp_path)
    assert load(paths["results"]).records[0].throughput == 40.0
    assert paths["report"].read_text().startswith("<!DOCTYPE html>")
    assert paths["report archive"].read_text() == paths["report"].read_text()
    stem = paths["results archive"].name.removeprefix("results-").removesuffix(".json")
    assert paths["report archive"].name == f"report-{stem}.html"
    html = render_merge([first, second])
    assert "amd-epyc-2t" in html and "nvidia-h100-80gb-hbm3" in html


def test_the_results_are_on_disk_before_the_page_is_rendered(tmp_path, monkeypatch):
    import hwregress.report as report

    def template_error(*args, **kwargs):
        raise jinja2.TemplateError("broken template")

    monkeypatch.setattr(report, "render", template_error)
    results = SessionResults(dict(META), [throughput_record("resnet18", 8, 40.0)])
    written = write_results(results, tmp_path)
    with pytest.raises(jinja2.TemplateError):
        write_report(results, tmp_path, written.stem)
    assert load(written.paths["results"]).records[0].throughput == 40.0
    assert load(written.paths["results archive"]).records[0].throughput == 40.0
    assert not (tmp_path / "report.html").exists()


def test_two_sessions_writing_in_the_same_second_keep_both_archives(tmp_path):
    started = "2026-11-22T10:15:00+00:00"  # both sessions' clock: one second, one report folder
    for session, throughput in (("vm-1-20261122T101500Z", 40.0), ("vm-2-20261122T101500Z", 50.0)):
        meta = dict(META, session=session, started_at=started)
        write_outputs(SessionResults(meta, [throughput_record("resnet18", 8, throughput)]), tmp_path)
    archives = sorted((tmp_path / "archive").glob("results-*.json"))
    assert [path.name for path in archives] == ["results-20261122-101500-vm-1-20261122T101500Z.json",
                                                "results-20261122-101500-vm-2-20261122T101500Z.json"]
    assert [json.loads(path.read_text())["records"][0]["throughput"] for path in archives] == [40.0, 50.0]
    assert len(list((tmp_path / "archive").glob("report-20261122-101500-vm-*.html"))) == 2


def test_a_session_written_twice_in_one_second_keeps_both_archives(tmp_path):
    meta = dict(META, session="vm-1-20261122T101500Z", started_at="2026-11-22T10:15:00+00:00")
    first = write_outputs(SessionResults(meta, [throughput_record("resnet18", 8, 40.0)]), tmp_path)
    second = write_outputs(SessionResults(meta, [throughput_record("resnet18", 8, 50.0)]), tmp_path)
    assert first["results archive"] != second["results archive"]
    assert load(first["results archive"]).records[0].throughput == 40.0
    assert load(second["results archive"]).records[0].throughput == 50.0
    assert second["report archive"].exists() and first["report archive"].exists()


def test_merge_shows_ceiling_sizes_not_batches():
    session = SessionResults(dict(META), [ceiling_record("copy", 64 * 2**20, 20.0, "GB/s")])
    html = render_merge([session, session])
    assert "<td>copy 64 MiB</td>" in html and "67108864" not in html and "<td>None</td>" not in html


# --- axes: ticks at 1-2-5 x 10^k, compact labels -------------------------------------------------------

SI = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def _label_value(label: str) -> float:
    return float(label[:-1]) * SI[label[-1]] if label[-1] in SI else float(label)


def _significant_digits(label: str) -> int:
    mantissa = label.rstrip("kMGTP").split("e")[0].lstrip("-").replace(".", "").lstrip("0")
    return len(mantissa)


def _is_one_two_five(value: float) -> bool:
    return any(math.isclose(value, m * 10.0 ** round(math.log10(value / m)), rel_tol=1e-9) for m in (1, 2, 5))


def _check_labels(axis, resolution_of) -> None:
    labels = axis.labels()
    assert len(set(labels)) == len(labels), labels
    for tick, label in zip(axis.ticks, labels, strict=True):
        assert abs(_label_value(label) - tick) <= resolution_of(tick), (tick, label)
        assert len(label) <= 12, label


SPAN_LIMIT = 1e12


@settings(max_examples=300, deadline=None)
@given(st.floats(-SPAN_LIMIT, SPAN_LIMIT, allow_subnormal=False),
       st.floats(-SPAN_LIMIT, SPAN_LIMIT, allow_subnormal=False))
def test_linear_ticks_are_multiples_of_a_one_two_five_step(a, b):
    low, high = min(a, b), max(a, b)
    axis = nice_axis(low, high)
    assert axis.low <= low and high <= axis.high
    assert 3 <= len(axis.ticks) <= 10
    assert _is_one_two_five(axis.step)
    for tick in axis.ticks:
        assert axis.low <= tick <= axis.high
        assert abs(tick / axis.step - round(tick / axis.step)) < 1e-6
    _check_labels(axis, lambda tick: axis.step * 1e-3)
    digits_needed = math.ceil(math.log10(max(abs(axis.low), abs(axis.high)) / axis.step)) + 2
    assert all(_significant_digits(label) <= digits_needed for label in axis.labels()), axis.labels()


@settings(max_examples=300, deadline=None)
@given(st.floats(1e-12, SPAN_LIMIT), st.floats(1e-12, SPAN_LIMIT))
def test_log_ticks_are_one_two_five_times_a_power_of_ten(a, b):
    low, high = min(a, b), max(a, b)
    axis = nice_axis(low, high, log=True)
    assert axis.low <= low and high <= axis.high
    assert 3 <= len(axis.ticks) <= 10
    for tick in axis.ticks:
        assert axis.low <= tick <= axis.high and _is_one_two_five(tick)
    decades = round(math.log10(axis.high / axis.low))
    if decades <= 3:  # few decades: 2 and 5 in between
        assert len(axis.ticks) == 3 * decades + 1
    _check_labels(axis, lambda tick: tick * 1e-6)


def test_tick_labels_are_compact():
    assert tick_label(0.1 + 0.2, 1e-4) == "0.3"
    assert tick_label(1000.0, 1.0) == "1k" and tick_label(2.5e6, 1e3) == "2.5M" and tick_label(-1500, 1) == "-1.5k"
    assert tick_label(0.001, 1e-9) == "1e-3" and tick_label(2.5e-4, 1e-9) == "2.5e-4"
    assert tick_label(1e-17, 1e-4) == "0" and tick_label(float("nan"), 1.0) == "–"
    assert nice_axis(0, 0.3).labels() == ["0", "0.05", "0.1", "0.15", "0.2", "0.25", "0.3"]
    assert nice_axis(0.005, 50, log=True).labels() == ["1e-3", "0.01", "0.1", "1", "10", "100"]
    with pytest.raises(ValueError, match="log axis"):
        nice_axis(0.0, 1.0, log=True)


def test_chart_tick_labels_have_no_float_noise():
    svg = line_chart({"a": [(1, 0.1), (2, 0.30000000000000004), (4, 0.7)]}, "t", "batch", "y", log_x=True,
                     ticks_at_data_x=True)
    ticks = re.findall(r'class="tick"[^>]*>([^<]*)<', svg)
    assert ticks[:3] == ["1", "2", "4"]  # batch sizes as written
    assert ticks[3:] == ["0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7"]


# --- roofline: markers labelled by batch size, roofs as lines --------------------------------------------

def ceiling_record(name: str, size: int, throughput: float, unit: str) -> TestRecord:
    return TestRecord(f"bench_tests/test_ceilings.py::test_ceiling[cpu-{name}-fp32]", family="ceiling",
                      measures_roof=True, device="cpu", model=name, mode="roof", batch_size=size, dtype="fp32",
                      unit=unit, throughput=throughput,
                      samples=[throughput] * 3, verdict="new")


def _roofline_svg(html: str) -> str:
    return re.search(r'<svg class="chart roofline".*?</svg>', html, re.S).group(0)


def test_roofline_draws_batch_sizes_as_labelled_markers_and_roofs_as_lines():
    records = [throughput_record("resnet18", batch, 30.0 * batch) for batch in (1, 4, 16)]
    for batch, record in zip((1, 4, 16), records, strict=True):
        record.arithmetic_intensity, record.achieved_tflops = 10.0 * batch, 0.05 * batch
    records += [ceiling_record("gemm", 1024, 0.5, "TFLOP/s"), ceiling_record("copy", 64 * 2**20, 20.0, "GB/s")]
    svg = _roofline_svg(render(SessionResults(dict(META), records)))
    assert svg.count("<polyline") == 1  # the one measured roof; the model's batch sizes are not joined
    tooltips = re.findall(r"<circle[^>]*><title>([^<]*)</title>", svg)
    assert sorted(tooltips) == sorted(f"resnet18 train fp32, bs={b}: {10 * b:g} FLOP/byte, {0.05 * b:g} TFLOP/s"
                                      for b in (1, 4, 16))
    assert sorted(re.findall(r'class="ptlabel"[^>]*>([^<]*)<', svg)) == ["bs=1", "bs=16", "bs=4"]


def test_roofline_chart_without_batch_sizes_has_no_labels():
    svg = roofline_chart([RooflinePoint("m", None, 5.0, 0.1), RooflinePoint("m", float("nan"), 6.0, 0.2)],
                         [Roof("spec", 1.0, 0.1)], "r")
    assert svg.count("<circle") == 3 and "ptlabel" not in svg  # two points and the legend marker
    assert roofline_chart([RooflinePoint("m", 1, float("nan"), 0.1)], [Roof("spec", 1.0, 0.1)], "r") == ""


# --- ceiling rows: no problem size in the batch column --------------------------------------------------

def _result_rows(html: str) -> list[list[str]]:
    return [[cell.strip() for cell in row] for row in table_cells(html, "id", "results")]


BATCH_COLUMN = 5


def test_ceiling_rows_show_their_size_in_the_details_not_as_a_batch():
    records = [ceiling_record("gemm", 4096, 50.0, "TFLOP/s"), ceiling_record("copy", 256 * 2**20, 900.0, "GB/s"),
               throughput_record("resnet18", 8, 40.0)]
    html = render(SessionResults(dict(META), records))
    batches = {row[1]: row[BATCH_COLUMN] for row in _result_rows(html)}
    assert (batches
            == {"test_ceiling[cpu-gemm-fp32]": "–", "test_ceiling[cpu-copy-fp32]": "–", "t[cpu-resnet18-bs8]": "8"})
    assert html.count("GEMM 4096³") >= 2 and html.count("copy 256 MiB") >= 2  # ceilings table and per-test detail
    assert "4,096" not in html and "268,435,456" not in html


# --- the verdict filter -------------------------------------------------------------------------------

def test_verdict_filter_offers_the_verdicts_present_in_verdict_order():
    verdicts = ["pass", "new", "regression", "other-hardware", "pass", "unstable"]
    records = [throughput_record(f"m{i}", 1, 1.0, verdict) for i, verdict in enumerate(verdicts)]
    html = render(SessionResults(dict(META), records))
    options = re.findall(r'<input type="checkbox" name="verdict" value="([^"]+)" checked>', html)
    assert options == [v.value for v in Verdict if v.value in verdicts]
    results = html.split('id="results"')[1].split("</table>")[0]
    rows = re.findall(r"<tr[^>]*>", results)[1:]  # after the header
    assert len(rows) == len(records) and all('data-verdict="' in row for row in rows)
    assert sorted(re.findall(r'data-verdict="([^"]+)"', results)) == sorted(verdicts)
    assert 'id="verdict-filter"' in html and '"#results tr[data-verdict]"' in html  # what the script filters


# --- diagnosis, health, noise-limited threshold, identity changes -----------------------------------------

def _annotated(verdict: str) -> TestRecord:
    record = throughput_record("resnet18", 8, 40.0, verdict)
    record.diagnosis = ["<b>thermal throttling</b> (most likely)", "another process used the CPU"]
    record.health = {"swap_used": "<script>alert(1)</script> 2 GiB",
                     "cpu_governor": {"now": "powersave", "want": "performance"},
                     "gpu_other_processes": []}
    record.threshold, record.wanted_threshold = 0.05, 0.12
    record.identity_changes = ["cpu model: EPYC 7B12 -> EPYC 9B14"]
    return record


def test_new_record_fields_are_shown_escaped():
    html = render(SessionResults(dict(META), [_annotated("other-hardware")]))
    diagnosis = re.search(r'<ol class="diagnosis"[^>]*>(.*?)</ol>', html, re.S).group(1)
    assert re.findall(r"<li>(.*?)</li>", diagnosis) == ["&lt;b&gt;thermal throttling&lt;/b&gt; (most likely)",
                                                         "another process used the CPU"]
    assert "noise-limited: the bounds wanted 12.0%, capped at 5.0%" in html
    assert "cpu model: EPYC 7B12 -&gt; EPYC 9B14" in html
    health = re.search(r'<table class="health">(.*?)</table>', html, re.S).group(1)
    assert "swap_used" in health and "&lt;script&gt;alert(1)&lt;/script&gt; 2 GiB" in health
    assert "now: powersave; want: performance" in health and "<td>gpu_other_processes</td><td>none</td>" in health
    assert "<script>alert" not in html and "<b>thermal" not in html


def test_identity_changes_only_for_other_hardware_and_empty_fields_render_nothing():
    html = render(SessionResults(dict(META), [_annotated("regression")]))
    assert "EPYC 9B14" not in html and "identity changed" not in html
    plain = throughput_record("resnet18", 8, 40.0)
    plain.identity_changes = []
    html = render(SessionResults(dict(META), [plain]))
    for absent in ('class="diagnosis"', "noise-limited", 'class="health"', "identity changed"):
        assert absent not in html


# --- any session renders, and record text never opens a script -------------------------------------------

HOSTILE = ["<script>alert(1)</script>", "<SCRIPT src=//x>", '"><script>x', "</title><script>", "<scr<script>ipt>",
           "]]><script>", "\x00<script"]
TEXT = st.text(max_size=20) | st.sampled_from(HOSTILE)
NUMBER = st.none() | st.floats() | st.integers(-(2**64), 2**64)
SESSION_RECORD = st.builds(
    TestRecord, test_id=TEXT, family=st.sampled_from(["throughput", "ceiling", "parity", "output-parity"]) | TEXT,
    device=st.none() | st.sampled_from(["cpu", "cuda:0"]) | TEXT, device_name=st.none() | TEXT,
    model=st.none() | st.sampled_from(["gemm", "copy", "h2d"]) | TEXT, mode=st.none() | TEXT, batch_size=NUMBER,
    dtype=st.none() | TEXT, unit=TEXT, throughput=NUMBER, throughput_iqr=NUMBER,
    samples=st.lists(st.floats(), max_size=3),
    latency_ms=NUMBER, peak_memory_bytes=NUMBER, accuracy=NUMBER, speedup=NUMBER, baseline_throughput=NUMBER,
    baseline_peak_memory_bytes=NUMBER, ratio=NUMBER, threshold=NUMBER, wanted_threshold=NUMBER,
    verdict=st.sampled_from(Verdict), message=TEXT, identity_changes=st.lists(TEXT, max_size=2),
    health=st.dictionaries(TEXT, TEXT | NUMBER | st.lists(TEXT, max_size=2), max_size=2),
    diagnosis=st.lists(TEXT, max_size=2), achieved_tflops=NUMBER, mfu=NUMBER, arithmetic_intensity=NUMBER,
    energy_j_per_sample=NUMBER, flops_per_sample=NUMBER, op_categories=st.dictionaries(TEXT, st.floats(), max_size=2),
    trace_path=st.none() | TEXT,
    details=st.fixed_dictionaries({"telemetry_series": st.fixed_dictionaries(
        {"t_s": st.lists(st.floats(), max_size=3), "cpu_util_pct": st.lists(NUMBER, max_size=3)})}))


# records of one device that reach every chart (throughput by batch size, roofline, ceilings), any figures
CHARTED_RECORD = SESSION_RECORD.map(lambda r: _charted(r))


def _charted(record: TestRecord) -> TestRecord:
    index = len(record.test_id) % 3
    record.family, record.device, record.dtype, record.mode = (("throughput", "ceiling", "ceiling")[index], "cpu",
                                                               "fp32", "train")
    record.model = ("resnet18", "gemm", "copy")[index]
    return record


@settings(max_examples=80, deadline=None)
@given(st.lists(SESSION_RECORD, max_size=4), st.lists(CHARTED_RECORD, max_size=5))
def test_any_session_renders_and_record_text_stays_escaped(records, charted):
    html = render(SessionResults(dict(META), records + charted))
    assert html.lower().count("<script") == 1  # the page's own filter script


def test_tokens_and_samples_per_second_never_share_a_chart_axis():
    text = [TestRecord(f"t::text{b}", model="gpt2", mode="infer", device="cpu", dtype="fp32", batch_size=b,
                       unit="tokens/s",
                       throughput=300.0 * b, details={"context": 128}) for b in (1, 2)]
    images = [TestRecord(f"t::img{b}", model="resnet18", mode="infer", device="cpu", dtype="fp32", batch_size=b,
                         throughput=30.0 * b) for b in (1, 8)]
    html = render(SessionResults(dict(META), text + images))
    assert 'aria-label="throughput (tokens/s) vs batch size — cpu infer"' in html
    assert 'aria-label="throughput (samples/s) vs batch size — cpu infer"' in html
    assert "gpt2 ctx128 fp32" in html


def test_a_metric_that_did_not_change_is_a_visible_line_at_mid_height():
    """A constant series (RSS that never moved) once drew a zero-height line, an empty box in the browser."""
    from hwregress.report import charts

    flat = str(charts.sparkline([0.0, 0.1, 0.2], [5.0, 5.0, 5.0], "rss", "bytes"))
    assert 'points="0.0,20.0 110.0,20.0 220.0,20.0"' in flat and '<line x1="0" y1="39"' in flat
    moving = str(charts.sparkline([0.0, 1.0], [1.0, 3.0], "power", "W"))
    assert 'points="0.0,36.0 220.0,4.0"' in moving  # lowest at the bottom, highest at the top


# --- compile time: its cache state, and a comparison only of the same state -------------------------------------

def _compiled(comparison: dict) -> TestRecord:
    record = throughput_record("resnet18", 8, 40.0)
    record.compile = CompileFigures(compile_s=19.3, backend="inductor", frames_compiled=1, cache="cold",
                                    vs_baseline=CompileComparison.from_json(comparison))
    return record


def test_compile_time_shows_its_cache_state_and_a_comparison_only_of_the_same_state():
    compared = render(SessionResults(dict(META), [_compiled({"compared": True, "cache": "cold",
                                                             "baseline_compile_s": 17.5, "ratio": 19.3 / 17.5})]))
    assert "the first call took 19.3 s (1 frames, cold cache)" in compared
    assert "Baseline compile 17.5 s, same cache state (1.10x; shown, not judged)" in compared
    reason = "compile time not compared: this session compiled with a cold cache, the baseline's with a warm one"
    refused = render(SessionResults(dict(META), [_compiled({"compared": False, "cache": "cold",
                                                            "baseline_cache": "warm", "reason": reason})]))
    assert ("compile time not compared: this session compiled with a cold cache, the "
            "baseline&#39;s with a warm one" in refused)
    assert "Baseline compile" not in refused


def test_decode_details_name_the_judged_step_figures_itl_and_tpot_apart():
    record = throughput_record("gpt2", 1, 30.0)
    record.mode, record.unit, record.latency_ms, record.baseline_latency_ms = "decode", "tokens/s", 33.5, 32.0
    record.llm = LlmFigures(context=128, new_tokens=16, ttft_ms=120.0, itl_p50_ms=33.5, itl_p90_ms=36.0,
                            itl_p99_ms=41.0,
                            tpot_ms=34.0, output_tokens_per_s=25.0, decode_tokens_per_s=29.9,
                            prefill_tokens_per_s=1066.0, kv_cache_dtype="bfloat16")
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", render(SessionResults(dict(META), [record]))))
    assert ("Judged, the decode steps: 29.9 tokens/s, inter-token latency (ITL) p50 33.5 / p90 36 / p99 41 ms "
            "(baseline ITL p50 32 ms)") in text
    assert "End to end: 25 output tokens/s, time to first token 120 ms" in text
    assert "(TPOT, (e2e − TTFT) / (n − 1) per request) 34 ms" in text and "KV cache bfloat16" in text


def test_a_family_view_is_found_by_name_and_an_unknown_name_lists_the_views():
    from hwregress.report import family_views

    assert family_views.names() == ["parity", "ceilings", "scaleout", "spark", "serving"]
    assert family_views.get("spark").reads == ("spark",)
    with pytest.raises(KeyError, match="unknown report view 'echo'; the views: parity, ceilings, scaleout, spark, "
                                       "serving"):
        family_views.get("echo")


def test_a_family_without_a_view_shows_in_the_generic_table_and_opens_no_family_section():
    echo = TestRecord("t[cpu-echo-bs2-fp32-hello]", family="echo", device="cpu", model="echo", mode="echo",
                      batch_size=2, dtype="fp32", throughput=7.0, samples=[7.0] * 3, unit="samples/s", verdict="pass")
    digits = TestRecord("t[cpu-fp32]", family="parity", device="cpu", model="digits_cnn", dtype="fp32", accuracy=0.97,
                        verdict="pass")
    html = render(SessionResults(META, [echo, digits]))
    rows = table_cells(html, "id", "results")
    assert [[cell.strip() for cell in row[2:8]] for row in rows if "echo" in row[1]] == [
        ["cpu", "echo", "echo", "2", "fp32", "7"]]
    assert "<h2>Accuracy parity</h2>" in html
    alone = render(SessionResults(META, [echo]))
    assert "Accuracy parity" not in alone and "<h2>Ceilings</h2>" not in alone
    assert 'id="scaleout"' not in alone and 'id="spark"' not in alone

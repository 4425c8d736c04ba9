"""Rendering: escaping of arbitrary names, sections and charts, the merged page."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from hypothesis import given, settings
from hypothesis import strategies as st
from markupsafe import escape

from hwregress.report import render, render_merge, write_outputs
from hwregress.report.charts import bar_chart, line_chart
from hwregress.results import SessionResults, TestRecord, load

META = {"hostname": "box", "started_at": "s", "finished_at": "f", "duration_s": 1.0, "args": ["-m", "cpu"],
        "hardware": [{"device": "cpu", "name": "AMD EPYC", "hardware_key": "amd-epyc-2t", "total_memory_bytes": 2**34,
                      "facts": {"threads": 2}, "environment": {"torch": "2.13.0", "python": "3.11"}}],
        "baseline_dir": "baselines"}


def throughput_record(model: str, batch: int, throughput: float, verdict: str = "pass", device: str = "cpu") -> TestRecord:
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
@given(st.text(min_size=1, max_size=40) | st.sampled_from(["<script>x</script>", '"><img src=x onerror=a>', "</td><b>", "&<"]))
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


def test_charts_are_valid_svg_and_empty_without_data():
    assert line_chart({}, "t", "x", "y") == ""
    svg = line_chart({"a": [(1, 2.0), (8, 4.0)]}, "title <x>", "batch", "samples/s", log_x=True)
    assert svg.startswith("<svg") and "title &lt;x&gt;" in svg and "<polyline" in svg
    assert "<rect" in bar_chart([("gpu", 20.0)], "speedup", "x")


def test_write_outputs_and_merge(tmp_path):
    first = SessionResults(dict(META), [throughput_record("resnet18", 8, 40.0)])
    second_record = throughput_record("resnet18", 8, 400.0, device="cuda:0")
    second_record.hardware_key = "nvidia-h100-80gb-hbm3"
    second = SessionResults(dict(META, hostname="gpu-box"), [second_record])
    paths = write_outputs(first, tmp_path)
    assert load(paths["results"]).records[0].throughput == 40.0
    assert paths["report"].read_text().startswith("<!DOCTYPE html>")
    html = render_merge([first, second])
    assert "amd-epyc-2t" in html and "nvidia-h100-80gb-hbm3" in html

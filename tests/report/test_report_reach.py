"""What the session's verdicts could catch, in the report (issue 28): the tolerance each device kind was judged with in
the header, each judged figure's minimum detectable slowdown (MDS) in the per-test table (or why there is none), the
MDS in the what-regressed chart's tooltip, and the summary line "this session would catch a slowdown of >= X% on N of
M judged tests" (X the largest stated MDS, N the tests that state one, M the judged ones)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from support.html_checks import table_cells

from hwregress.judge.tolerances import Tolerances
from hwregress.report import render
from hwregress.store.figures import ReachFigures
from hwregress.store.results import SessionResults, TestRecord

SVG = "{http://www.w3.org/2000/svg}"
META = {"hostname": "box", "hardware": [], "tolerances": vars(Tolerances())}
WHY = "4 rounds against 4 cannot reach p < 0.01 (the exact Mann-Whitney test's smallest p is 1/70)"


def _reach(figure: str = "throughput", mds: float | None = 0.081, why_none: str | None = None,
           sessions: int = 3) -> ReachFigures:
    return ReachFigures(figure=figure, mds=mds, power=0.9, alpha=0.01 if figure == "throughput" else None,
                        threshold=0.05, within=0.03, between=0.02, sessions=sessions, rounds=[10, 30],
                        why_none=why_none)


def _record(name: str, device: str = "cpu", verdict: str = "pass", **fields) -> TestRecord:
    judged = {"baseline_throughput": 100.0, "ratio": 1.0, "threshold": 0.05, **fields}
    return TestRecord(f"t.py::t[{device}-{name}]", device=device, model=name, mode="train", batch_size=4,
                      dtype="fp32", throughput=100.0, samples=[99.0, 100.0, 101.0], verdict=verdict, **judged)


def _text(html_fragment: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html_fragment).split())


def _header(html: str) -> str:
    return _text(re.search(r"<p class=\"muted\">Throughput tolerance.*?</p>", html, re.S).group(0))


def test_a_cpu_only_sessions_header_states_the_cpu_tolerance_it_was_judged_with():
    html = render(SessionResults(dict(META), [_record("a"), _record("b")]))
    header = _header(html)
    assert "Throughput tolerance 15.0% on the CPU" in header
    assert not re.search(r"(?<![0-9])5\.0%", header), header  # the accelerators' tolerance judged none of its tests


def test_a_mixed_sessions_header_states_each_device_kinds_tolerance():
    html = render(SessionResults(dict(META), [_record("a"), _record("b", device="cuda:0")]))
    assert "Throughput tolerance 15.0% on the CPU, 5.0% on cuda" in _header(html)
    assert "25.0% cap" in _header(html)


def test_the_table_shows_each_judged_figures_mds_or_why_there_is_none():
    records = [_record("a", reach=_reach(), latency_reach=_reach("latency", 0.102)),
               _record("b", reach=_reach(mds=None, why_none=WHY)),
               _record("c")]
    html = render(SessionResults(dict(META), records))
    header = re.search(r'<table id="results">\s*<tr>(.*?)</tr>', html, re.S).group(1)
    columns = re.findall(r"<th>(.*?)</th>", header)
    assert "catches ≥" in columns
    cells = {row[1]: row[columns.index("catches ≥")] for row in table_cells(html, "id", "results")}
    assert _text(cells["t[cpu-a]"]) == "8.1% latency +10.2%"
    assert _text(cells["t[cpu-b]"]) == "none" + WHY  # the sentence is a block under "none"
    assert _text(cells["t[cpu-c]"]) == "–"


def test_the_what_regressed_tooltip_names_the_mds_or_why_there_is_none():
    records = [_record("a", reach=_reach()), _record("b", reach=_reach(mds=None, why_none=WHY))]
    html = render(SessionResults(dict(META), records))
    chart = re.search(r'<svg class="chart regressed".*?</svg>', html, re.S).group(0)
    dots = [el.find(f"{SVG}title").text for el in ET.fromstring(chart).iter() if el.get("class") == "dot"]
    assert len(dots) == 2
    assert any(text.startswith("t.py::t[cpu-a]") and "catches a slowdown of ≥ 8.1% with 90% probability" in text
               for text in dots), dots
    assert any(text.startswith("t.py::t[cpu-b]") and f"no minimum detectable slowdown: {WHY}" in text
               for text in dots), dots


def _reach_line(html: str) -> str:
    return _text(re.search(r'<p class="reach-line" id="reach-line"[^>]*>(.*?)</p>', html, re.S).group(1))


def test_the_summary_line_states_the_largest_mds_over_the_tests_that_state_one():
    records = [_record("a", reach=_reach(mds=0.05)), _record("b", reach=_reach(mds=0.12)),
               _record("c", reach=_reach(mds=0.30), latency_reach=_reach("latency", 0.02)),
               _record("d", reach=_reach(mds=None, why_none=WHY)),
               _record("e", verdict="new", ratio=None, threshold=None)]
    line = _reach_line(render(SessionResults(dict(META), records)))
    assert line.startswith("This session would catch a slowdown of ≥ 30.0% on 3 of 4 judged tests"), line
    assert "median 12.0%" in line and "1 states none" in line


def test_a_session_that_judged_nothing_says_it_states_no_slowdown():
    line = _reach_line(render(SessionResults(dict(META), [_record("e", verdict="new", ratio=None)])))
    assert line == "No test was judged against a baseline: this session states no slowdown it would catch."

"""The report's A/B view (issue 29, docs/ab.md): the header naming both stacks and what differs between them, the
forest plot of B/A with its one-sided bounds over the threshold band, each test's pairs in time order with the dropped
pairs and failed windows marked, the table of verdicts, and pages that stay whole whatever an ``ab`` sub-record holds.
The records are built as results.json holds them (``TestRecord.from_json``), as ``report render`` reads them."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html import unescape
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support.html_checks import report_section, svg_charts, table_cells, table_rows, well_formed
from synthetic import AB_META, NIGHTLY, ab_pairs, ab_record, ab_test_id

from hwregress.cli import main
from hwregress.report import render
from hwregress.store.atomic import atomic_write_json
from hwregress.store.results import SessionResults, TestRecord

SVG = "{http://www.w3.org/2000/svg}"
META = {"hostname": "box", "started_at": "s", "finished_at": "f", "duration_s": 1.0, "args": ["-m", "cpu"],
        "hardware": [], "baseline_dir": "baselines"}
FAILED_A = "RuntimeError: worker A died"
DROPPED_FAILED = f"A's window failed: {FAILED_A}"
DROPPED_BALANCE = "balance: a surplus BA pair, the latest first"


def with_drops(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pair 3's A window failed (dropped), pair 6 dropped for balance."""
    found[3].update(a=None, a_error=FAILED_A, dropped=DROPPED_FAILED)
    found[6].update(dropped=DROPPED_BALANCE)
    return found


def plain_record(model: str = "vgg11") -> TestRecord:
    return TestRecord(ab_test_id(model), family="throughput", device="cpu", model=model, mode="train", batch_size=32,
                      dtype="fp32", unit="samples/s", throughput=50.0, baseline_throughput=50.0, ratio=1.0,
                      threshold=0.05, verdict="pass")


def _page(records: list[TestRecord], meta: dict[str, Any] | None = None) -> str:
    return render(SessionResults({**META, "ab": AB_META} if meta is None else meta, records))


def _section(html: str) -> str:
    return report_section(html, "ab")


def _svg(section: str, css_class: str) -> ET.Element:
    [found] = [s for s in svg_charts(section) if f'class="{css_class}"' in s.split(">", 1)[0]]
    return ET.fromstring(found)


def _titled(root: ET.Element, css_class: str) -> list[tuple[ET.Element, str]]:
    """The elements of ``css_class`` with their hover title."""
    return [(el, el.find(f"{SVG}title").text) for el in root.iter() if el.get("class") == css_class]


def _markers(root: ET.Element) -> list[tuple[ET.Element, str]]:
    """Every marker of a pairs chart (circle: A, rect: B) with its tooltip."""
    return [(el, el.find(f"{SVG}title").text) for el in root.iter()
            if el.tag in (f"{SVG}circle", f"{SVG}rect") and el.get("class") in ("ab-a", "ab-b")]


# --- the header ----------------------------------------------------------------------------------------------

def test_header_names_both_stacks_their_settings_and_what_differs():
    section = _section(_page([ab_record()]))
    assert table_rows(section, "ab-stacks") == [["A", "/usr/bin/python3", "the session's environment"],
                                                ["B", NIGHTLY, "OMP_NUM_THREADS=1"]]
    assert re.findall(r'<li><code>([^<]*)</code></li>', section)[:2] == ["torch 2.13.0 -&gt; 2.11.0",
                                                                         "env OMP_NUM_THREADS: unset -&gt; 1"]
    sentence = " ".join(re.sub(r"<[^>]+>", "", re.search(r'<p class="ab-means">(.*?)</p>', section, re.S)
                               .group(1)).split())
    assert "pass: no difference beyond ±5.0% either way" in sentence
    assert "one-sided (1 − α) bounds" in sentence


def test_without_the_sessions_ab_meta_the_header_comes_from_the_first_ab_record():
    section = _section(_page([plain_record(), ab_record()], meta=dict(META)))
    assert [row[:2] for row in table_rows(section, "ab-stacks")] == [["A", "/usr/bin/python3"], ["B", NIGHTLY]]
    assert "±5.0%" in section


# --- the forest plot ------------------------------------------------------------------------------------------

def test_a_regressions_forest_row_draws_its_ratio_its_interval_and_the_band():
    root = _svg(_section(_page([ab_record()])), "chart ab-forest")
    [(band, band_title)] = _titled(root, "threshold-band")
    [(line, line_title)] = _titled(root, "ab-interval")
    [(dot, dot_title)] = _titled(root, "dot")
    [(one, _)] = _titled(root, "ab-one")
    assert "band 0.95–1.05" in band_title
    assert "[0.88, 0.92]" in line_title and "one-sided 99.5% bounds" in line_title
    assert "regression" in dot_title and "ratio 0.9" in dot_title
    band_left, band_right = float(band.get("x")), float(band.get("x")) + float(band.get("width"))
    low, high, center = float(line.get("x1")), float(line.get("x2")), float(dot.get("points").split(",")[0])
    assert low < center < high < band_left < float(one.get("x1")) < band_right  # 0.88 < 0.9 < 0.92 < 0.95 < 1 < 1.05
    assert dot.get("fill") == "#D55E00"  # the what-regressed chart's colour of a regression


def test_a_test_without_a_ratio_is_listed_with_its_message_instead_of_a_dot():
    too_few = ab_record("unstable", None, None, None, ab_pairs()[:2], model="vgg11",
                        message="B against A undecided: 2 of 2 pairs kept, too few to judge")
    root = _svg(_section(_page([ab_record(), too_few])), "chart ab-forest")
    assert len(_titled(root, "dot")) == 1
    [(_, text)] = _titled(root, "ab-none")
    assert text == "vgg11 train bs32 fp32 cpu: unstable, no ratio: B against A undecided: 2 of 2 pairs kept, too few " \
                   "to judge"


def test_a_ratio_without_bounds_draws_a_dot_and_no_interval():
    root = _svg(_section(_page([ab_record("unstable", 0.97, None, None)])), "chart ab-forest")
    [(_, tip)] = _titled(root, "dot")
    assert not _titled(root, "ab-interval") and "no interval" in tip


# --- each test's pairs ------------------------------------------------------------------------------------------

def test_the_pairs_chart_draws_a_and_b_of_every_pair_in_time_order():
    root = _svg(_section(_page([ab_record()])), "chart ab-pairs")
    markers = _markers(root)
    assert len([m for m in markers if m[0].get("class") == "ab-a"]) == 20
    assert len([m for m in markers if m[0].get("class") == "ab-b"]) == 20
    first_a = next(el for el, tip in markers if tip.startswith("pair 0 (AB), A: 100 samples/s"))
    first_b = next(el for el, tip in markers if tip.startswith("pair 0 (AB), B: 90 samples/s"))
    second_a = next(el for el, tip in markers if tip.startswith("pair 1 (BA), A: 101 samples/s"))
    second_b = next(el for el, tip in markers if tip.startswith("pair 1 (BA), B: 90.9 samples/s"))

    def x(el: ET.Element) -> float:
        return float(el.get("cx") or float(el.get("x")) + float(el.get("width")) / 2)

    assert x(first_a) < x(first_b) < x(second_b) < x(second_a)  # each window where it ran in its pair
    legend = [el.find(f"{SVG}title").text for el in root.iter() if el.get("class") == "legend"]
    assert legend[:2] == ["stack A", "stack B"]


def test_a_dropped_pair_is_drawn_hollow_with_its_reason_and_a_failed_window_is_marked():
    section = _section(_page([ab_record(pair_list=with_drops(ab_pairs()))]))
    root = _svg(section, "chart ab-pairs")
    markers = _markers(root)
    balance = [el for el, tip in markers if tip.startswith("pair 6 ")]
    assert len(balance) == 2 and all(el.get("fill") == "#fff" for el in balance)
    assert all(f"dropped: {DROPPED_BALANCE}" in tip for el, tip in markers if tip.startswith("pair 6 "))
    kept = [el for el, tip in markers if tip.startswith("pair 5 ")]
    assert len(kept) == 2 and all(el.get("fill") != "#fff" for el in kept)
    [(_, failed)] = _titled(root, "ab-failed")
    assert failed == f"pair 3 (AB), A: the window failed: {FAILED_A}; dropped: {DROPPED_FAILED}"
    [b_of_3] = [el for el, tip in markers if tip.startswith("pair 3 (AB), B:")]
    assert b_of_3.get("fill") == "#fff"
    listed = re.findall(r'<li class="ab-dropped">(.*?)</li>', section, re.S)
    assert [" ".join(unescape(re.sub(r"<[^>]+>", "", item)).split()) for item in listed] == [
        f"pair 3 (AB): {DROPPED_FAILED}", f"pair 6 (BA): {DROPPED_BALANCE}"]


def test_a_test_whose_windows_all_failed_says_so_instead_of_a_chart():
    failed = [{"index": i, "order": "AB", "a": None, "b": None, "a_error": "boom", "b_error": "boom",
               "dropped": "both windows failed"} for i in range(2)]
    section = _section(_page([ab_record("failed", None, None, None, failed)]))
    assert not [s for s in svg_charts(section) if 'class="chart ab-pairs"' in s]
    assert "no window of this test measured a throughput" in section
    assert section.count('<li class="ab-dropped">') == 2


# --- the table ----------------------------------------------------------------------------------------------

def test_the_table_row_shows_ratio_interval_mds_pairs_looks_and_both_medians():
    served = ab_record(model="llama_small")
    served.unit = "tokens/s/user"  # a serving test's A/B: its windows' output speed per user
    records = [ab_record(pair_list=with_drops(ab_pairs())), ab_record("failed", None, None, None, [], model="vgg11",
                                                                  message="stack B: cannot import torch",
                                                                  a_throughput=None, b_throughput=None), served]
    section = _section(_page(records))
    rows = {row[1].split("-")[1]: row for row in table_rows(section, "ab-tests")}
    assert rows["resnet18"] == [
        "regression", "test_throughput[cpu-resnet18-train-bs32-fp32]", "0.9 [0.88, 0.92]", "±5.0%", "0.005", "6.1%",
        "18 of 20", "10, 20 of 10, 20, 40", "100 samples/s", "90 samples/s",
        "B/A 0.900 [0.880, 0.920] on 20 of 20 pairs at alpha 0.005: B slower beyond -5%"]
    failed = rows["vgg11"]
    assert failed[:3] == ["failed", "test_throughput[cpu-vgg11-train-bs32-fp32]", "–"]
    assert failed[6] == "0 of 0" and failed[8] == "–" and failed[-1] == "stack B: cannot import torch"  # no unit
    assert rows["llama_small"][8:10] == ["100 tokens/s/user", "90 tokens/s/user"]
    served_chart = [s for s in svg_charts(section) if "llama_small" in s and 'class="chart ab-pairs"' in s]
    assert served_chart and "tokens/s/user" in served_chart[0] and "samples/s" not in served_chart[0]


# --- which sessions show it ----------------------------------------------------------------------------------

def test_a_session_without_ab_shows_no_ab_section():
    html = render(SessionResults(dict(META), [plain_record()]))
    assert 'id="ab"' not in html and "B against A" not in html and "ab-forest" not in html


def test_a_session_mixing_ab_and_plain_records_renders_both():
    html = _page([plain_record(), ab_record()])
    rows = table_rows(_section(html), "ab-tests")
    assert [row[1] for row in rows] == ["test_throughput[cpu-resnet18-train-bs32-fp32]"]
    every_test = [" ".join(row[1].split()) for row in table_cells(html, "id", "results")]
    assert sorted(every_test) == ["test_throughput[cpu-resnet18-train-bs32-fp32]",
                                  "test_throughput[cpu-vgg11-train-bs32-fp32]"]


def test_report_render_draws_the_ab_view_from_results_json_alone(tmp_path, capsys):
    results = tmp_path / "results.json"
    atomic_write_json(results, SessionResults({**META, "ab": AB_META},
                                              [plain_record(), ab_record(pair_list=with_drops(ab_pairs()))]).to_json())
    page = tmp_path / "page.html"
    assert main(["report", "render", str(results), "-o", str(page)]) == 0, capsys.readouterr().err
    section = _section(page.read_text(encoding="utf-8"))
    assert table_rows(section, "ab-tests")[0][2] == "0.9 [0.88, 0.92]"
    assert DROPPED_BALANCE in section and NIGHTLY in section


# --- any ab sub-record renders into a whole page ------------------------------------------------------------

HOSTILE = ["<script>alert(1)</script>", '"><svg onload=x>', "</td></table>", "&<", "]]><script>"]
# text an XML parser reads back (no control characters), so that every SVG can be parsed as XML
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=10) | st.sampled_from(HOSTILE)
RATIO = st.none() | st.floats(0.5, 2.0) | st.floats(0.9, 1.1) | st.floats()  # in memory, nan and inf too
THROUGHPUT = st.none() | st.floats(1.0, 1e5) | st.floats() | st.integers(-5, 10**6)
PAIR = st.fixed_dictionaries({
    "index": st.none() | st.integers(-3, 60) | st.integers(), "order": st.sampled_from(["AB", "BA"]) | st.none() | TEXT,
    "a": THROUGHPUT, "b": THROUGHPUT, "a_error": st.none() | TEXT, "b_error": st.none() | TEXT,
    "dropped": st.none() | TEXT})
STACK = st.fixed_dictionaries({}, optional={"python": st.none() | TEXT,
                                            "env": st.dictionaries(TEXT, TEXT, max_size=2)})
AB_FIGURES = st.fixed_dictionaries({}, optional={
    "ratio": RATIO, "ratio_low": RATIO, "ratio_high": RATIO, "alpha": st.none() | st.floats(),
    "threshold": st.none() | st.floats(0, 0.5) | st.floats(), "pairs_kept": st.none() | st.integers(-1, 100),
    "looks_planned": st.lists(st.integers(0, 100), max_size=3),
    "looks_taken": st.lists(st.integers(0, 100), max_size=3),
    "a_throughput": THROUGHPUT, "b_throughput": THROUGHPUT, "pairs": st.lists(PAIR, max_size=12),
    "stacks": st.dictionaries(st.sampled_from(["A", "B"]) | TEXT, STACK, max_size=3),
    "difference": st.lists(TEXT, max_size=3), "memory": st.none() | TEXT})
AB_RECORD = st.builds(
    lambda ab, test_id, model, verdict, message, reach: TestRecord.from_json({
        "test_id": test_id, "family": "throughput", "device": "cpu", "model": model, "mode": "infer",
        "batch_size": 8, "dtype": "fp32", "verdict": verdict, "message": message, "ratio": ab.get("ratio"),
        "threshold": 0.95, "reach": reach, "ab": ab}),
    AB_FIGURES, TEXT, st.none() | TEXT,
    st.sampled_from(["regression", "improvement", "pass", "unstable", "failed"]), TEXT,
    st.none() | st.fixed_dictionaries({"figure": st.just("throughput"), "mds": st.none() | st.floats(0, 1),
                                       "why_none": st.none() | TEXT}))
SESSION_AB = st.none() | st.fixed_dictionaries({}, optional={
    "stacks": st.dictionaries(st.sampled_from(["A", "B"]), STACK, max_size=2) | TEXT,
    "threshold": st.none() | st.floats() | TEXT, "seed": st.none() | st.integers()})


@settings(max_examples=80, deadline=None)
@given(st.lists(AB_RECORD, min_size=1, max_size=4), st.lists(st.just(None), max_size=1), SESSION_AB)
def test_any_ab_figures_render_a_whole_page(records, plain, session_ab):
    meta = dict(META) if session_ab is None else {**META, "ab": session_ab}
    html = _page(records + [plain_record() for _ in plain], meta)
    assert html.lower().count("<script") == 1  # the page's own filter script: record text stayed escaped
    assert well_formed(html)
    section = _section(html)
    for svg in svg_charts(section):
        ET.fromstring(svg)  # each chart is well-formed XML
    assert len(table_rows(section, "ab-tests")) == len(records)  # no A/B test goes missing, however broken

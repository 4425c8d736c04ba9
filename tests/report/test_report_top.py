"""The report's top (issue 23): the "what regressed" chart worst first with a band per test, the one-line summary,
each red test's diagnosis beside it, baselines dashed in the throughput-vs-batch charts, a colour-blind-safe style
per series that never repeats within a chart, legends that grow instead of cutting, full labels on hover."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from synthetic import JUDGED_VERDICTS, NEW_TESTS, judged_session, synthetic_test_id

from hwregress.report import render
from hwregress.report.charts import HEIGHT, WIDTH, line_chart, stacked_bar
from hwregress.report.compare_view import sample_strip
from hwregress.report.palette import series_style
from hwregress.store.results import SessionResults, TestRecord

SVG = "{http://www.w3.org/2000/svg}"
META = {"hostname": "box", "hardware": []}


def _svgs(html: str, css_class: str) -> list[str]:
    return re.findall(rf'<svg class="{css_class}".*?</svg>', html, re.S)


def _dot_tests(svg: str) -> list[str]:
    """The test id of each dot of the "what regressed" chart, in drawing (x) order."""
    root = ET.fromstring(svg)
    return [el.find(f"{SVG}title").text.split(": ")[0] for el in root.iter() if el.get("class") == "dot"]


def test_what_regressed_chart_has_a_dot_and_band_per_judged_test_worst_first():
    session = judged_session()
    html = render(session)
    [chart] = _svgs(html, "chart regressed")
    dots = _dot_tests(chart)
    judged = [r for r in session.records if r.ratio is not None]
    assert len(dots) == len(judged) == 120 - len(NEW_TESTS)
    assert chart.count('class="threshold-band"') == len(judged)
    regressions = sorted((r for r in judged if r.verdict == "regression"), key=lambda r: r.ratio)
    # regressions first, the worst (lowest ratio) first; then invalid, unstable ...; passes last
    assert dots[:3] == [r.test_id for r in regressions] and regressions[0].ratio < regressions[-1].ratio
    assert dots[3] == synthetic_test_id(64) and dots[4] == synthetic_test_id(5)
    assert {r.verdict for r in judged if r.test_id in dots[-100:]} <= {"pass", "improvement"}


def test_summary_line_counts_red_unstable_new_invalid():
    html = render(judged_session())
    line = re.search(r'<p class="summary-line" id="summary-line">(.*?)</p>', html, re.S).group(1)
    text = " ".join(re.sub(r"<[^>]+>", "", line).split())
    reds = sum(v == "regression" for v in JUDGED_VERDICTS.values())
    assert text == f"{reds} red / 1 unstable / {len(NEW_TESTS)} new / 1 invalid — of 120 tests"


def test_each_red_test_is_listed_beside_the_chart_with_its_diagnosis_in_chart_order():
    session = judged_session()
    html = render(session)
    listing = re.search(r'<ol class="regressed" id="regressed">(.*?)</ol>\s*</div>', html, re.S).group(1)
    regressions = sorted((r for r in session.records if r.verdict == "regression"), key=lambda r: r.ratio)
    items = listing.split('<li value="')[1:]
    assert len(items) == len(regressions)
    for number, (item, record) in enumerate(zip(items, regressions, strict=True), start=1):
        assert item.startswith(f'{number}"><b title="{record.test_id}">')
        assert all(cause in item for cause in record.diagnosis)
    # the top comes before the charts, which come before the 20-column table
    assert html.index('id="summary-line"') < html.index("<h2>Charts</h2>") < html.index('id="results"')
    assert html.index('id="results"') < html.index("<h2>Hardware and software</h2>")


def _throughput_records(with_baseline: bool) -> list[TestRecord]:
    return [TestRecord(f"t[cpu-resnet18-bs{b}]", device="cpu", model="resnet18", mode="train", batch_size=b,
                       dtype="fp32", family="throughput", unit="samples/s", throughput=10.0 * b, verdict="pass",
                       baseline_throughput=11.0 * b if with_baseline else None) for b in (1, 4, 16)]


def test_throughput_vs_batch_chart_draws_the_baseline_dashed_beside_the_measurement():
    html = render(SessionResults(dict(META), _throughput_records(with_baseline=True)))
    chart = next(c for c in _svgs(html, "chart") if "throughput (samples/s) vs batch size" in c)
    root = ET.fromstring(chart)
    lines = root.findall(f"{SVG}polyline")
    dashed = [p for p in lines if p.get("stroke-dasharray")]
    solid = [p for p in lines if not p.get("stroke-dasharray")]
    assert len(dashed) == 1 and len(solid) == 1 and dashed[0].get("stroke") == solid[0].get("stroke")
    assert "resnet18 fp32 baseline: 16, 176" in chart  # the hover of the baseline's point at batch 16
    plain = render(SessionResults(dict(META), _throughput_records(with_baseline=False)))
    assert "stroke-dasharray" not in next(c for c in _svgs(plain, "chart") if "vs batch size" in c)


def _series_looks(svg: str) -> list[tuple[str, str]]:
    """(colour, marker element) of each series' first marker, one per series (markers carry "<label>: x, y")."""
    root = ET.fromstring(svg)
    looks = {}
    for el in root.iter():
        title = el.find(f"{SVG}title")
        marker = el.tag in (f"{SVG}circle", f"{SVG}rect", f"{SVG}polygon")
        if marker and title is not None and ": " in (title.text or ""):
            looks.setdefault(title.text.split(": ")[0], (el.get("fill"), el.tag))
    return list(looks.values())


def test_thirty_series_never_repeat_a_look():
    series = {f"series {i}": [(1, float(i + 1)), (2, float(i + 2))] for i in range(30)}
    looks = _series_looks(line_chart(series, "t", "x", "y"))
    assert len(looks) == 30 and len(set(looks)) == 30
    assert len({colour for colour, _ in looks[:25]}) == 25  # colours repeat only past the 25 of the palette


def test_a_legend_of_forty_long_entries_stays_inside_its_svg_with_full_labels_on_hover():
    labels = [f"gpt2 ctx{128 * (i + 1)} torch.compile channels_last bf16 variant {i}" for i in range(40)]
    svg = line_chart({label: [(1, 1.0 + i), (8, 2.0 + i)] for i, label in enumerate(labels)}, "forty", "x", "y")
    root = ET.fromstring(svg)
    height = float(root.get("height"))
    assert float(root.get("width")) == WIDTH and height > HEIGHT  # grown to hold the legend
    legend = [el for el in root.iter(f"{SVG}text") if el.get("class") == "legend"]
    assert [el.find(f"{SVG}title").text for el in legend] == labels  # hover: the full label
    assert all("…" not in (el.find(f"{SVG}title").tail or "") for el in legend)  # and on screen, uncut
    for el in legend:
        x, y = float(el.get("x")), float(el.get("y"))
        assert 0 <= x and x + len(el.find(f"{SVG}title").tail) * 6.2 <= WIDTH and 10 <= y <= height - 2
    assert len({(el.get("x"), el.get("y")) for el in legend}) == 40


def test_stacked_bar_and_compare_strip_take_the_shared_palette():
    # one palette for every chart of the report and the compare page (the old 10-colour one is gone)
    split = ET.fromstring(stacked_bar({"forward": 0.5, "backward": 0.3, "optimizer": 0.2}, "split"))
    assert [r.get("fill") for r in split.iter(f"{SVG}rect")] == [series_style(i).color for i in range(3)]
    strip = ET.fromstring(sample_strip([1.0, 1.1, 1.2], [0.9, 1.0], "samples/s"))
    assert {c.get("fill") for c in strip.iter(f"{SVG}circle")} == {series_style(0).color, series_style(1).color}


def test_a_ratio_too_large_to_plot_is_left_off_the_chart_and_still_listed():
    # a corrupt baseline (ratio 1e300) once made nice_axis raise and no report was written at all
    records = _throughput_records(with_baseline=True)
    for record, ratio in zip(records, (1e300, 0.5, 1.0), strict=True):
        record.ratio, record.threshold = ratio, 0.05
    records[0].verdict = records[1].verdict = "regression"
    html = render(SessionResults(dict(META), records))
    [chart] = _svgs(html, "chart regressed")
    assert _dot_tests(chart) == [records[1].test_id, records[2].test_id]
    listing = re.search(r'<ol class="regressed" id="regressed">(.*?)</ol>\s*</div>', html, re.S).group(1)
    assert 'value="1"><b title="t[cpu-resnet18-bs4]">' in listing and 'class="off-chart"' in listing

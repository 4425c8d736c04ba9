"""The performance-over-time trend chart: valid SVG, IQR bands, baselines, change points, axes, escaping."""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET

from hypothesis import given, settings
from hypothesis import strategies as st

from hwregress.report.charts import MARGIN, PLOT_H, PLOT_W
from hwregress.report.palette import series_style
from hwregress.report.trend_chart import TrendMark, TrendPoint, TrendSeries, trend_chart

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(str(svg))
    assert root.tag == f"{SVG}svg"
    return root


def elements(root: ET.Element, tag: str, css_class: str | None = None) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG}{tag}") if css_class is None or e.get("class") == css_class]


def title_of(element: ET.Element) -> str:
    return element.find(f"{SVG}title").text


def x_tick_labels(root: ET.Element) -> list[str]:
    return [e.text for e in elements(root, "text", "tick") if e.get("text-anchor") == "middle"]


def session_markers(root: ET.Element) -> list[ET.Element]:
    """The circles marking sessions (each with its tooltip), not the legend swatches' circles."""
    return [c for c in elements(root, "circle") if c.find(f"{SVG}title") is not None]


def legend_texts(root: ET.Element) -> list[str]:
    return [e.find(f"{SVG}title").tail for e in elements(root, "text", "legend")]  # the full name is the <title>


def y_tick_values(root: ET.Element) -> list[float]:
    return [float(e.text) for e in elements(root, "text", "tick") if e.get("text-anchor") == "end"]


def series(medians, quartiles=False, **kwargs) -> TrendSeries:
    points = [TrendPoint(i, m, m * 0.95 if quartiles else None, m * 1.05 if quartiles else None, f"run {i}")
              for i, m in enumerate(medians)]
    return TrendSeries("a100", points, **kwargs)


def test_chart_is_valid_svg_with_a_line_and_a_marker_per_session():
    root = parse(trend_chart([series([100, 101, 99, 100])], "resnet50 train", "samples/s"))
    assert len(elements(root, "polyline")) == 1
    markers = session_markers(root)
    assert len(markers) == 4
    assert title_of(markers[2]) == "a100, session 3, run 2: median 99"
    assert [e.text for e in elements(root, "text", "axis")] == ["session", "samples/s"]


def test_iqr_band_is_drawn_only_where_both_quartiles_are_known():
    with_band = parse(trend_chart([series([100, 90, 95], quartiles=True)], "t", "samples/s"))
    assert len(elements(with_band, "polygon", "band")) == 1
    band = elements(with_band, "polygon", "band")[0]
    assert len(band.get("points").split()) == 6  # along q1 and back along q3
    assert float(band.get("fill-opacity")) < 1
    assert "q1–q3 95–105" in title_of(elements(with_band, "circle")[0])
    assert not elements(parse(trend_chart([series([100, 90, 95])], "t", "samples/s")), "polygon")
    one_quartile = TrendSeries("a", [TrendPoint(0, 100, 95, 105), TrendPoint(1, 90, 85, None), TrendPoint(2, 95)])
    assert not elements(parse(trend_chart([one_quartile], "t", "samples/s")), "polygon")
    two_quartiles = TrendSeries("a", [TrendPoint(0, 100, 95, 105), TrendPoint(1, 90, 85, math.nan),
                                      TrendPoint(2, 95, 90, 99)])
    assert len(elements(parse(trend_chart([two_quartiles], "t", "samples/s")), "polygon")[0].get("points").split()) == 4


def test_baseline_is_a_dashed_horizontal_line_across_the_plot_with_a_legend_entry():
    root = parse(trend_chart([series([100, 90], baseline=100)], "t", "samples/s"))
    (line,) = elements(root, "line", "baseline")
    assert line.get("y1") == line.get("y2") and line.get("stroke-dasharray")
    assert float(line.get("x1")) == MARGIN["left"] and float(line.get("x2")) == MARGIN["left"] + PLOT_W
    marker_at_100 = session_markers(root)[0]
    assert math.isclose(float(line.get("y1")), float(marker_at_100.get("cy")), abs_tol=0.1)
    assert legend_texts(root) == ["a100", "baseline"]  # one series: its baseline needs no name
    two = parse(trend_chart([series([100, 90], baseline=100), series([80, 85], baseline=80)._replace(label="b")], "t",
                            "y"))
    assert legend_texts(two) == ["a100", "a100 baseline", "b", "b baseline"]
    long_names = [series([1, 2], baseline=1)._replace(label="x" * 40),
                  series([2, 3], baseline=2)._replace(label="y" * 40)]
    grown = parse(trend_chart(long_names, "t", "y"))
    # too long for the side of the plot: the legend moves below it, whole, and the SVG grows to hold it
    assert legend_texts(grown) == ["x" * 40, "x" * 40 + " baseline", "y" * 40, "y" * 40 + " baseline"]
    assert float(grown.get("height")) > float(root.get("height"))


def test_change_point_is_a_vertical_line_halfway_between_the_sessions_with_its_label():
    root = parse(trend_chart([series([100, 101, 100, 88, 89], change_points=[TrendMark(3, "-12.3%, p=0.001")])], "t",
                             "y"))
    (line,) = elements(root, "line", "changepoint")
    cx = [float(c.get("cx")) for c in session_markers(root)]
    assert math.isclose(float(line.get("x1")), (cx[2] + cx[3]) / 2, abs_tol=0.1)
    assert line.get("x1") == line.get("x2")
    assert float(line.get("y1")) == MARGIN["top"] and float(line.get("y2")) == MARGIN["top"] + PLOT_H
    assert title_of(line) == "a100: change before session 4: -12.3%, p=0.001"
    assert "-12.3%, p=0.001" in [e.text for e in elements(root, "text", "ptlabel")]


def test_change_point_labels_do_not_overlap_and_every_line_keeps_its_tooltip():
    marks = [TrendMark(x, f"change number {x}, p=0.001") for x in range(1, 12)]
    root = parse(trend_chart([series([100.0] * 12, change_points=marks)], "t", "y"))
    lines = elements(root, "line", "changepoint")
    assert len(lines) == 11 and all(title_of(line).endswith("p=0.001") for line in lines)
    labels = elements(root, "text", "ptlabel")
    assert 0 < len(labels) < 11
    rows = {}
    for label in labels:
        rows.setdefault(label.get("y"), []).append(label)
    assert len(rows) > 1  # a second row is used before a label is left out
    for row in rows.values():
        spans = sorted(_text_span(label) for label in row)
        assert all(left[1] <= right[0] for left, right in itertools.pairwise(spans))
        assert all(MARGIN["left"] <= a and b <= MARGIN["left"] + PLOT_W for a, b in spans)


def _text_span(label: ET.Element) -> tuple[float, float]:
    x, width = float(label.get("x")), len(label.text) * 5.2  # _LabelPlacer.CHAR_WIDTH
    return (x, x + width) if label.get("text-anchor") == "start" else (x - width, x)


def test_change_points_outside_the_series_or_not_numbers_are_left_out():
    marks = [TrendMark(40, "far"), TrendMark(None, "none"), TrendMark(math.inf, "inf"), TrendMark(1, "")]
    root = parse(trend_chart([series([1, 2, 3], change_points=marks)], "t", "y"))
    (line,) = elements(root, "line", "changepoint")
    assert title_of(line) == "a100: change before session 2"
    assert not elements(root, "text", "ptlabel")


def test_text_is_escaped():
    nasty = '<b>&"\'</b>'
    svg = trend_chart([TrendSeries(nasty, [TrendPoint(0, 1.0, label=nasty), TrendPoint(1, 2.0)], 1.5,
                                   [TrendMark(1, nasty)])], nasty, nasty, nasty)
    assert "<b>" not in svg
    root = parse(svg)
    assert not elements(root, "b")
    assert title_of(session_markers(root)[0]) == f"{nasty}, session 1, {nasty}: median 1"
    assert title_of(elements(root, "line", "changepoint")[0]).endswith(nasty)
    assert root.get("aria-label") == nasty
    assert {e.text for e in elements(root, "text", "title")} == {nasty}


def test_no_drawable_point_gives_empty_markup():
    assert trend_chart([], "t", "y") == ""
    undrawable = TrendSeries("a", [TrendPoint(0, None), TrendPoint(1, math.nan), TrendPoint(None, 1.0),
                                   TrendPoint(2, math.inf)],
                             baseline=5.0, change_points=[TrendMark(1, "x")])
    assert trend_chart([undrawable, TrendSeries("b", [])], "t", "y") == ""


def test_undrawable_points_are_left_out_and_series_keep_their_colours():
    empty, kept = TrendSeries("empty", [TrendPoint(0, None)]), series([1, math.nan, 3, None, 5])
    root = parse(trend_chart([empty, kept], "t", "y"))
    markers = session_markers(root)
    assert len(markers) == 3
    # the second series' look in the shared colour-blind-safe palette, the same as in the report's other charts
    assert {m.get("fill") for m in markers} == {elements(root, "polyline")[0].get("stroke")} == {series_style(1).color}


def test_flat_series_renders_with_a_widened_axis():
    root = parse(trend_chart([series([250.0] * 5, quartiles=False, baseline=250.0)], "t", "y"))
    ticks = y_tick_values(root)
    assert len(ticks) >= 3 and min(ticks) < 250 < max(ticks)
    assert len(session_markers(root)) == 5
    single = parse(trend_chart([TrendSeries("one", [TrendPoint(0, 0.0)])], "t", "y"))
    assert x_tick_labels(single) == ["1"]


def test_y_axis_does_not_start_at_zero_so_a_ten_percent_step_is_visible():
    root = parse(trend_chart([series([100, 100.2, 99.8, 90, 90.1])], "t", "samples/s"))
    ticks = y_tick_values(root)
    assert min(ticks) >= 85 and max(ticks) <= 105
    cy = [float(c.get("cy")) for c in session_markers(root)]
    assert cy[3] - cy[0] > PLOT_H / 3


def test_long_series_has_few_integer_session_ticks():
    root = parse(trend_chart([series([100 + i % 7 for i in range(200)])], "t", "y"))
    labels = x_tick_labels(root)
    assert 4 <= len(labels) <= 11
    numbers = [int(label) for label in labels]  # raises on a fractional label
    assert numbers == sorted(numbers) and 1 <= numbers[0] and numbers[-1] <= 200
    assert x_tick_labels(parse(trend_chart([series([1, 2, 3])], "t", "y"))) == ["1", "2", "3"]
    for length in (2, 7, 11, 12, 23, 57, 101, 999):
        labels = x_tick_labels(parse(trend_chart([series([1.0] * length)], "t", "y")))
        assert 1 <= len(labels) <= 10 and all(label.isdigit() for label in labels), (length, labels)


FIGURE = (st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10**12, 10**12)
          | st.sampled_from([1e30, -1e31, 1e-300, 0.0]))
TEXT = (st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=20)
        | st.sampled_from(["<svg>", "&amp;", '"\'']))
POINT = st.builds(TrendPoint, x=st.none() | st.integers(-3, 300) | st.floats(), median=FIGURE, q1=FIGURE, q3=FIGURE,
                  label=TEXT)
SERIES = st.builds(TrendSeries, label=TEXT, points=st.lists(POINT, max_size=8), baseline=FIGURE,
                   change_points=st.lists(st.builds(TrendMark, x=FIGURE, label=TEXT), max_size=4))


@settings(max_examples=150, deadline=None)
@given(st.lists(SERIES, max_size=4), TEXT, TEXT)
def test_any_figures_and_text_give_valid_svg_or_nothing(trend_series, title, y_label):
    svg = trend_chart(trend_series, title, y_label)
    drawable = any(isinstance(p.median, (int, float)) and isinstance(p.x, (int, float)) and math.isfinite(p.median)
                   and math.isfinite(p.x) and abs(p.median) <= 1e30 and abs(p.x) <= 1e30
                   for s in trend_series for p in s.points)
    if not drawable:
        assert svg == ""
        return
    root = parse(svg)
    assert root.get("aria-label") == title
    labels = x_tick_labels(root)
    assert (1 <= len(labels) <= 10
            and all(label.lstrip("-").isdigit() or "e" in label or label[-1] in "kMGTP" for label in labels))

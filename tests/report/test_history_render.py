"""``python -m hwregress history``'s ``--status`` and ``--format json``, and ``history render``: the static dashboard
over every hardware key (hwregress.report.dashboard) from a synthetic history of 30 sessions x 3 hardware keys."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markupsafe import escape
from synthetic import (
    DRIFT_TEST,
    HISTORY_SESSIONS,
    IMPROVED_TEST,
    MACHINES,
    STEP_AT,
    STEP_TEST,
    history_row,
    synthetic_history,
    synthetic_test_id,
)

from hwregress.cli import main
from hwregress.judge.trends import analyze, analyze_all, has_changed
from hwregress.report import charts, trend_chart
from hwregress.report import legend as legend_module
from hwregress.report.dashboard import build_dashboard, facets_of, render_dashboard, session_ratios
from hwregress.store.history_row import HISTORY_ROW_VERSION

CPU_KEY, H100_KEY, H200_KEY = (machine[0] for machine in MACHINES)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """30 sessions x 3 hardware keys x 12 tests: a step regression, a drift and an improvement (tests/synthetic.py)."""
    return synthetic_history(tmp_path_factory.mktemp("history") / "history", tests=12)


# -- --format json ----------------------------------------------------------------------------------------------------
def test_json_format_is_one_valid_document_with_every_test(history, capsys):
    status, out, err = run(capsys, "history", "--dir", str(history), "--format", "json")
    assert status == 0 and err == ""
    document = json.loads(out, parse_constant=no_constants)
    assert document["format_version"] == 1 and document["dir"] == str(history) and document["tolerance"] == 0.05
    assert document["counts"] == {"regression": 1, "drift": 1, "improvement": 1, "steady": 33}
    tests = document["tests"]
    assert len(tests) == 36 and [t["status"] for t in tests[:3]] == ["regression", "drift", "improvement"]
    step = tests[0]
    assert (step["hardware_key"], step["test_id"]) == (CPU_KEY, synthetic_test_id(STEP_TEST))
    assert step["sessions"] == HISTORY_SESSIONS and step["changed"] is True and step["unit"] == "samples/s"
    (change,) = [c for c in step["change_points"] if c["significant"]]
    assert (change["index"] == STEP_AT and change["change"] == pytest.approx(-0.15, abs=0.01)
            and change["p_value"] < 0.01)
    assert "torch 2.4.0 -> 2.5.0" in change["differences"] and change["first_bad"].startswith("2026-03-21")
    assert step["latest"]["verdict"] == "regression" and step["drift"] == pytest.approx(-0.15, abs=0.01)
    assert all(t["changed"] is False and t["status"] == "steady" for t in tests[3:])


def test_json_format_keeps_the_fail_on_gate_and_stdout_clean(history, capsys):
    status, out, err = run(capsys, "history", "--dir", str(history), "--format", "json", "--fail-on", "regression")
    assert status == 1
    json.loads(out)  # the gate's lines go to stderr only
    assert len(err.splitlines()) == 2 and "regression" in err and "drift" in err


# -- --status ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("statuses", "expected"), [
    (["regression"], [(CPU_KEY, STEP_TEST)]),
    (["drift"], [(H100_KEY, DRIFT_TEST)]),
    (["regression", "drift"], [(CPU_KEY, STEP_TEST), (H100_KEY, DRIFT_TEST)]),
    (["changed"], [(CPU_KEY, STEP_TEST), (H100_KEY, DRIFT_TEST), (H200_KEY, IMPROVED_TEST)]),
])
def test_status_filter_keeps_those_tests(history, capsys, statuses, expected):
    options = [part for status in statuses for part in ("--status", status)]
    status, out, _ = run(capsys, "history", "--dir", str(history), *options, "--format", "json")
    assert status == 0
    found = [(t["hardware_key"], t["test_id"]) for t in json.loads(out)["tests"]]
    assert found == [(key, synthetic_test_id(test, "cpu" if key == CPU_KEY else "cuda:0")) for key, test in expected]


def test_status_filter_in_the_table_and_with_the_gate(history, capsys):
    status, out, _ = run(capsys, "history", "--dir", str(history), "--status", "steady", "--fail-on", "regression")
    assert status == 0  # the regressed test is filtered out
    assert out.rstrip().splitlines()[-1] == "33 tests: 33 steady"
    status, out, _ = run(capsys, "history", "--dir", str(history), "--status", "drift", "--fail-on", "regression")
    assert status == 1 and out.rstrip().splitlines()[-1] == "1 tests: 1 drift"


def test_status_matching_nothing_is_not_an_error(tmp_path, capsys):
    directory = synthetic_history(tmp_path / "history", tests=2, sessions=10)  # 10 sessions: no step yet
    status, out, err = run(capsys, "history", "--dir", str(directory), "--status", "regression")
    assert status == 0 and err == "" and out.strip() == "0 tests with status regression"
    status, out, _ = run(capsys, "history", "--dir", str(directory), "--status", "changed", "--format", "json")
    assert status == 0 and json.loads(out)["tests"] == [] and json.loads(out)["counts"] == {}


@pytest.mark.parametrize(("argv", "expected"), [
    (["--status", "bad"], "invalid choice: 'bad'"),
    (["--format", "xml"], "invalid choice: 'xml'"),
    (["render"], "needs the HTML file to write"),
    (["-o", "x.html"], "only `history render` writes a file"),
    (["render", "-o", "x.html", "--format", "json"], "json is for the table"),
    (["draw"], "invalid choice: 'draw'"),
])
def test_bad_history_options_are_one_line_errors(history, tmp_path, capsys, argv, expected):
    status, out, err = run(capsys, "history", "--dir", str(history), *argv)
    assert status == 2 and out == "" and len(err.splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "x.html").exists()


# -- history render ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["action-first", "options-first"])
def test_render_parses_in_either_order_and_the_table_form_still_works(history, tmp_path, capsys, order):
    page = tmp_path / "dashboard.html"
    argv = (["history", "render", "--dir", str(history), "-o", str(page)] if order == "action-first"
            else ["history", "--dir", str(history), "render", "-o", str(page)])
    status, out, err = run(capsys, *argv)
    assert status == 0, err
    assert out.strip() == f"wrote {page} (36 tests on 3 hardware keys, 3 moved)"
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    status, out, _ = run(capsys, "history", "--dir", str(history))
    assert status == 0 and out.rstrip().splitlines()[-1] == "36 tests: 1 regression, 1 drift, 1 improvement, 33 steady"


def test_render_applies_the_filters(history, tmp_path, capsys):
    page = tmp_path / "dashboard.html"
    status, out, _ = run(capsys, "history", "render", "--dir", str(history), "-o", str(page), "--key", CPU_KEY,
                         "--status", "changed")
    assert status == 0 and "(1 tests on 1 hardware keys, 1 moved)" in out
    text = page.read_text(encoding="utf-8")
    assert text.count('<section class="trend moved"') == 1 and H100_KEY not in text


def test_render_refuses_a_folder_as_output(history, tmp_path, capsys):
    status, _, err = run(capsys, "history", "render", "--dir", str(history), "-o", str(tmp_path))
    assert status == 2 and "is a folder" in err


class Page(HTMLParser):
    """The dashboard's filterable items (their tag, data-facets and hidden flag) and the filter form's attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[tuple[str, dict, bool]] = []
        self.form: dict[str, str | None] | None = None

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if "data-facets" in values:
            self.items.append((tag, json.loads(values["data-facets"]), "hidden" in values))
        if values.get("id") == "dashboard-filter":
            self.form = values


def test_dashboard_of_30_sessions_on_3_keys(tmp_path, capsys):
    directory = synthetic_history(tmp_path / "history")  # 40 tests per key
    page = tmp_path / "dashboard.html"
    assert run(capsys, "history", "render", "--dir", str(directory), "-o", str(page))[0] == 0
    text = page.read_text(encoding="utf-8")
    parsed = Page()
    parsed.feed(text)
    sections = [facets for tag, facets, _ in parsed.items if tag == "section"]
    rows = [facets for tag, facets, _ in parsed.items if tag == "tr"]
    assert len(sections) == 3 and len(rows) == 120 - 5  # the GPU keys share test ids: 5 series in 3 moved tests
    assert not [item for item in parsed.items if item[2]]  # nothing hidden: without JavaScript every test shows
    assert parsed.form is not None and "hidden" in parsed.form  # and the filter form, which needs it, does not
    assert sections[0] == {"key": [CPU_KEY], "device": ["AMD EPYC 7B13"], "model": ["resnet18"],
                           "family": ["throughput"], "status": ["regression"]}
    assert sorted(sections[1]["key"]) == [H100_KEY, H200_KEY] and sections[1]["status"] == ["drift", "steady"]
    assert text.count('<svg class="chart trend"') == 3 and text.count('<svg class="chart sparkline"') == 115
    assert "torch 2.4.0 -&gt; 2.5.0" in text  # the change table of the step
    for key in (CPU_KEY, H100_KEY, H200_KEY):
        assert f"<code>{key}</code>" in text
    assert re.search(r"<td class=\"n\">30</td>", text)  # sessions per key


def test_ratios_are_over_each_sessions_baseline_or_the_first_sessions():
    rows = [history_row(0, 0, i, median, baseline, "pass", "2.4.0")
            for i, (median, baseline) in enumerate([(90.0, None), (100.0, None), (110.0, None), (50.0, 100.0)])]
    assert session_ratios(analyze(rows)) == pytest.approx([0.9, 1.0, 1.1, 0.5])  # 100: median of the first 3


def test_facets_of_rows_written_before_the_history_kept_the_test_identity():
    row = {"v": HISTORY_ROW_VERSION, "session": "s", "time": "2026-03-01T00:00:00+00:00", "hardware_key": "k",
           "test_id": "bench_tests/test_speedup.py::test_speedup[cuda:0-resnet18]", "median": 10.0}
    assert (facets_of(analyze([row]))
            == {"key": "k", "device": "–", "model": "–", "family": "speedup", "status": "short"})


def test_a_long_hardware_key_is_whole_in_the_legend_below_the_plot():
    long_key = MACHINES[2][0]
    chart = trend_chart.trend_chart([trend_chart.TrendSeries(long_key, [trend_chart.TrendPoint(0, 1.0),
                                                                        trend_chart.TrendPoint(1, 2.0)])],
                                    "t" * 200, "y")
    legend = re.search(r'class="legend"><title>([^<]*)</title>([^<]*)</text>', str(chart))
    assert legend.group(1) == legend.group(2) == long_key
    x, y = (float(v) for v in re.search(r'<text x="([\d.]+)" y="([\d.]+)" class="legend">', str(chart)).groups())
    assert y > charts.MARGIN["top"] + charts.PLOT_H  # below the plot, where the whole key fits
    assert x + len(long_key) * legend_module.CHAR_PX <= charts.WIDTH
    hover, title = re.search(r'class="title"[^>]*><title>([^<]*)</title>([^<]*)</text>', str(chart)).groups()
    assert len(title) == int(480 // charts.TITLE_CHAR_PX) and title.endswith("…") and hover == "t" * 200


# -- rendering properties ----------------------------------------------------------------------------------------------
NAMES = st.text(alphabet=st.sampled_from("ab<>&\"'[]:= \u00e9\u2603-"), min_size=1, max_size=24)
KEYS = st.text(alphabet=st.sampled_from("abc-<>&\"'"), min_size=1, max_size=16)
MEDIANS = st.lists(st.floats(min_value=1e-3, max_value=1e6, allow_nan=False), min_size=1, max_size=9)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(series=st.lists(st.tuples(KEYS, NAMES, MEDIANS, st.one_of(st.none(), st.floats(1e-3, 1e6))), min_size=1,
                       max_size=4),
       model=NAMES)
def test_any_history_renders_with_names_escaped(series, model):
    rows = []
    for key, test_id, medians, baseline in series:
        for index, median in enumerate(medians):
            row = history_row(0, 0, index, median, baseline, "pass", "2.4.0")
            rows.append({**row, "hardware_key": key, "test_id": test_id, "model": model, "session": f"{key}-{index}"})
    trends = analyze_all(rows)
    page = render_dashboard(trends, ["<warning & more>"], ["<dir>"])
    parsed = Page()
    parsed.feed(page)
    assert "<warning" not in page and "<dir>" not in page
    moved = {t.test_id for t in trends if has_changed(t)}
    assert len(parsed.items) == len(moved) + sum(t.test_id not in moved for t in trends)
    assert all(facets["model"] == [model] for _, facets, _ in parsed.items)
    assert page.count("<script>") == 2  # the page's own: a name never opens one
    for trend in trends:
        assert str(escape(trend.hardware_key)) in page
    assert len(build_dashboard(trends).keys) == len({t.hardware_key for t in trends})


def test_the_dashboard_shows_each_tests_mds_over_sessions():
    """Each steady row: the latest session's minimum detectable slowdown and a sparkline of it over the sessions
    (its range in the caption); a moved test names its latest MDS in its status line; rows written before the field
    existed (no "mds") show none."""
    mds = [0.09, None, 0.07, 0.08, 0.062]
    rows = [{**history_row(0, 0, i, 100.0, 100.0, "pass", "2.4.0"), "mds": value} for i, value in enumerate(mds)]
    old = [history_row(0, 1, i, 100.0, 100.0, "pass", "2.4.0") for i in range(5)]
    step = [{**history_row(1, 2, i, 100.0 if i < 10 else 70.0, 100.0, "pass", "2.4.0"), "mds": 0.12}
            for i in range(20)]
    trends = analyze_all(rows + old + step)
    dashboard = build_dashboard(trends)
    by_test = {row.trend.test_id: row for row in dashboard.steady}
    assert by_test[synthetic_test_id(0)].latest_mds == 0.062 and by_test[synthetic_test_id(1)].latest_mds is None
    assert by_test[synthetic_test_id(1)].mds_sparkline == ""
    page = render_dashboard(trends)
    assert "<th>catches ≥ (latest)</th>" in page and "MDS over sessions: 6.2–9 %" in page
    assert re.search(r"<td class=\"n\">6\.2%</td>", page)
    moved = re.search(r'<section class="trend moved".*?</section>', page, re.S).group(0)
    assert "catches ≥ 12.0% now" in moved

"""Metrics a project declares (hwregress.store.metrics.register): what a declaration may be, how its value lands on
the record, how the judge's threshold rule judges it either way, how the baseline entry pools it and checks it, and how
every reader (figure rows and the record rebuilt from them, the history row, JUnit, the reach cells) gets it from the
one canonical figure (figures_of). The end-to-end proof is tests/plugin/test_declared_metric_e2e.py."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwregress.judge import lifecycle
from hwregress.judge.compare import Measured, judge
from hwregress.judge.reach import threshold_reach
from hwregress.judge.tolerances import Tolerances
from hwregress.plugin.record import junit_properties
from hwregress.report.reach_view import reach_cells
from hwregress.store.assembly import put_judged, put_measured
from hwregress.store.baseline_file import check_entry
from hwregress.store.figures import DeclaredFigures
from hwregress.store.history_row import row_from_record
from hwregress.store.measured import MeasuredFigures
from hwregress.store.metrics import (
    METRICS,
    RULES,
    JudgedMetric,
    MetricError,
    declared,
    figures_of,
    judged_metrics,
    register,
    unregister,
)
from hwregress.store.results import TestRecord
from hwregress.store.session_results import record_from_figures
from hwregress.store.session_rows import figure_rows
from hwregress.store.verdicts import Verdict

TTFT = JudgedMetric("ttft_p99_ms", "lower", "ms", "TTFT p99")
GOODPUT = JudgedMetric("goodput_rps", "higher", "req/s", "goodput")
SAMPLES = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0]


@pytest.fixture
def metrics():
    """TTFT p99 and goodput declared for one test, alone (the metrics declared in this process before, such as the
    serving family's, set aside meanwhile)."""
    before = [metric for metric in judged_metrics() if metric.declared]
    for metric in before:
        unregister(metric.name)
    register(TTFT)
    register(GOODPUT)
    yield
    unregister(TTFT.name)
    unregister(GOODPUT.name)
    for metric in before:
        register(metric)


@pytest.mark.parametrize(("metric", "says"), [
    (JudgedMetric("TTFT", "lower", "ms", "x"), "lower-case letters"),
    (JudgedMetric("latency", "lower", "ms", "x"), "a built-in metric has that name"),
    (JudgedMetric("tail_ms", "down", "ms", "x"), "direction 'down'"),
    (JudgedMetric("tail_ms", "lower", "ms", "x", rule="ceiling"), "threshold rule"),
    (JudgedMetric("tail_ms", "lower", "", "x"), "must be text"),
    (JudgedMetric("tail_ms", "lower", "ms", "x", value="latency_ms"), "leave value"),
])
def test_a_declaration_that_cannot_be_judged_is_refused_with_the_reason(metric, says):
    with pytest.raises(MetricError, match=says):
        register(metric)
    assert metric not in judged_metrics()


def test_one_name_one_declaration(metrics):
    assert register(TTFT) is TTFT  # the same again: nothing changes
    with pytest.raises(MetricError, match="declared already"):
        register(dataclasses.replace(TTFT, unit="s"))
    assert judged_metrics() == (*METRICS, TTFT, GOODPUT)


def test_a_value_of_an_undeclared_metric_names_the_declared_ones_and_the_fix(metrics):
    with pytest.raises(MetricError, match=r"'tpot_ms' is declared.*declared: goodput_rps, ttft_p99_ms.*register"):
        put_measured(TestRecord("t"), MeasuredFigures(declared={"tpot_ms": 3.0}))
    for bad in ("fast", math.nan, math.inf, True):
        record = TestRecord("t")
        with pytest.raises(ValueError, match="'ttft_p99_ms' must be a finite number in ms"):
            put_measured(record, MeasuredFigures(throughput=5.0, declared={"goodput_rps": 1.0, "ttft_p99_ms": bad}))
        assert record == TestRecord("t")  # refused before the record changed at all
    record = put_measured(TestRecord("t"), MeasuredFigures(declared={"ttft_p99_ms": np.float32(41.5)}))
    assert record.declared[0].value == 41.5 and type(record.declared[0].value) is float
    assert declared("goodput_rps") is GOODPUT


def _record(ttft: float, goodput: float) -> TestRecord:
    record = TestRecord("t", device="cpu", hardware_key="cpu-x", unit="samples/s")
    put_measured(record, MeasuredFigures(samples=SAMPLES, throughput=100.0,
                                         declared={"ttft_p99_ms": ttft, "goodput_rps": goodput}))
    return record


def _measured(record: TestRecord) -> Measured:
    return Measured(record.test_id, record.samples, record.unit, True, {}, on_cpu=True,
                    declared=tuple(record.declared))


def _entry(sessions: int = 3) -> dict:
    entry = None
    for _ in range(sessions):
        entry = lifecycle.make_entry(_record(40.0, 12.0), entry)
    return entry


def test_the_entry_pools_each_declared_metric_over_its_sessions_and_passes_its_own_check(metrics):
    entry = _entry(1)
    entry = lifecycle.make_entry(_record(50.0, 10.0), entry)
    entry = lifecycle.make_entry(_record(44.0, 11.0), entry)
    assert entry["metric_history"] == {"ttft_p99_ms": [40.0, 50.0, 44.0], "goodput_rps": [12.0, 10.0, 11.0]}
    assert entry["metrics"] == {"ttft_p99_ms": 44.0, "goodput_rps": 11.0}
    assert check_entry(json.loads(json.dumps(entry))) is None


def test_a_session_that_did_not_measure_a_metric_keeps_its_history(metrics):
    entry = _entry(2)
    unmeasured = TestRecord("t", device="cpu", hardware_key="cpu-x", unit="samples/s", samples=list(SAMPLES))
    entry = lifecycle.make_entry(unmeasured, entry)
    assert entry["metric_history"] == {"ttft_p99_ms": [40.0, 40.0], "goodput_rps": [12.0, 12.0]}
    assert "metrics" not in lifecycle.make_entry(unmeasured, None)  # nothing declared anywhere: no keys


@pytest.mark.parametrize(("change", "says"), [
    ({"metrics": {"ttft_p99_ms": -1.0}}, r"'metrics.ttft_p99_ms' must be a finite positive number"),
    ({"metrics": [40.0]}, "'metrics' must be an object"),
    ({"metric_history": {"ttft_p99_ms": [40.0, "x"]}}, r"'metric_history.ttft_p99_ms'\[1\]"),
])
def test_a_hand_edited_declared_entry_is_caught(change, says):
    entry = {"samples": SAMPLES, "metrics": {"ttft_p99_ms": 40.0}, "metric_history": {"ttft_p99_ms": [40.0]}}
    assert check_entry(entry) is None
    assert re.search(says, check_entry({**entry, **change}) or "")


@pytest.mark.parametrize(("ttft", "goodput", "failing"), [
    (40.0, 12.0, []),
    (80.0, 12.0, ["TTFT p99 80 ms > baseline 40 ms"]),  # lower is better: it grew
    (40.0, 6.0, ["goodput 6 req/s < baseline 12 req/s"]),  # higher is better: it fell
    (20.0, 24.0, []),  # better both ways: never a failure
])
def test_the_threshold_rule_judges_each_declared_metric_in_its_direction(metrics, ttft, goodput, failing):
    judgement = judge(_measured(_record(ttft, goodput)), _entry(), Tolerances())
    assert [f.split(": ", 1)[1].split(" x (")[0] for f in judgement.failures] == failing
    assert judgement.verdict == (Verdict.REGRESSION if failing else Verdict.PASS)
    by_metric = {figure.metric: figure for figure in judgement.figures.declared}
    assert set(by_metric) == {"ttft_p99_ms", "goodput_rps"}
    assert by_metric["ttft_p99_ms"].baseline == 40.0 and by_metric["goodput_rps"].baseline == 12.0
    for figure in by_metric.values():  # the throughput's threshold, widened by no drift (the sessions agree)
        assert figure.threshold == pytest.approx(judgement.figures.threshold)
        assert figure.reach.figure == figure.metric and figure.reach.mds >= figure.threshold


def test_a_metric_the_entry_does_not_hold_is_not_judged(metrics):
    entry = _entry()
    del entry["metrics"]["goodput_rps"]
    judgement = judge(_measured(_record(40.0, 1.0)), entry, Tolerances())
    assert judgement.verdict == Verdict.PASS
    assert [figure.metric for figure in judgement.figures.declared] == ["ttft_p99_ms"]


def test_the_judgement_lands_on_the_declared_figure_and_a_second_one_leaves_nothing_of_the_first(metrics):
    record = _record(80.0, 12.0)
    put_judged(record, judge(_measured(record), _entry(), Tolerances()).figures)
    ttft, goodput = record.declared
    assert (ttft.value, ttft.baseline, goodput.baseline) == (80.0, 40.0, 12.0) and ttft.reach is not None
    put_judged(record, judge(_measured(record), None, Tolerances()).figures)
    assert all(f.baseline is None and f.threshold is None and f.reach is None for f in record.declared)


@given(st.floats(min_value=1e-3, max_value=1e6), st.floats(min_value=1e-3, max_value=1e6))
def test_figure_rows_of_a_declared_metric_rebuild_the_record_s_figures(value, baseline):
    figure = DeclaredFigures(metric="ttft_p99_ms", value=value, unit="ms", direction="lower", label="TTFT p99",
                             baseline=baseline, threshold=0.15)
    record = TestRecord("t", hardware_key="cpu-x", samples=list(SAMPLES), throughput=100.0, declared=[figure])
    rows = figure_rows(record)
    assert [row["metric"] for row in rows] == ["throughput", "ttft_p99_ms"]
    declared_row = rows[1]
    assert (declared_row["median"], declared_row["baseline_median"], declared_row["threshold"]) == (
        value, baseline, 0.15)
    assert declared_row["ratio"] == pytest.approx(value / baseline)
    rebuilt = TestRecord.from_json(record_from_figures(rows, {}))
    assert rebuilt.declared == [dataclasses.replace(figure, label="ttft_p99_ms")]  # the rows keep no label
    assert figure_rows(rebuilt) == rows


def test_history_junit_and_the_reach_cells_read_the_canonical_figure(metrics):
    record = _record(80.0, 12.0)
    put_judged(record, judge(_measured(record), _entry(), Tolerances()).figures)
    assert [figure.metric for figure in figures_of(record)] == ["throughput", "ttft_p99_ms", "goodput_rps"]
    row = row_from_record(record, "s", "2026-11-29T00:00:00+00:00", "")
    assert row["figures"] == {"ttft_p99_ms": 80.0, "goodput_rps": 12.0}
    properties = dict(junit_properties(record))
    assert properties["hwregress.declared.ttft_p99_ms"] == "80"
    assert properties["hwregress.declared.ttft_p99_ms.ratio"] == "2"
    assert properties["hwregress.declared.goodput_rps.ratio"] == "1"
    throughput_cell, ttft_cell, goodput_cell = reach_cells(record)
    assert throughput_cell.text.endswith("%") and "a throughput" in throughput_cell.title
    assert ttft_cell.text.startswith("TTFT p99 +") and "a TTFT p99 " in ttft_cell.title
    assert "higher is caught" in ttft_cell.title
    assert goodput_cell.text.startswith("goodput −") and "lower is caught" in goodput_cell.title


def test_every_built_in_metric_has_a_rule_and_a_throughput_of_samples_alone_is_still_a_figure():
    assert {metric.rule for metric in METRICS} <= set(RULES) and not any(metric.declared for metric in METRICS)
    (figure,) = figures_of(TestRecord("t", samples=list(SAMPLES)))
    assert (figure.metric, figure.value) == ("throughput", None)
    assert [row["median"] for row in figure_rows(TestRecord("t", samples=list(SAMPLES)))] == [100.0]


def test_a_declared_figure_read_from_a_file_without_a_direction_is_shown_but_never_judged(metrics):
    record = _record(400.0, 12.0)
    record.declared[0] = dataclasses.replace(record.declared[0], direction=None)
    judgement = judge(_measured(record), _entry(), Tolerances())
    assert judgement.verdict == Verdict.PASS and [f.metric for f in judgement.figures.declared] == ["goodput_rps"]
    assert [figure.direction for figure in figures_of(record)] == ["higher", "", "higher"]


def test_a_declared_direction_sets_the_reach_s_sign_and_a_built_in_figure_keeps_its_own():
    lower = threshold_reach("ttft_p99_ms", SAMPLES, [40.0, 41.0, 39.0], 0.15, direction="lower")
    higher = threshold_reach("goodput_rps", SAMPLES, [12.0, 12.1, 11.9], 0.15, direction="higher")
    assert 0.15 < lower.mds < 1 and 0.15 < higher.mds < 1
    assert threshold_reach("latency", SAMPLES, [40.0, 41.0, 39.0], 0.15).mds == lower.mds
    with pytest.raises(ValueError, match="got 'ttft_p99_ms'"):
        threshold_reach("ttft_p99_ms", SAMPLES, [], 0.15)
    with pytest.raises(ValueError, match="'higher' or 'lower'"):
        threshold_reach("ttft_p99_ms", SAMPLES, [], 0.15, direction="up")

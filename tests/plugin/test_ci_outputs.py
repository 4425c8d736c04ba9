"""What CI systems read: JUnit properties, the Markdown job summary, ``::error`` annotations, the live verdict
line, and ``results.json`` against its shipped JSON Schema -- end to end, and the formatting rules alone."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree

from hypothesis import given
from hypothesis import strategies as st
from support.schema_check import validate as validate_schema

from hwregress.plugin import ci
from hwregress.plugin.record import JUNIT_PROPERTIES, junit_properties
from hwregress.store import schemas
from hwregress.store.figures import ReachFigures
from hwregress.store.metrics import METRICS
from hwregress.store.results import SessionResults, TestRecord
from hwregress.store.verdicts import Verdict

TRAIN_ID = "bench_tests/test_throughput.py::test_throughput[cpu-tiny-train-bs4-fp32]"
SHORT_PROPERTIES = {f"hwregress.{name}" for name in JUNIT_PROPERTIES}


def test_results_json_of_a_real_session_matches_the_shipped_schema(hw_project, xdist_args):
    hw_project.run(*xdist_args).assert_outcomes(passed=2)
    validate_schema(hw_project.results, "results")
    hw_project.run("--update-baselines", *xdist_args).assert_outcomes(passed=2)
    (baseline_file,) = hw_project.baseline_files()
    validate_schema(json.loads(baseline_file.read_text()), "baselines")


def test_schema_names_every_record_field():
    properties = schemas.schema("results")["$defs"]["record"]["properties"]
    assert set(properties) == set(TestRecord("x").to_json())
    assert properties["verdict"]["enum"] == [v.value for v in Verdict]


def test_junit_gets_the_short_properties_only_and_stays_small(hw_project):
    hw_project.run("--update-baselines").assert_outcomes(passed=2)
    hw_project.run("--junitxml", "junit.xml", env={"HWREGRESS_SELFTEST_SLOWDOWN": "2.0"}).assert_outcomes(failed=2)
    path = hw_project.path / "junit.xml"
    cases = ElementTree.parse(path).getroot().iter("testcase")
    properties = {case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")} for case in cases}
    assert len(properties) == 2
    for found in properties.values():
        assert set(found) <= SHORT_PROPERTIES and {"hwregress.verdict", "hwregress.ratio"} <= set(found)
        assert found["hwregress.verdict"] == "regression"
        assert float(found["hwregress.ratio"]) < 0.6
        # what the verdict could catch: 6 rounds against 6 reach alpha, so a number, a fraction above the threshold
        assert float(found["hwregress.threshold"]) <= float(found["hwregress.mds"]) < 1
    assert path.stat().st_size < 5_000 * len(properties)


def test_step_summary_and_annotations_list_an_injected_regression(hw_project):
    hw_project.run("--update-baselines").assert_outcomes(passed=2)
    summary = hw_project.path / "step-summary.md"
    summary.write_text("earlier step\n")
    result = hw_project.run("--summary-md", "copy.md", env={
        "HWREGRESS_SELFTEST_SLOWDOWN": "2.0", "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTIONS": "true"})
    result.assert_outcomes(failed=2)
    text = summary.read_text()
    assert text.startswith("earlier step\n")  # appended, as GitHub expects
    assert "**2 regression**" in text
    assert "| regression | `test_throughput[cpu-tiny-train-bs4-fp32]` |" in text
    assert re.search(r"\| 0\.(49\d|50\d) \|", text) and "http" not in text  # 0.5 within the fake clock's jitter
    assert (hw_project.path / "copy.md").read_text() == text.removeprefix("earlier step\n")
    assert "::error title=regression%3A test_throughput[cpu-tiny-train-bs4-fp32]::" in result.stdout.str()


def test_terminal_shows_each_verdict_as_its_test_finishes(hw_project):
    hw_project.run("--update-baselines").assert_outcomes(passed=2)
    slow = hw_project.run(env={"HWREGRESS_SELFTEST_SLOWDOWN": "2.0"})
    slow.stdout.fnmatch_lines(["bench_tests/test_throughput.py RR*"])
    verbose = hw_project.run("-v", env={"HWREGRESS_SELFTEST_SLOWDOWN": "2.0"})
    verbose.stdout.re_match_lines([re.escape(f"{TRAIN_ID} FAILED (regression 20")
                                   + r"\d\.?\d* samples/s x0\.(49\d|50\d) "
                                   r"\(threshold \d+\.\d%\)\)"])
    plain = hw_project.run("-v")
    plain.stdout.re_match_lines([re.escape(f"{TRAIN_ID} PASSED (pass 40") + r"\d\.?\d* samples/s x(1\.0|0\.99)"])


def _record(verdict: Verdict, message: str = "", test_id: str = "t.py::t[cpu]", **fields) -> TestRecord:
    return TestRecord(test_id, throughput=50.0, ratio=0.5, threshold=0.05, verdict=verdict, message=message, **fields)


WHY = "4 rounds against 4 cannot reach p < 0.01"


def test_junit_properties_carry_the_mds_or_why_there_is_none():
    stated = dict(junit_properties(_record(Verdict.PASS, reach=ReachFigures(figure="throughput", mds=0.0812))))
    assert stated["hwregress.mds"] == "0.0812" and "hwregress.mds_why_none" not in stated
    none = dict(junit_properties(_record(Verdict.PASS, reach=ReachFigures(figure="throughput", why_none=WHY))))
    assert none["hwregress.mds_why_none"] == WHY and "hwregress.mds" not in none
    assert not {"hwregress.mds", "hwregress.mds_why_none"} & set(dict(junit_properties(_record(Verdict.NEW))))


def test_junit_properties_carry_each_judged_metrics_value_and_ratio_from_the_metric_table():
    record = _record(Verdict.PASS, efficiency=0.91, peak_memory_bytes=2**20, memory_ratio=1.25, latency_ms=3.5)
    found = dict(junit_properties(record))
    assert found["hwregress.efficiency"] == "0.91" and found["hwregress.memory_ratio"] == "1.25"
    assert found["hwregress.latency_ms"] == "3.5" and found["hwregress.peak_memory_bytes"] == str(2**20)
    assert "hwregress.accuracy" not in found  # None: left out
    assert {f"hwregress.{metric.value}" for metric in METRICS} <= SHORT_PROPERTIES


def test_the_job_summary_states_what_the_session_would_catch_and_each_noteworthy_tests_mds():
    records = [_record(Verdict.PASS, test_id="a", reach=ReachFigures(figure="throughput", mds=0.08, power=0.9)),
               _record(Verdict.REGRESSION, "slower", test_id="b",
                       reach=ReachFigures(figure="throughput", mds=0.21, power=0.9)),
               _record(Verdict.UNSTABLE, test_id="c", reach=ReachFigures(figure="throughput", why_none=WHY))]
    text = ci.markdown_summary(SessionResults({}, records))
    assert "This session would catch a slowdown of ≥ 21.0% on 2 of 3 judged tests (each with 90% probability; " \
           "median 14.5%); 1 states none." in text
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[0] == "| verdict | test | figure | ratio | threshold | catches ≥ | why |"
    assert "| regression | `b` | 50 samples/s | 0.500 | 5.0% | 21.0% | slower |" in rows
    assert f"| unstable | `c` | 50 samples/s | 0.500 | 5.0% | none: {WHY} |  |" in rows


def test_markdown_lists_noteworthy_worst_first_and_skips_passes():
    text = ci.markdown_summary(SessionResults({}, [_record(Verdict.PASS, test_id="a"),
                                                   _record(Verdict.IMPROVEMENT, test_id="b"),
                                                   _record(Verdict.REGRESSION, "slower | note", test_id="c")]))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split("|")[1].strip() for row in rows] == ["regression", "improvement"]
    assert "| slower |" in rows[0]


def test_markdown_lists_the_tests_whose_history_moved():
    trends = [{"test_id": "b.py::t[cpu-x]", "hardware_key": "k", "status": "drift", "sessions": 15,
               "summary": "drift: level now -12.1% vs the baseline | slope -1%"},
              {"test_id": "a.py::t[cpu-y]", "hardware_key": "k", "status": "steady", "sessions": 9,
               "summary": "steady"}]
    text = ci.markdown_summary(SessionResults({"history": {"dir": "reports/history", "trends": trends}},
                                              [_record(Verdict.PASS)]))
    history = text.split("### History", 1)[1]
    assert "| drift | `t[cpu-x]` | 15 | drift: level now -12.1% vs the baseline \\| slope -1% |" in history
    assert "t[cpu-y]" not in history
    assert "### History" not in ci.markdown_summary(SessionResults({}, [_record(Verdict.PASS)]))


@given(st.text())
def test_markdown_row_cannot_break_the_table(message):
    text = ci.markdown_summary(SessionResults({}, [_record(Verdict.REGRESSION, message)]))
    row = text.splitlines()[-1]
    assert row.startswith("| regression |") and row.endswith(" |")
    assert row.replace("\\|", "").count("|") == 8


@given(st.text(), st.text())
def test_annotation_is_one_line_with_escaped_properties(test_id, message):
    (line,) = ci.github_annotations([_record(Verdict.REGRESSION, message, test_id=f"x::{test_id}")])
    assert "\n" not in line and "\r" not in line
    title = line.removeprefix("::error title=").split("::", 1)[0]
    assert "," not in title and ":" not in title.replace("%3A", "")


def test_no_annotation_for_verdicts_that_pass():
    assert ci.github_annotations([_record(v) for v in Verdict if v not in ci.BAD]) == []

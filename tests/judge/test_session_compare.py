"""``report compare`` and ``report merge``: two sessions judged with the verdict gate's statistics
(hwregress.judge.session_compare), on synthetic 120-test sessions with known injected slowdowns, memory growth and
telemetry; the page and the exit codes."""

from __future__ import annotations

import dataclasses
import html
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synthetic import MACHINES, synthetic_session, synthetic_test_id, write_session

from hwregress.cli import main
from hwregress.judge import stats
from hwregress.judge.session_compare import (
    NOT_COMPARED,
    compare_records,
    compare_sessions,
    throughput_change,
    tolerances_for,
)
from hwregress.judge.tolerances import Tolerances
from hwregress.report.compare_view import render_compare
from hwregress.store.results import SessionResults, TestRecord
from hwregress.store.verdicts import Verdict
from hwregress.summary import summarize

SLOW = 5  # the test made twice as slow in B


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def by_id(comparison) -> dict[str, object]:
    return {t.test_id: t for t in comparison.tests}


# -- the statistics ----------------------------------------------------------------------------------------------
def test_a_known_2x_slowdown_in_b_is_a_regression_and_nothing_else_moves():
    comparison = compare_sessions(synthetic_session(seed=1), synthetic_session(seed=2, slowdowns={SLOW: 2.0}))
    assert len(comparison.tests) == 120 and comparison.only_a == comparison.only_b == []
    assert comparison.counts() == {"regression": 1, "pass": 119}
    (slow,) = comparison.matching({"regression"})
    assert slow.test_id == synthetic_test_id(SLOW) and comparison.tests[0] is slow  # worst first
    assert slow.throughput.ratio == pytest.approx(0.5, rel=0.03)
    assert slow.throughput.threshold == pytest.approx(0.25)  # one session: the provisional threshold is the cap
    assert slow.p_value < 1e-3 and slow.throughput.p_slower == slow.p_value
    assert any("throughput regressed" in line and "ratio 0.5" in line for line in slow.judgement.failures)


def test_identical_sessions_pass():
    session = synthetic_session(seed=3, tests=30)
    comparison = compare_sessions(session, session)
    assert comparison.counts() == {"pass": 30}
    assert all(t.throughput.ratio == 1.0 and t.p_value > 0.4 and not t.judgement.failures for t in comparison.tests)
    assert comparison.machine_changes == []


def test_two_unchanged_sessions_with_noise_pass():
    comparison = compare_sessions(synthetic_session(seed=4, tests=30), synthetic_session(seed=5, tests=30))
    assert comparison.counts() == {"pass": 30}


def test_the_verdict_and_its_figures_are_the_gates_own():
    a, b = synthetic_session(seed=1, tests=12), synthetic_session(seed=2, tests=12, slowdowns={SLOW: 1.4, 7: 0.7})
    for row in compare_sessions(a, b).tests:
        figures = row.judgement.figures
        again = stats.compare(row.b.samples, row.a.samples, figures.threshold, alpha=0.01, z=3.0,
                              history=[summarize(row.a.samples).median], max_threshold=0.25)
        assert (figures.ratio, figures.p_value) == (row.throughput.ratio, row.throughput.p_slower)
        assert again.direction == row.throughput.direction
        expected = {"regression": "regression", "improvement": "improvement", "none": "pass"}[again.direction]
        assert row.verdict == expected, row.test_id


def test_a_smaller_cap_resolves_a_smaller_slowdown():
    a, b = synthetic_session(seed=1, tests=10), synthetic_session(seed=2, tests=10, slowdowns={SLOW: 1.15})
    assert compare_sessions(a, b).counts() == {"pass": 10}  # 13% is within the one-session threshold (the 25% cap)
    tight = compare_sessions(a, b, tolerances_for(tolerance=0.05, max_threshold=0.10))
    assert tight.counts() == {"regression": 1, "pass": 9}
    assert tight.tests[0].throughput.threshold == pytest.approx(0.10)


def test_tolerances_for_refuses_a_cap_below_the_tolerance():
    with pytest.raises(ValueError, match=r"at least the tolerance 0\.15"):
        tolerances_for(max_threshold=0.10)  # the CPU default tolerance is 15%
    assert tolerances_for(0.05, 0.10) == Tolerances(throughput=0.05, cpu_throughput=0.05, max_threshold=0.10)


def test_a_2x_speedup_is_an_improvement():
    comparison = compare_sessions(synthetic_session(seed=1, tests=8),
                                  synthetic_session(seed=2, tests=8, slowdowns={SLOW: 0.5}))
    (fast,) = comparison.matching({"improvement"})
    assert fast.throughput.ratio == pytest.approx(2.0, rel=0.03) and fast.p_value == fast.throughput.p_faster < 1e-3


def test_memory_growth_is_a_regression_with_its_delta():
    a, b = synthetic_session(seed=1, tests=8), synthetic_session(seed=1, tests=8, memory_growth={SLOW: 1.5})
    comparison = compare_sessions(a, b)
    (grown,) = comparison.matching({"regression"})
    assert grown.memory.change == pytest.approx(0.5) and grown.throughput.ratio == 1.0
    assert any("peak memory" in line and "exceeds the ceiling" in line for line in grown.judgement.failures)


def test_telemetry_energy_and_environment_differences_are_side_by_side():
    a = synthetic_session(seed=1, tests=3)
    b = synthetic_session(seed=1, tests=3, torch="2.5.0", power_w=300.0)
    comparison = compare_sessions(a, b)
    assert comparison.counts() == {"env-changed": 3}
    row = comparison.tests[0]
    power = next(d for d in row.telemetry if d.name == "power")
    assert (power.a, power.b, power.unit) == (250.0, 300.0, "W") and power.change == pytest.approx(0.2)
    assert row.energy.change == pytest.approx(0.2)
    assert row.judgement.figures.env_changes == ("torch 2.4.0 -> 2.5.0",)
    assert comparison.machine_changes == ["cpu: torch 2.4.0 -> 2.5.0"]


def test_a_test_not_measured_in_one_session_is_not_compared():
    a, b = synthetic_session(seed=1, tests=2), synthetic_session(seed=2, tests=2)
    b.records[0] = dataclasses.replace(b.records[0], verdict=Verdict.FAILED, samples=[], throughput=None)
    row = by_id(compare_sessions(a, b))[synthetic_test_id(0)]
    assert row.verdict == NOT_COMPARED and row.judgement is None and "B failed" in row.why_not


def test_comparing_two_machines_of_another_identity_judges_nothing_unless_accepted(tmp_path, capsys):
    a = write_session(tmp_path / "a.json", synthetic_session(seed=1, tests=2, machine=1))
    b = write_session(tmp_path / "b.json", synthetic_session(seed=2, tests=2, machine=2, slowdowns={0: 2.0}))
    status, out, err = run(capsys, "report", "compare", str(a), str(b), "-o", str(tmp_path / "d.html"),
                           "--fail-on", "regression")
    assert status == 2 and out == ""
    assert "every test in both (2) ran on hardware of another identity" in err and "--accept-identity" in err
    status, _, _ = run(capsys, "report", "compare", str(a), str(b), "-o", str(tmp_path / "d.html"),
                       "--fail-on", "regression", "--accept-identity")
    assert status == 1  # judged: the 2x slowdown fails the gate


def test_a_test_that_cannot_be_judged_is_invalid_never_not_compared(monkeypatch):
    from hwregress.judge import session_compare

    def refuse(measured, entry, tolerances, accept_identity=False):
        raise ValueError("baseline samples hand-edited to strings")

    a, b = synthetic_session(seed=1, tests=2), synthetic_session(seed=2, tests=2)
    monkeypatch.setattr(session_compare, "judge", refuse)
    comparison = compare_sessions(a, b)
    assert comparison.counts() == {"invalid": 2}
    assert comparison.tests[0].why_not == "cannot be judged: baseline samples hand-edited to strings"
    assert comparison.matching({"invalid"}) == comparison.tests  # every --fail-on includes invalid


def test_other_hardware_is_not_judged_unless_accepted():
    a = synthetic_session(seed=1, tests=2, machine=1)
    b = synthetic_session(seed=2, tests=2, machine=2, slowdowns={0: 2.0})
    assert compare_sessions(a, b).counts() == {"other-hardware": 2}
    accepted = compare_sessions(a, b, accept_identity=True)
    assert accepted.counts() == {"regression": 1, "pass": 1}
    assert any("gpu_name" in line for line in accepted.tests[0].judgement.figures.identity_changes)
    assert "cuda:0: name NVIDIA H100 80GB HBM3 -> NVIDIA H200" in accepted.machine_changes


def test_tests_in_one_session_only_are_listed():
    comparison = compare_sessions(synthetic_session(seed=1, tests=5), synthetic_session(seed=2, tests=7))
    assert comparison.only_b == sorted(synthetic_test_id(i) for i in (5, 6)) and comparison.only_a == []


def test_throughput_change_without_samples_is_none():
    a = TestRecord("t", throughput=10.0, samples=[10.0] * 5)
    assert throughput_change(a, TestRecord("t", throughput=10.0), Tolerances()) is None
    assert compare_records(a, TestRecord("t", samples=[10.0] * 5), Tolerances()).throughput.ratio == 1.0


# -- the command ---------------------------------------------------------------------------------------------------
@pytest.fixture
def two_sessions(tmp_path):
    """Two results files of 8 tests, B's test SLOW twice as slow."""
    a = write_session(tmp_path / "a" / "results.json", synthetic_session(seed=1, tests=8))
    b = write_session(tmp_path / "b" / "results.json", synthetic_session(seed=2, tests=8, slowdowns={SLOW: 2.0}))
    return a, b


def test_compare_writes_the_page_of_120_tests_and_fails_on_regression(tmp_path, capsys):
    a = write_session(tmp_path / "a" / "results.json", synthetic_session(seed=1))
    b = write_session(tmp_path / "b" / "results.json", synthetic_session(seed=2, slowdowns={SLOW: 2.0}))
    page = tmp_path / "diff.html"
    status, out, err = run(capsys, "report", "compare", str(a), str(b), "-o", str(page), "--fail-on", "regression")
    assert status == 1
    assert out.strip() == f"wrote {page} (120 tests in both sessions: 1 regression, 119 pass)"
    assert re.fullmatch(rf"hwregress: regression: {re.escape(synthetic_test_id(SLOW))} \(B/A 0\.\d+\)\n", err), err
    text = page.read_text(encoding="utf-8")
    rows = re.findall(r'<tr class="row-([a-z-]+)" data-verdict="\1">', text)
    assert rows[0] == "regression" and rows.count("pass") == 119
    assert text.count('<svg class="chart strip"') == 120 and str(a) in text and str(b) in text


def test_compare_exit_codes(two_sessions, tmp_path, capsys):
    a, b = two_sessions
    page = str(tmp_path / "diff.html")
    assert run(capsys, "report", "compare", str(a), str(b), "-o", page)[0] == 0  # no gate asked for
    assert run(capsys, "report", "compare", str(a), str(a), "-o", page, "--fail-on", "regression")[0] == 0
    assert run(capsys, "report", "compare", str(a), str(b), "-o", page, "--fail-on", "improvement")[0] == 0
    assert run(capsys, "report", "compare", str(b), str(a), "-o", page, "--fail-on", "improvement")[0] == 1
    assert run(capsys, "report", "compare", str(b), str(a), "-o", page, "--fail-on", "any")[0] == 1


@pytest.mark.parametrize("argv", [
    ["--max-threshold", "0.1"],  # below the CPU tolerance
    ["--max-threshold", "1.5"],
    ["--tolerance", "x"],
    ["--fail-on", "drift"],
])
def test_compare_bad_options_are_one_line_errors(two_sessions, tmp_path, capsys, argv):
    a, b = two_sessions
    status, out, err = run(capsys, "report", "compare", str(a), str(b), "-o", str(tmp_path / "d.html"), *argv)
    assert status == 2 and out == "" and len(err.splitlines()) == 1 and err.startswith("hwregress: ")
    assert not (tmp_path / "d.html").exists()


def test_compare_refuses_to_overwrite_an_input_or_read_a_missing_file(two_sessions, tmp_path, capsys):
    a, b = two_sessions
    status, _, err = run(capsys, "report", "compare", str(a), str(b), "-o", str(b))
    assert status == 2 and "an output never overwrites an input" in err
    status, _, err = run(capsys, "report", "compare", str(tmp_path / "none.json"), str(b), "-o",
                         str(tmp_path / "d.html"))
    assert status == 2 and "none.json" in err and "cannot open" in err


# -- gates that must not pass on nothing --------------------------------------------------------------------------
def _without_tests(session: SessionResults) -> SessionResults:
    return dataclasses.replace(session, records=[])


def _renamed(session: SessionResults) -> SessionResults:
    return dataclasses.replace(session, records=[dataclasses.replace(r, test_id=r.test_id + "-other")
                                                 for r in session.records])


def _all_failed(session: SessionResults) -> SessionResults:
    return dataclasses.replace(session, records=[dataclasses.replace(r, verdict=Verdict.FAILED, samples=[],
                                                                     throughput=None) for r in session.records])


@pytest.mark.parametrize(("make_a", "make_b", "what"), [
    (lambda s: s, _without_tests, "no test in common (A: 4 tests, B: 0)"),
    (_without_tests, _without_tests, "no test in common (A: 0 tests, B: 0)"),
    (lambda s: s, _renamed, "no test in common (A: 4 tests, B: 4)"),
    (lambda s: s, _all_failed, "no test measured in both (4 tests in both, not measured: B failed in 4)"),
], ids=["b-empty", "both-empty", "nothing-in-common", "nothing-measured-in-both"])
@pytest.mark.parametrize("gate", [[], ["--fail-on", "any"], ["--fail-on", "regression"]])
def test_comparing_nothing_is_an_error_naming_both_files(tmp_path, capsys, make_a, make_b, what, gate):
    session = synthetic_session(seed=1, tests=4)
    a = write_session(tmp_path / "a.json", make_a(session))
    b = write_session(tmp_path / "b.json", make_b(synthetic_session(seed=2, tests=4)))
    page = tmp_path / "diff.html"
    status, out, err = run(capsys, "report", "compare", str(a), str(b), "-o", str(page), *gate)
    assert status == 2 and out == "" and not page.exists()
    (line,) = err.splitlines()
    assert line.startswith(f"hwregress: {a} and {b}: {what}; nothing was compared (")
    assert "give two results.json of sessions that ran the same tests" in line


@pytest.mark.parametrize("side", ["A", "B"])
def test_a_test_without_samples_is_invalid_never_a_pass(side):
    a, b = synthetic_session(seed=1, tests=2), synthetic_session(seed=2, tests=2)
    empty = a if side == "A" else b
    empty.records[0] = dataclasses.replace(empty.records[0], samples=[])
    row = by_id(compare_sessions(a, b))[synthetic_test_id(0)]
    assert row.verdict == "invalid" and row.judgement is None
    assert row.why_not == f"no samples in {side}: no per-round throughput to compare (re-run the test in {side})"
    assert compare_sessions(a, b).counts() == {"invalid": 1, "pass": 1}


def test_a_parity_test_without_samples_is_still_compared_on_its_accuracy():
    def parity(accuracy: float) -> SessionResults:
        return SessionResults({}, [TestRecord("p", family="parity", unit="accuracy", accuracy=accuracy,
                                              verdict=Verdict.PASS)])

    assert compare_sessions(parity(0.97), parity(0.97)).counts() == {"pass": 1}
    assert compare_sessions(parity(0.97), parity(0.50)).counts() == {"regression": 1}


@pytest.mark.parametrize(("value", "spelled"), [(-5.0, "-5.0"), (0.0, "0.0"), (float("nan"), "nan"),
                                                (float("inf"), "inf")])
def test_a_sample_that_is_not_a_finite_positive_throughput_is_invalid_naming_it(value, spelled):
    a, b = synthetic_session(seed=1, tests=2), synthetic_session(seed=2, tests=2)
    b.records[1].samples[3] = value
    row = by_id(compare_sessions(a, b))[synthetic_test_id(1)]
    assert row.verdict == "invalid" and row.judgement is None
    assert row.why_not == (f"B sample 4 of 10 is {spelled}: a throughput must be a finite number > 0 "
                           "(a measurement defect; re-run the test in B)")


def _nan_token_file(path, session: SessionResults, test_id: str) -> str:
    """A results file whose record of ``test_id`` holds a bare JSON NaN token in its samples, as Python's json
    writes."""
    data = session.to_json()
    next(r for r in data["records"] if r["test_id"] == test_id)["samples"][0] = float("nan")
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("gate", ["any", "regression", "improvement"])
def test_invalid_tests_fail_every_gate_and_each_is_named_with_its_reason(tmp_path, capsys, gate):
    a = write_session(tmp_path / "a.json", synthetic_session(seed=1, tests=3))
    session = synthetic_session(seed=2, tests=3)
    session.records[0].samples = []
    b = _nan_token_file(tmp_path / "b.json", session, synthetic_test_id(1))
    page = tmp_path / "diff.html"
    status, out, err = run(capsys, "report", "compare", str(a), b, "-o", str(page), "--fail-on", gate)
    assert status == 1
    assert out.strip() == f"wrote {page} (3 tests in both sessions: 2 invalid, 1 pass)"
    assert sorted(err.splitlines()) == sorted([
        f"hwregress: invalid: {synthetic_test_id(0)}: no samples in B: no per-round throughput to compare "
        "(re-run the test in B)",
        f"hwregress: invalid: {synthetic_test_id(1)}: B sample 1 of 10 is nan: a throughput must be a finite "
        "number > 0 (a measurement defect; re-run the test in B)"])
    assert 'data-verdict="invalid"' in page.read_text(encoding="utf-8")
    assert run(capsys, "report", "compare", str(a), b, "-o", str(page))[0] == 0  # no gate asked for


# -- report merge -------------------------------------------------------------------------------------------------
def test_merge_judges_each_machine_against_the_first_with_the_gates_statistics(tmp_path, capsys):
    a = write_session(tmp_path / "a.json", synthetic_session(seed=1, tests=3))
    second = synthetic_session(seed=2, tests=3, slowdowns={0: 2.0})
    for record in second.records:
        record.hardware_key = "zz-second-machine"  # sorts after the first machine's key: judged against it
    b = write_session(tmp_path / "b.json", second)
    page = tmp_path / "merged.html"
    assert run(capsys, "report", "merge", str(a), str(b), "-o", str(page))[0] == 0
    text = html.unescape(page.read_text(encoding="utf-8"))
    changes = re.findall(r'<span class="change change-(\w+)" title="ratio of medians ([\d.]+)[^"]*">([^<]*)</span>',
                         text)
    assert len(changes) == 3  # the second machine's cells; the first is the reference
    slower = [c for c in changes if c[0] == "regression"]
    assert (len(slower) == 1 and float(slower[0][1]) == pytest.approx(0.5, rel=0.03)
            and slower[0][2].startswith("slower (p="))
    assert sum(c[2].startswith("no significant change") for c in changes) == 2


# -- rendering properties ------------------------------------------------------------------------------------------
NAMES = st.text(alphabet=st.sampled_from("ab<>&\"'/[]:= \u00e9\u2603"), min_size=1, max_size=30)
SAMPLES = st.lists(st.floats(min_value=1e-3, max_value=1e6, allow_nan=False), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(NAMES, min_size=1, max_size=4, unique=True), a=SAMPLES, b=SAMPLES, unit=NAMES)
def test_any_pair_of_sessions_renders_with_names_escaped(names, a, b, unit):
    key, device, name, identity = MACHINES[0]

    def session(samples: list[float]) -> SessionResults:
        return SessionResults({"hostname": names[0]}, [
            TestRecord(test_id, hardware_key=key, device=device, device_name=name, unit=unit, samples=list(samples),
                       throughput=summarize(samples).median, verdict=Verdict.PASS, identity=identity)
            for test_id in names])

    comparison = compare_sessions(session(a), session(b))
    page = render_compare(comparison, [names[0], names[-1]], ["<a>.json", "b&.json"], [{"hostname": names[0]}, {}])
    assert "<a>" not in page and "b&.json" not in page
    for test_id in names:
        short = test_id.rsplit("::", 1)[-1]
        assert html.escape(short, quote=False) in page.replace("&#39;", "'").replace("&#34;", '"')
    assert json.dumps(comparison.counts())  # plain counts
    assert page.count('<svg class="chart strip"') == len(names)

"""``python -m hwregress store push|import|export`` end to end on a real SQLite file: push is idempotent and says so,
a history folder imports by session, the export reads back with the history reader, and bad inputs or an unreachable
store are one line with exit status 2."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.store_results import results_document

from hwregress.cli import main
from hwregress.store.history import HistoryStore, read_history
from hwregress.store.results import TestRecord

FUZZED = itertools.count()  # a session name per pushed example: a name pushed twice is not inserted again


def test_push_import_and_export_end_to_end(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    results = tmp_path / "results.json"
    results.write_text(json.dumps(results_document("vm-1-20261127T012215Z")))
    assert main(["store", "push", str(results), "--store", url]) == 0
    assert main(["store", "push", str(results), "--store", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{results}: session vm-1-20261127T012215Z: inserted (6 figures)",
                   f"{results}: session vm-1-20261127T012215Z: already present (6 figures), unchanged"]

    assert main(["store", "export", "--dir", str(tmp_path / "exported"), "--store", url]) == 0
    read = read_history(tmp_path / "exported" / "amd-epyc-f26m2-2t.jsonl")
    assert read.warnings == [] and len(read.rows) == 3
    assert {row["session"] for row in read.rows} == {"vm-1-20261127T012215Z"}
    assert sorted(row["median"] for row in read.rows) == [10.0, 11.0, 12.0]
    assert main(["store", "export", "--dir", str(tmp_path / "exported"), "--store", url]) == 0  # nothing twice
    assert len(read_history(tmp_path / "exported" / "amd-epyc-f26m2-2t.jsonl").rows) == 3

    # the exported history imports into a second store as the same session, figures without samples
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    capsys.readouterr()
    assert main(["store", "import", str(tmp_path / "exported"), "--store", other]) == 0
    assert "session vm-1-20261127T012215Z: inserted (3 figures)" in capsys.readouterr().out
    assert main(["store", "export", "--dir", str(tmp_path / "again"), "--store", other]) == 0
    again = HistoryStore(tmp_path / "again").read("amd-epyc-f26m2-2t")
    assert [(r["test_id"], r["median"], r["q1"], r["q3"]) for r in again.rows] == [
        (r["test_id"], r["median"], r["q1"], r["q3"]) for r in read.rows]


def test_bad_inputs_and_an_unreachable_store_are_one_line(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    not_results = tmp_path / "other.json"
    not_results.write_text('{"entries": {}}')
    cases = [(["store", "push", str(tmp_path / "missing.json"), "--store", url], "cannot open"),
             (["store", "push", str(not_results), "--store", url], "is not a results.json"),
             (["store", "push", str(not_results), "--store", "postgresql+psycopg://u:pw@127.0.0.1:1/db"],
              "is not a results.json"),  # inputs are checked before the store is opened
             (["store", "export", "--dir", str(tmp_path), "--store", "nosuch://x"], "no SQLAlchemy dialect")]
    for argv, said in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1 and err.startswith("hwregress: ")


def _history_file(folder, session="vm-1-20261127T012215Z", tests=2):
    """A real history file of one session of ``tests`` tests, written by the history writer."""
    records = [TestRecord(f"t{index}", family="throughput", hardware_key="cpu-a", model="resnet18", mode="train",
                          batch_size=8, dtype="fp32", throughput=5.0, samples=[5.0, 5.1, 4.9], device="cpu")
               for index in range(tests)]
    store = HistoryStore(folder)
    store.append_session(records, session, "2026-11-22T10:00:00+00:00")
    return store.path_for("cpu-a")


def test_a_history_with_no_valid_row_is_one_line_naming_the_file_and_the_first_rows_problem(tmp_path, capsys):
    # it imported nothing and exited 0 with no summary (only each line's warning), where an empty folder exited 2
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('not json\n{"v": 9}\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    folder = tmp_path / "history"
    folder.mkdir()
    (folder / "cpu-a.jsonl").write_text('{"v": 9}\n')
    fix = "give a history file a session wrote, e.g. reports/history/<hardware-key>.jsonl"
    cases = [(bad, f"hwregress: {bad}: holds no valid history row: 2 lines skipped, the first at line 1: not a JSON "
                   f"line (a torn or edited write) ({fix})"),
             (empty, f"hwregress: {empty}: holds no history row: the file is empty ({fix})"),
             (folder, f"hwregress: {folder}: holds no valid history row: 1 line skipped, the first at "
                      f"{folder / 'cpu-a.jsonl'}:1: row version 9 is not 1 (written by another hwregress version) "
                      f"({fix})")]
    for path, said in cases:
        assert main(["store", "import", str(path), "--store", url]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.splitlines() == [said]
    assert not (tmp_path / "store.sqlite").exists()  # inputs are checked before the store is opened


def test_a_history_partly_valid_imports_its_rows_and_says_how_many_were_skipped_and_why(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    history = _history_file(tmp_path / "history")
    with history.open("a") as stream:
        stream.write('not json\n{"v": 9}\nnot json either\n')
    assert main(["store", "import", str(history), "--store", url]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"hwregress: warning: {history}: 3 of 5 lines skipped, not imported: 2 not a JSON line (a torn or edited "
        "write) (the first at line 3), 1 row version 9 is not 1 (written by another hwregress version) (the first at "
        "line 4)",
        f"{history}: session vm-1-20261127T012215Z: inserted (2 figures)"]


FIX = "(give a results.json written by hwregress (its meta has session and started_at))"
T0 = "bench_tests/test_models.py::test_throughput[cpu-resnet18-train-bs0]"


@pytest.mark.parametrize(("change", "said"), [
    ({"records": [{}]}, "record 0 is malformed: no 'test_id' (the test's pytest node id)"),
    ({"records": [5]}, "record 0 is malformed: not an object but int"),
    ({"identity": "abc"}, f"record 0 ({T0}) is malformed: 'identity' must be dict[str, Any], found \"abc\""),
    ({"diagnosis": 5}, f"record 0 ({T0}) is malformed: 'diagnosis' must be list[str], found 5"),
    ({"samples": "x"}, f"record 0 ({T0}) is malformed: 'samples' must be list[float], found \"x\""),
    ({"environment": [1]}, f"record 0 ({T0}) is malformed: 'environment' must be dict[str, Any], found [1]"),
    ({"verdict": "bogus"}, f"record 0 ({T0}) is malformed: unknown verdict 'bogus'; one of regression"),
    ({"details": {"identity": "abc"}, "identity": {}},
     f"record 0 ({T0}) is malformed: 'identity' must be dict[str, Any], found \"abc\""),
], ids=["no-test-id", "not-an-object", "identity", "diagnosis", "samples", "environment", "verdict", "legacy-identity"])
def test_a_malformed_record_in_a_pushed_results_file_is_one_line_naming_the_file_record_and_field(tmp_path, capsys,
                                                                                                 change, said):
    # it was "unexpected TypeError ... (a defect in hwregress)" without the file's name; samples "x" was stored as none
    document = results_document("vm-1-20261127T012215Z")
    if "records" in change:
        document.update(change)
    else:
        document["records"][0].update(change)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(document))
    for action in ("push", "import"):
        assert main(["store", action, str(path), "--store", f"sqlite:///{tmp_path / 'store.sqlite'}"]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        [error] = captured.err.splitlines()
        assert error.startswith(f"hwregress: {path}: {said}") and error.endswith(FIX), error
    assert not (tmp_path / "store.sqlite").exists()


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                           | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)
RECORD_FIELDS = [*sorted(field.name for field in dataclasses.fields(TestRecord)), "details.identity", "unknown"]
META_FIELDS = ["hostname", "machine_id", "finished_at", "exitstatus", "interrupted", "ci", "git", "provenance",
               "hardware", "unknown"]


@pytest.fixture(scope="module")
def store_url(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('fuzzed') / 'store.sqlite'}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(["record"] * 3 + ["meta"]), field=st.data(), value=JSON_VALUES)
def test_a_push_of_any_malformed_field_is_stored_or_one_line_never_a_defect(tmp_path_factory, store_url, where, field,
                                                                           value):
    document = results_document(f"fuzzed-{next(FUZZED)}", tests=1)
    if where == "record":
        name = field.draw(st.sampled_from(RECORD_FIELDS))
        if name == "details.identity":
            document["records"][0].update(details={"identity": value}, identity={})
        else:
            document["records"][0][name] = value
    else:
        document["meta"][field.draw(st.sampled_from(META_FIELDS))] = value
    path = tmp_path_factory.mktemp("results") / "results.json"
    path.write_text(json.dumps(document))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["store", "push", str(path), "--store", store_url])
    assert "a defect in hwregress" not in err.getvalue(), err.getvalue()
    assert (status, err.getvalue().count("\n")) in ((0, 0), (2, 1)), err.getvalue()
    if status == 2:
        assert err.getvalue().startswith(f"hwregress: {path}: "), err.getvalue()


def test_a_session_name_with_a_control_character_is_printed_escaped_on_one_line(tmp_path, capsys):
    # a session name from a hand-edited results.json or history printed raw: its newline broke the line in two
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    results = tmp_path / "results.json"
    results.write_text(json.dumps(results_document("vm-1\nforged: inserted\x1b[31m")))
    history = _history_file(tmp_path / "history", session="vm-2\nforged")
    assert main(["store", "push", str(results), "--store", url]) == 0
    assert main(["store", "import", str(history), "--store", url]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{results}: session 'vm-1\\nforged: inserted\\x1b[31m': inserted (6 figures)",
        f"{history}: session 'vm-2\\nforged': inserted (2 figures)"]

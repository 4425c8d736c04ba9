"""The history row's declared types: the shipped schema is the one generated from them, every row the session writes
conforms, and a row read back with any field of the wrong type is skipped with a warning naming file, line and field
while the rest of the file is read. The wrong-typed cases are generated from the schema, so a field added to the row
is covered without touching this file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.history_rows import ROW_SCHEMA, wrong_values

from hwregress.store.figures import ReachFigures
from hwregress.store.history import HistoryStore
from hwregress.store.history_row import row_from_record
from hwregress.store.results import TestRecord

MACHINE_ID = "3d1219c7c4c5404aaa1f6d2a48adfda4"


def valid_row(index: int = 0) -> dict[str, Any]:
    """A row with every declared field, as a session writes it (one that was interrupted: the only rows that carry
    ``interrupted``)."""
    record = TestRecord(f"bench_tests/test_throughput.py::test_train[tiny-{index}]", family="throughput",
                        hardware_key="cpu-a", device="cpu", device_name="CPU A", model="tiny", mode="train",
                        batch_size=4, dtype="fp32", unit="samples/s", samples=[99.0, 100.0, 101.0 + index], ratio=1.0,
                        threshold=0.05, baseline_throughput=100.0, baseline_recorded_at="2026-02-01T00:00:00+00:00",
                        latency_ms=40.0,
                        environment={"torch": "2.4.0"}, identity={"cpu_family": 25},
                        health={"other_cpu_fraction": 0.0}, diagnosis=["CPU contention"],
                        telemetry={"metrics": {"cpu_util_pct": {"mean": 97.0}}},
                        reach=ReachFigures(figure="throughput", mds=0.081 + index / 1000))
    row = row_from_record(record, "session-1", "2026-03-01T02:00:00+00:00", "0123456789abcdef", interrupted=True,
                          machine_id=MACHINE_ID)
    assert row is not None
    return dict(row)


WRONG_CASES = [pytest.param(name, value, id=f"{name}={json.dumps(value)}")
               for name, field in ROW_SCHEMA["properties"].items() for value in wrong_values(field)]


def test_the_wrong_cases_cover_every_declared_field():
    covered = {case.values[0] for case in WRONG_CASES}
    assert covered == set(ROW_SCHEMA["properties"]) and len(covered) >= 30


def test_the_shipped_row_schema_is_the_one_generated_from_the_row_type():
    from hwregress.store.schemas.generate import HISTORY_ROW_SCHEMA_PATH, REGENERATE, history_row_schema, schema_text

    assert HISTORY_ROW_SCHEMA_PATH.read_text(encoding="utf-8") == schema_text(history_row_schema()), (
        f"{HISTORY_ROW_SCHEMA_PATH.name} differs from hwregress.store.history_row.HistoryRow; regenerate it with: "
        f"{REGENERATE}")


def test_a_session_row_has_every_declared_field_and_conforms():
    row = valid_row()
    assert set(row) == set(ROW_SCHEMA["properties"])  # the builder and the declaration name the same fields
    jsonschema.validate(row, ROW_SCHEMA)


def test_a_row_keeps_the_mds_of_the_tests_headline_reach_and_null_without_one():
    assert valid_row()["mds"] == 0.081
    record = TestRecord("t", hardware_key="cpu-a", samples=[1.0, 2.0],
                        latency_reach=ReachFigures(figure="latency", mds=0.2))
    assert row_from_record(record, "s", "2026-03-01T02:00:00+00:00", "")["mds"] == 0.2  # no throughput judged
    record.reach = ReachFigures(figure="throughput", why_none="4 rounds against 4 cannot reach p < 0.01")
    assert row_from_record(record, "s", "2026-03-01T02:00:00+00:00", "")["mds"] is None
    record.reach = record.latency_reach = None
    assert row_from_record(record, "s", "2026-03-01T02:00:00+00:00", "")["mds"] is None


def test_a_row_names_the_machine_that_ran_it_only_where_the_session_knew_it(tmp_path):
    record = TestRecord("t", hardware_key="cpu-a", samples=[1.0, 2.0])
    store = HistoryStore(tmp_path)
    store.append_session([record], "known", "2026-03-01T02:00:00+00:00", machine_id=MACHINE_ID)
    store.append_session([record], "unknown", "2026-03-02T02:00:00+00:00")
    read = store.read("cpu-a")
    assert read.warnings == []
    assert [(row["session"], row.get("machine_id", "absent")) for row in read.rows] == [
        ("known", MACHINE_ID), ("unknown", "absent")]  # a row without one (and every older row) stays valid
    jsonschema.validate(read.rows[0], ROW_SCHEMA)
    jsonschema.validate(read.rows[1], ROW_SCHEMA)


@given(samples=st.lists(st.floats(min_value=1e-6, max_value=1e12), min_size=1, max_size=20),
       ratio=st.none() | st.floats(allow_nan=True, allow_infinity=True), batch=st.none() | st.integers(1, 4096))
def test_any_row_a_session_writes_is_read_back(tmp_path_factory, samples, ratio, batch):
    record = TestRecord("t", hardware_key="cpu-a", samples=samples, ratio=ratio, batch_size=batch)
    row = row_from_record(record, "s", "2026-03-01T02:00:00+00:00", "abcd")
    assert row is not None
    jsonschema.validate(row, ROW_SCHEMA)
    store = HistoryStore(tmp_path_factory.mktemp("history"))
    store.append("cpu-a", [row])
    read = store.read("cpu-a")
    assert read.warnings == [] and read.rows == [row]


def write_lines(path: Path, rows: list[Any]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


@pytest.mark.parametrize(("name", "value"), WRONG_CASES)
def test_a_row_with_a_field_of_the_wrong_type_is_skipped_naming_file_line_and_field(tmp_path, name, value):
    bad = {**valid_row(1), name: value}
    with pytest.raises(jsonschema.ValidationError):  # the schema says the same as the reader
        jsonschema.validate(bad, ROW_SCHEMA)
    store = HistoryStore(tmp_path)
    path = store.path_for("cpu-a")
    write_lines(path, [valid_row(0), bad, valid_row(2)])

    read = store.read("cpu-a")

    assert read.rows == [valid_row(0), valid_row(2)]
    (warning,) = read.warnings
    assert warning.startswith(f"{path}:2: skipped: "), warning
    assert f"'{name}'" in warning or (name == "v" and "row version" in warning), warning


def test_every_wrong_field_of_a_row_is_named_in_its_one_warning(tmp_path):
    write_lines(tmp_path / "cpu-a.jsonl", [{**valid_row(), "iqr": "x", "telemetry": {"power_w": "hot"}, "n": 2.5}])
    (warning,) = HistoryStore(tmp_path).read("cpu-a").warnings
    assert all(f"'{name}'" in warning for name in ("iqr", "telemetry", "n")), warning


def test_rows_sharing_equal_objects_keep_their_own_values_and_types(tmp_path):
    rows = [{**valid_row(i), "identity": identity, "environment": {"torch": "2.4.0"}}
            for i, identity in enumerate([{"cpu_avx2": True}, {"cpu_avx2": 1}, {"cpu_avx2": True}, {"cpu_avx2": 1.0}])]
    write_lines(tmp_path / "cpu-a.jsonl", rows)
    read = HistoryStore(tmp_path).read("cpu-a").rows
    assert read == rows
    assert [type(row["identity"]["cpu_avx2"]) for row in read] == [bool, int, bool, float]
    assert read[0]["identity"] is read[2]["identity"] and read[0]["environment"] is read[3]["environment"]

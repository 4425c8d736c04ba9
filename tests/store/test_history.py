"""The session history store: rows from records, append/read round trips, corrupt and torn lines, concurrent
appenders, refused rows."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwregress import __version__
from hwregress.judge.trends import load_trends
from hwregress.store import history as history_module
from hwregress.store.history import HistoryStore, package_hash
from hwregress.store.history_row import HISTORY_ROW_VERSION, row_from_record
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict

TIME = "2026-03-01T02:00:00+00:00"


def make_row(test_id: str = "model=tiny-train", median: float = 100.0, **extra: Any) -> dict[str, Any]:
    """A valid history row (the fields the reader checks, plus ``extra``)."""
    return {"v": HISTORY_ROW_VERSION, "session": "s1", "time": TIME, "test_id": test_id, "hardware_key": "cpu-key",
            "median": median, **extra}


def line_of(row: Any) -> bytes:
    return json.dumps(row).encode("utf-8") + b"\n"


def appended_rows(data: bytes) -> list[Any]:
    """The rows of whole lines ``data`` (each ending in a newline)."""
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data[:-1].split(b"\n")]


def measured_record(**overrides: Any) -> TestRecord:
    fields: dict[str, Any] = {
        "test_id": "bench_tests/test_throughput.py::test_train[tiny]", "hardware_key": "cpu-a", "device": "cpu",
        "device_name": "AMD EPYC 7B13", "unit": "samples/s", "samples": [5.0, 1.0, 4.0, 2.0, 3.0],
        "verdict": Verdict.REGRESSION, "ratio": 0.9, "threshold": 0.05, "baseline_throughput": 3.3,
        "baseline_recorded_at": "2026-02-01T00:00:00+00:00", "environment": {"torch": "2.4.0"},
        "identity": {"cpu_family": 25},
        "telemetry": {"metrics": {"power_w": {"mean": 250.0, "max": 300.0}, "sm_clock_mhz": {"mean": 1800},
                                  "temperature_c": {"mean": float("nan")}, "fan_pct": {"mean": 40.0}}},
    }
    return TestRecord(**{**fields, **overrides})


# row_from_record


def test_row_from_record_summarizes_samples_and_picks_telemetry_means():
    record = measured_record(samples=[5.0, 1.0, float("nan"), 4.0, 0.0, 2.0, -7.0, 3.0, float("inf")])
    row = row_from_record(record, session="sess", time=TIME, packages="abcd")
    assert row is not None
    # only the finite positive samples count: 1..5 -> quartiles 2, 3, 4 (linear interpolation)
    assert (row["median"], row["q1"], row["q3"], row["iqr"], row["n"]) == (3.0, 2.0, 4.0, 2.0, 5)
    assert row["telemetry"] == {"power_w": 250.0, "sm_clock_mhz": 1800.0}  # NaN and unknown metrics left out
    assert row["v"] == HISTORY_ROW_VERSION
    assert (row["session"], row["time"], row["packages"]) == ("sess", TIME, "abcd")
    assert (row["test_id"], row["hardware_key"], row["device"], row["device_name"]) == (
        record.test_id, "cpu-a", "cpu", "AMD EPYC 7B13")
    assert row["verdict"] == "regression" and isinstance(row["verdict"], str)
    assert (row["ratio"], row["threshold"], row["baseline_median"]) == (0.9, 0.05, 3.3)
    assert row["baseline_recorded_at"] == "2026-02-01T00:00:00+00:00"
    assert row["identity"] == {"cpu_family": 25}
    assert row["environment"] == {"torch": "2.4.0"}
    assert row["hwregress_version"] == __version__
    assert row["unit"] == "samples/s"


def test_row_from_record_keeps_the_test_identity_for_the_dashboard_filters():
    record = measured_record(family="throughput", model="resnet18", mode="infer", batch_size=8, dtype="bf16")
    row = row_from_record(record, "s", TIME, "abcd")
    assert row is not None
    assert {k: row[k] for k in ("family", "model", "mode", "batch_size", "dtype")} == {
        "family": "throughput", "model": "resnet18", "mode": "infer", "batch_size": 8, "dtype": "bf16"}


def test_row_from_record_keeps_cpu_health_shares_and_the_first_two_causes():
    record = measured_record(health={"other_cpu_fraction": 0.39, "steal_fraction": float("nan"), "logical_cores": 2,
                                     "cpu_governor": None},
                             diagnosis=["CPU contention: ...", "operators slower ...", "a third cause"])
    row = row_from_record(record, "s", TIME, "abcd")
    assert row is not None
    assert row["health"] == {"other_cpu_fraction": 0.39}
    assert row["diagnosis"] == ["CPU contention: ...", "operators slower ..."]


def test_row_from_record_without_telemetry_or_baseline():
    record = measured_record(telemetry=None, baseline_throughput=float("nan"), ratio=None, identity={})
    row = row_from_record(record, "s", TIME, "abcd")
    assert row is not None
    assert row["telemetry"] == {}
    assert row["baseline_median"] is None and row["ratio"] is None
    assert row["identity"] == {}


@pytest.mark.parametrize("overrides", [
    {"samples": []},
    {"samples": [float("nan"), 0.0, -1.0]},
    {"hardware_key": None},
    {"hardware_key": ""},
], ids=["no-samples", "no-valid-samples", "no-key", "empty-key"])
def test_row_from_record_is_none_when_nothing_was_measured(overrides):
    assert row_from_record(measured_record(**overrides), "s", TIME, "abcd") is None


# append_session and read


def test_append_session_round_trips_and_splits_by_hardware_key(tmp_path, monkeypatch):
    writes: list[Path] = []
    real_write = history_module.atomic_write_json
    monkeypatch.setattr(history_module, "atomic_write_json", lambda path, data: (writes.append(Path(path)),
                                                                                 real_write(path, data)))
    store = HistoryStore(tmp_path / "history")
    records = [measured_record(test_id="a1"), measured_record(test_id="b1", hardware_key="gpu-b"),
               measured_record(test_id="a2", samples=[10.0, 12.0]), measured_record(test_id="none", samples=[])]
    assert store.append_session(records, session="s1", time=TIME) == {"cpu-a": 2, "gpu-b": 1}
    assert store.append_session([measured_record(test_id="a3")], session="s2", time=TIME) == {"cpu-a": 1}

    # the store hashes this process's package list as first read (frozen: a package installed mid-session must not
    # split one session over two hashes); reading it afresh here raced with whatever else was installing
    frozen = list(history_module._this_process_packages())
    digest = package_hash(frozen)
    expected_a = [row_from_record(r, "s1", TIME, digest) for r in records[0:3:2]]
    expected_a.append(row_from_record(measured_record(test_id="a3"), "s2", TIME, digest))
    read_a = store.read("cpu-a")
    assert read_a.rows == expected_a and read_a.warnings == []
    read_b = store.read("gpu-b")
    assert read_b.rows == [row_from_record(records[1], "s1", TIME, digest)] and read_b.warnings == []
    assert store.hardware_keys() == ["cpu-a", "gpu-b"]
    assert sorted(p.name for p in (tmp_path / "history").glob("*.jsonl")) == ["cpu-a.jsonl", "gpu-b.jsonl"]

    # the package list behind the hash: written once, for two sessions
    assert writes == [tmp_path / "history" / "packages" / f"{digest}.json"]
    assert store.packages(digest) == frozen
    assert store.packages("0" * 16) is None


def test_row_from_record_marks_an_interrupted_session_and_only_that():
    assert row_from_record(measured_record(), "s", TIME, "abcd", interrupted=True)["interrupted"] is True
    assert "interrupted" not in row_from_record(measured_record(), "s", TIME, "abcd")


def test_row_from_record_writes_the_version_it_is_given_and_leaves_an_unknown_one_out():
    assert row_from_record(measured_record(), "s", TIME, "abcd")["hwregress_version"] == __version__
    given = row_from_record(measured_record(), "s", TIME, "abcd", hwregress_version="0.0.7")
    assert given["hwregress_version"] == "0.0.7"
    assert "hwregress_version" not in row_from_record(measured_record(), "s", TIME, "abcd", hwregress_version=None)


def test_a_recovered_session_is_appended_once_with_its_package_list_unknown(tmp_path):
    store = HistoryStore(tmp_path / "history")
    records = [measured_record(test_id="a1"), measured_record(test_id="a2"), measured_record(test_id="b1",
                                                                                            hardware_key="gpu-b")]
    assert store.append_recovered(records[:1], "dead", TIME, interrupted=True, hwregress_version="0.0.7") == (1, 1)
    assert store.append_recovered(records, "dead", TIME, interrupted=True, hwregress_version="0.0.7") == (3, 2)
    assert store.append_recovered(records, "dead", TIME, interrupted=True, hwregress_version="0.0.7") == (3, 0)
    rows = store.read("cpu-a").rows
    assert [(r["session"], r["test_id"], r["interrupted"], r["packages"], r["hwregress_version"]) for r in rows] == [
        ("dead", "a1", True, "", "0.0.7"), ("dead", "a2", True, "", "0.0.7")]
    assert not (tmp_path / "history" / "packages").exists()  # this process's list is not the dead session's
    assert store.append_session(records[:1], "other", TIME) == {"cpu-a": 1}  # another session's row is its own


def test_append_session_without_measured_records_writes_nothing(tmp_path):
    store = HistoryStore(tmp_path / "history")
    assert store.append_session([measured_record(samples=[])], session="s", time=TIME) == {}
    assert not (tmp_path / "history").exists()


def test_absent_file_reads_empty(tmp_path):
    read = HistoryStore(tmp_path).read("nothing")
    assert (read.rows, read.warnings) == ([], [])
    assert HistoryStore(tmp_path / "absent").hardware_keys() == []


def test_folder_in_place_of_the_file_raises(tmp_path):
    store = HistoryStore(tmp_path)
    store.path_for("cpu-key").mkdir()
    with pytest.raises(OSError, match=r"cpu-key\.jsonl"):
        store.read("cpu-key")


# not a regular file in a history file's place: named with its kind, never read or written, never blocking

IRREGULAR_CHILD = """
import json, sys
from hwregress.judge.trends import load_trends
from hwregress.store.history import HistoryStore
store = HistoryStore(sys.argv[1])
seen = {"keys": store.hardware_keys(), "warnings": load_trends(store)[1]}
try:
    store.append("cpu-key", [json.loads(sys.argv[2])])
except OSError as error:
    seen["append"] = str(error)
print(json.dumps(seen))
"""


@pytest.mark.parametrize(("kind", "words"), [("fifo", "is a FIFO, not a regular file"),
                                             ("link to /dev/zero", "is a character device, not a regular file")])
def test_a_fifo_or_a_link_to_dev_zero_as_history_file_is_named_with_its_kind_without_blocking(tmp_path, kind, words):
    path = tmp_path / "cpu-key.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    # a child with a deadline: opening a FIFO blocks until its other end is opened
    child = subprocess.run([sys.executable, "-c", IRREGULAR_CHILD, str(tmp_path), json.dumps(make_row())],
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout)
    assert seen["keys"] == ["cpu-key"]  # listed, so that reading it can say what it is
    (warning,) = seen["warnings"]
    assert warning.startswith(f"{path}: history not read: {words}"), warning
    assert seen["append"] == f"{path}: {words}"


def test_a_link_to_nothing_as_history_file_is_named_with_its_target(tmp_path):
    path = tmp_path / "cpu-key.jsonl"
    path.symlink_to(tmp_path / "moved-away.jsonl")
    store = HistoryStore(tmp_path)
    assert store.hardware_keys() == ["cpu-key"]
    target = tmp_path / "moved-away.jsonl"
    assert load_trends(store)[1] == [f"{path}: history not read: is a symbolic link to {target}, which does not exist "
                                     "(check the file and its permissions)"]


def test_a_line_longer_than_the_limit_is_skipped_and_the_rest_read(tmp_path):
    limit = history_module.MAX_LINE_BYTES
    path = tmp_path / "cpu-key.jsonl"
    huge = b'{"v": 1, "padding": "' + b"x" * (2 * limit) + b'"}'
    path.write_bytes(line_of(make_row("a")) + huge + b"\n" + line_of(make_row("b")) + huge)  # the last one torn
    read = HistoryStore(tmp_path).read("cpu-key")
    assert [row["test_id"] for row in read.rows] == ["a", "b"]
    assert read.warnings == [f"{path}:{number}: skipped: longer than {limit} bytes, not a row"
                             for number in (2, 4)]


def test_reading_holds_a_line_at_a_time_not_the_file(tmp_path):
    store = HistoryStore(tmp_path)
    path = store.path_for("cpu-key")
    padding = "p" * 1500  # a real row is about 1.7 KB
    path.write_text("".join(json.dumps(make_row(f"t{i}", x_padding=padding)) + "\n" for i in range(5000)))
    size = path.stat().st_size
    tracemalloc.start()
    try:
        trends, warnings = load_trends(store, test_ids=["a test not in the history"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (trends, warnings) == ([], [])
    assert peak < size / 16, f"reading {size} bytes for no test peaked at {peak} bytes"


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=8), inner, max_size=3), max_leaves=8)
rows_strategy = st.builds(
    make_row,
    test_id=st.text(min_size=1, max_size=40) | st.sampled_from(['a"b', "c\\d", "é€😀", "line\nbreak", "tab\t'"]),
    median=st.floats(min_value=0, max_value=1e300, exclude_min=True, allow_nan=False, allow_infinity=False),
    extra=st.dictionaries(st.text(max_size=10).map(lambda k: f"x_{k}"), json_values, max_size=4),
).map(lambda row: {**{k: v for k, v in row.items() if k != "extra"}, **row["extra"]})


@settings(max_examples=60)
@given(batches=st.lists(st.lists(rows_strategy, min_size=1, max_size=4), min_size=1, max_size=5))
def test_arbitrary_rows_read_back_equal_and_in_order(tmp_path_factory, batches):
    store = HistoryStore(tmp_path_factory.mktemp("history"))
    for batch in batches:
        store.append("cpu-key", batch)
    read = store.read("cpu-key")
    assert read.warnings == []
    assert read.rows == [row for batch in batches for row in batch]


# corrupt and torn lines

BAD_LINES: list[tuple[bytes, str]] = [
    (b"this is not json\n", "not a JSON line"),
    (line_of([1, 2, 3]), "not a JSON object but list"),
    (line_of({**make_row(), "v": 2}), "row version 2"),
    (line_of({k: v for k, v in make_row().items() if k != "v"}), "row version None"),
    (line_of({k: v for k, v in make_row().items() if k != "test_id"}), "'test_id' is missing"),
    (line_of({**make_row(), "session": 5}), "'session' must be a string, found 5"),
    (line_of(make_row(median=0)), "'median' must be a number > 0"),
    (line_of(make_row(median=-3.5)), "'median' must be a number > 0"),
    (line_of(make_row(median="NaN")), "'median' must be a finite number, found \"NaN\""),
    (line_of(make_row(median=True)), "'median' must be a finite number, found true"),
    (json.dumps(make_row(median=float("nan"))).encode() + b"\n", "'median' must be a finite number"),  # literal NaN
    (line_of({**make_row(), "time": "yesterday"}), "'time' must be an ISO 8601 time"),
    (b'{"v": 1, "test_id": "\xff\xfe", "session": "s"}\n', "not a JSON line"),  # invalid UTF-8
]


def corrupt_file(path: Path) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """Write valid rows interleaved with every bad line (and a blank line); return the valid rows and the
    expected problem per bad line number."""
    valid = [make_row(test_id=f"t{i}", median=100.0 + i) for i in range(len(BAD_LINES) + 1)]
    chunks, problems = [line_of(valid[0])], {}
    for index, (bad, problem) in enumerate(BAD_LINES):
        chunks.append(bad)
        problems[len(chunks)] = problem
        chunks.append(line_of(valid[index + 1]))
    chunks.append(b"\n")  # a blank line is not a row and not a problem
    path.write_bytes(b"".join(chunks))
    return valid, problems


def assert_warnings(warnings: list[str], path: Path, problems: dict[int, str]) -> None:
    assert len(warnings) == len(problems)
    for warning, (number, problem) in zip(warnings, sorted(problems.items()), strict=True):
        assert warning.startswith(f"{path}:{number}: skipped: "), warning
        assert problem in warning


def test_read_keeps_exactly_the_valid_rows_and_warns_once_per_bad_line(tmp_path):
    store = HistoryStore(tmp_path)
    path = store.path_for("cpu-key")
    valid, problems = corrupt_file(path)
    before = path.read_bytes()

    read = store.read("cpu-key")
    assert read.rows == valid
    assert_warnings(read.warnings, path, problems)
    assert path.read_bytes() == before

    new = make_row(test_id="after", median=7.0)
    store.append("cpu-key", [new])
    after = path.read_bytes()
    assert after.startswith(before)
    assert appended_rows(after[len(before):]) == [new]
    again = store.read("cpu-key")
    assert again.rows == [*valid, new]
    assert_warnings(again.warnings, path, problems)


def test_a_fractional_row_version_is_a_wrong_version(tmp_path):
    path = tmp_path / "cpu-key.jsonl"
    path.write_bytes(line_of({**make_row(), "v": 1.5}) + line_of(make_row()))
    read = HistoryStore(tmp_path).read("cpu-key")
    assert len(read.rows) == 1 and len(read.warnings) == 1


@pytest.mark.parametrize("version", [True, 1.0])
def test_a_boolean_or_float_row_version_is_not_version_one(tmp_path, version):
    path = tmp_path / "cpu-key.jsonl"
    path.write_bytes(line_of({**make_row(), "v": version}))
    read = HistoryStore(tmp_path).read("cpu-key")
    assert read.rows == [] and len(read.warnings) == 1


def test_torn_last_line_is_skipped_and_the_next_append_starts_a_new_line(tmp_path):
    store = HistoryStore(tmp_path)
    path = store.path_for("cpu-key")
    first = make_row(test_id="before")
    torn = line_of(make_row(test_id="torn"))[:25]
    path.write_bytes(line_of(first) + torn)
    new = [make_row(test_id="after-1"), make_row(test_id="after-2")]

    store.append("cpu-key", new)
    data = path.read_bytes()
    old = line_of(first) + torn + b"\n"
    assert data.startswith(old)
    assert appended_rows(data[len(old):]) == new
    read = store.read("cpu-key")
    assert read.rows == [first, *new]
    assert len(read.warnings) == 1 and read.warnings[0].startswith(f"{path}:2: skipped: not a JSON line")


# concurrent appenders

WORKERS, ROWS_PER_WORKER, BATCH = 4, 50, 5


def append_worker(directory: str, worker: int) -> None:
    """One appender process: ``ROWS_PER_WORKER`` rows numbered in order, in batches of ``BATCH``."""
    store = HistoryStore(directory)
    for start in range(0, ROWS_PER_WORKER, BATCH):
        store.append("shared", [make_row(test_id=f"w{worker}", median=1.0 + i, worker=worker, seq=i)
                                for i in range(start, start + BATCH)])


def test_concurrent_appenders_interleave_whole_batches(tmp_path):
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=append_worker, args=(str(tmp_path), w)) for w in range(WORKERS)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [p.exitcode for p in processes] == [0] * WORKERS

    read = HistoryStore(tmp_path).read("shared")
    assert read.warnings == []
    assert len(read.rows) == WORKERS * ROWS_PER_WORKER
    for worker in range(WORKERS):
        assert [row["seq"] for row in read.rows if row["worker"] == worker] == list(range(ROWS_PER_WORKER))
    # each append is one write under the lock: a batch's rows stay together
    for start in range(0, len(read.rows), BATCH):
        batch = read.rows[start:start + BATCH]
        assert len({row["worker"] for row in batch}) == 1
        assert [row["seq"] for row in batch] == list(range(batch[0]["seq"], batch[0]["seq"] + BATCH))


# refused rows


@pytest.mark.parametrize("bad_value", [float("nan"), float("inf"), -float("inf"), {1, 2}],
                         ids=["nan", "inf", "-inf", "set"])
def test_append_refuses_a_row_json_cannot_hold_and_writes_nothing(tmp_path, bad_value):
    store = HistoryStore(tmp_path / "history")
    path = store.path_for("cpu-key")
    with pytest.raises(ValueError, match=r"cpu-key\.jsonl"):
        store.append("cpu-key", [make_row(), make_row(median=bad_value)])
    assert not path.exists()

    store.append("cpu-key", [make_row()])
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"cpu-key\.jsonl"):
        store.append("cpu-key", [make_row(test_id="good"), make_row(ratio=bad_value)])
    assert path.read_bytes() == before


def test_append_refuses_a_lone_surrogate_naming_the_file(tmp_path):
    store = HistoryStore(tmp_path)
    with pytest.raises(ValueError, match=r"cpu-key\.jsonl"):
        store.append("cpu-key", [make_row(test_id="bad \udc80 id")])


def test_packages_of_an_unreadable_list_is_none(tmp_path):
    store = HistoryStore(tmp_path)
    (tmp_path / "packages").mkdir()
    (tmp_path / "packages" / "bad.json").write_text("{not json")
    (tmp_path / "packages" / "dict.json").write_text('{"a": 1}')
    assert store.packages("bad") is None
    assert store.packages("dict") is None

"""The baseline store: round trips, merging, corrupt files, concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hwregress import __version__
from hwregress.store.baseline_file import CHECKED_FIELDS, BaselineError, BaselineFile, check_entry, merge, parse
from hwregress.store.baselines import BaselineStore

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**9, 10**9),
                         st.floats(allow_nan=False, allow_infinity=False), st.text())
positive = st.floats(min_value=1e-6, max_value=1e12, allow_nan=False, allow_infinity=False)
entries_strategy = st.dictionaries(
    st.text(min_size=1),
    st.fixed_dictionaries({"recorded_at": st.text()},
                          optional={"samples": st.lists(positive, max_size=5), "median": positive,
                                    "environment": st.dictionaries(st.text(), json_scalars, max_size=3)})
    .flatmap(lambda known: st.dictionaries(st.text().filter(lambda k: k not in CHECKED_FIELDS), json_scalars,
                                           max_size=3).map(lambda extra: {**extra, **known})),
    max_size=6,
)


@pytest.mark.parametrize("name", sorted(CHECKED_FIELDS))
def test_every_checked_field_refuses_a_boolean(name):
    """The strategies above keep their free keys out of CHECKED_FIELDS; this holds the set to what is checked."""
    assert check_entry({name: True}) is not None
    assert check_entry({f"{name}_unchecked": True}) is None


@settings(max_examples=50, deadline=None)
@given(key=st.text(alphabet=st.characters(categories=("L", "N")), min_size=1, max_size=20), name=st.text(),
       entries=entries_strategy)
def test_store_round_trips_arbitrary_names_and_values(tmp_path_factory, key, name, entries):
    store = BaselineStore(tmp_path_factory.mktemp("b"))
    store.write_entries(key, name, entries)
    loaded = store.load(key)
    assert loaded is not None and loaded.entries == entries and loaded.device_name == name


@given(a=entries_strategy, b=entries_strategy)
def test_merge_is_order_independent_and_loses_nothing(a, b):
    left = merge(BaselineFile("k", "d", dict(a)), BaselineFile("k", "d", dict(b)))
    right = merge(BaselineFile("k", "d", dict(b)), BaselineFile("k", "d", dict(a)))
    assert left.entries == right.entries
    assert set(left.entries) == set(a) | set(b)


def test_newer_entry_wins_merge():
    old = BaselineFile("k", "d", {"t": {"recorded_at": "2026-01-01", "median": 1}})
    new = BaselineFile("k", "d", {"t": {"recorded_at": "2026-06-01", "median": 2}})
    assert merge(old, new).entries["t"]["median"] == 2 == merge(new, old).entries["t"]["median"]


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "not valid JSON"),
    ("[]", "not a hwregress baselines file"),
    ('{"schema_version": 7, "entries": {}}',
     f"schema version 7 is not supported (this hwregress {__version__} reads 1)"),
    ('{"schema_version": true, "entries": {}}', "schema_version must be an integer, found true"),
    ('{"schema_version": 1, "entries": {"a": {"median": NaN}}}', "holds NaN, which JSON does not allow"),
    ('{"schema_version": 1, "entries": {"a": {"median": 1e999}}}', "too large for a float"),
    ('{"schema_version": 1, "hardware_key": 3, "entries": {}}', "'hardware_key' must be text"),
    ('{"schema_version": 1, "entries": []}', "'entries' must map test keys to objects"),
])
def test_untrusted_files_are_clear_errors(tmp_path, text, message):
    path = tmp_path / "gpu.json"
    path.write_text(text)
    store = BaselineStore(tmp_path)
    with pytest.raises(BaselineError, match=re.escape(message)) as error:
        store.load("gpu")
    assert str(path) in str(error.value)
    with pytest.raises(BaselineError):
        store.write_entries("gpu", "x", {"a": {}})
    assert path.read_text() == text  # never overwritten


def test_missing_file_is_none(tmp_path):
    assert BaselineStore(tmp_path).load("nothing") is None


def test_write_keeps_other_entries(tmp_path):
    store = BaselineStore(tmp_path)
    store.write_entries("k", "dev", {"a": {"v": 1}})
    store.write_entries("k", "dev", {"b": {"v": 2}})
    store.write_entries("k", "dev", {"a": {"v": 3}})
    assert store.load("k").entries == {"a": {"v": 3}, "b": {"v": 2}}
    assert not list(tmp_path.glob(".*.tmp"))


def _writer(directory: str, worker: int) -> None:
    store = BaselineStore(directory)
    for i in range(15):
        store.write_entries("shared", "dev", {f"w{worker}-{i}": {"worker": worker, "i": i}})


def test_concurrent_writers_lose_no_entry(tmp_path):
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_writer, args=(str(tmp_path), w)) for w in range(4)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(120)
    assert all(p.exitcode == 0 for p in processes)
    entries = json.loads((Path(tmp_path) / "shared.json").read_text())["entries"]
    assert len(entries) == 60


def test_parse_accepts_written_file(tmp_path):
    store = BaselineStore(tmp_path)
    path = store.write_entries("k", "dev", {"x": {"samples": [1.0, 2.0]}})
    assert parse(path.read_text(), str(path)).entries["x"]["samples"] == [1.0, 2.0]


GOOD = {"samples": [10.0, 11.0, 9.0], "median": 10.0, "n": 3, "unit": "samples/s", "environment": {"torch": "2.4"},
        "recorded_at": "2026-01-01T00:00:00+00:00"}


def _file_with(tmp_path, entries, **top):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"schema_version": 1, "hardware_key": "gpu", "device_name": "G", **top,
                                "entries": entries}))
    return path


@pytest.mark.parametrize(("bad", "problem"), [
    ({"samples": [1.0, -2.0]}, "'samples'[1] must be a finite positive number, found -2.0"),
    ({"samples": "fast"}, "'samples' must be a list of numbers, found text"),
    ({"median": "10"}, "'median' must be a finite non-negative number, found \"10\""),
    ({"n": 2.5}, "'n' must be a non-negative integer, found 2.5"),
    ({"batch_size": True}, "'batch_size' must be a non-negative integer, found true"),
    ({"environment": []}, "'environment' must be an object, found a list"),
    ({"unit": 5}, "'unit' must be text, found a number"),
    ({"history": [1.0, 0]}, "'history'[1] must be a finite positive number, found 0"),
    ([1, 2], "is a list, not an object"),
])
def test_a_bad_entry_fails_alone_and_is_kept_until_replaced(tmp_path, bad, problem):
    path = _file_with(tmp_path, {"good": GOOD, "bad": bad})
    store = BaselineStore(tmp_path)
    loaded = store.load("gpu")
    assert loaded.entries == {"good": GOOD}
    reason = loaded.bad_entries["bad"]
    assert reason.startswith(f"{path}: entry 'bad' {problem} (") and "--update-baselines=force" in reason
    assert loaded.entry("good") == GOOD and loaded.entry("missing") is None
    with pytest.raises(BaselineError) as error:
        loaded.entry("bad")
    assert error.value.key == "bad" and str(error.value) == reason
    store.write_entries("gpu", "G", {"other": GOOD})  # nothing lost: the bad entry's content stays in the file
    assert json.loads(path.read_text())["entries"]["bad"] == bad
    store.write_entries("gpu", "G", {"bad": GOOD})  # ... until an update replaces it
    again = store.load("gpu")
    assert not again.bad_entries and set(again.entries) == {"good", "other", "bad"}


def test_refuses_to_record_a_bad_entry(tmp_path):
    store = BaselineStore(tmp_path)
    store.write_entries("gpu", "G", {"good": GOOD})
    before = store.path_for("gpu").read_bytes()
    with pytest.raises(BaselineError, match="refusing to record entry 'x': it 'samples'\\[0\\] must be a finite"):
        store.write_entries("gpu", "G", {"x": {"samples": [float("nan")]}})
    assert store.path_for("gpu").read_bytes() == before


def test_unknown_version_names_its_writer_and_force_moves_it_aside(tmp_path):
    text = json.dumps({"schema_version": 3, "hwregress_version": "0.9.1", "entries": {"a": {"x": 1}}})
    path = tmp_path / "gpu.json"
    path.write_text(text)
    store = BaselineStore(tmp_path)
    with pytest.raises(BaselineError) as error:
        store.load("gpu")
    message = str(error.value)
    assert "written by hwregress 0.9.1" in message and "gpu.json.v3.bak" in message and error.value.version == 3
    with pytest.raises(BaselineError):
        store.write_entries("gpu", "G", {"t": GOOD})
    assert path.read_text() == text
    store.write_entries("gpu", "G", {"t": GOOD}, replace_unreadable=True)
    assert (tmp_path / "gpu.json.v3.bak").read_text() == text  # moved aside, never deleted
    assert store.load("gpu").entries == {"t": GOOD}
    assert json.loads(path.read_text())["hwregress_version"] == __version__
    assert store.move_aside("gpu") is None  # readable now: nothing moves
    path.write_text(text)
    assert store.move_aside("gpu") == tmp_path / "gpu.json.v3.1.bak"  # an earlier backup is kept
    assert (tmp_path / "gpu.json.v3.bak").read_text() == text and not path.exists()
    path.write_text("{trunc")
    assert store.move_aside("gpu") == tmp_path / "gpu.json.unreadable.bak"


@pytest.mark.timeout(30)
def test_listing_reads_only_regular_files(tmp_path):
    store = BaselineStore(tmp_path)
    store.write_entries("real", "R", {"t": GOOD})
    (tmp_path / "folder.json").mkdir()
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    (tmp_path / "alias.json").symlink_to(tmp_path / "real.json")
    listing = store.scan()
    assert store.hardware_keys() == listing.keys == ["alias", "real"]
    assert sorted(listing.skipped) == [f"{tmp_path / 'folder.json'}: skipped: a folder, not a regular file",
                                       f"{tmp_path / 'zero.json'}: skipped: a character device, not a regular file"]
    for key in ("zero", "folder"):  # loading one by name is an error, not a hang or a crash
        with pytest.raises(BaselineError, match="not a regular file"):
            store.load(key)


def test_check_entry_accepts_what_lifecycle_writes():
    assert check_entry({**GOOD, "history": [10.0], "batch_size": 8, "accuracy": None, "peak_memory_bytes": 0,
                        "future_field": {"anything": [1]}}) is None


_VALID = json.dumps({"schema_version": 1, "hardware_key": "gpu", "entries": {"good": GOOD, "bad": {"n": -1}}}).encode()


def _mutations(data: bytes):
    return st.one_of(
        st.integers(0, len(data)).map(lambda n: data[:n]),
        st.tuples(st.integers(0, len(data) - 1), st.integers(0, 255)).map(
            lambda p: data[:p[0]] + bytes([p[1]]) + data[p[0] + 1:]),
    )


json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3) |
                           st.dictionaries(st.sampled_from(sorted(CHECKED_FIELDS | {"x", "entries", "schema_version"})),
                                           inner, max_size=4), max_leaves=12)
baseline_bytes = st.one_of(
    st.binary(max_size=300),
    _mutations(_VALID),
    json_values.map(lambda v: json.dumps({"schema_version": 1, "entries": {"k": v}}).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=baseline_bytes)
@example(raw=b"1" * 5000)  # int beyond Python's digit limit: a ValueError that is not a JSONDecodeError
@example(raw=b"[" * 100_000)  # nesting beyond the stack: RecursionError
@example(raw=b"\xff\xfe{}")
@example(raw=b'{"schema_version": 1, "entries": {"a": {"median": NaN}}}')
def test_any_bytes_load_or_fail_with_one_error_naming_the_file(tmp_path, raw):
    path = tmp_path / "any.json"
    path.write_bytes(raw)
    store = BaselineStore(tmp_path)
    try:
        loaded = store.load("any")
    except BaselineError as error:
        assert str(path) in str(error) and "\n" not in str(error)
        with pytest.raises(BaselineError):
            store.write_entries("any", "d", {"new": GOOD})
        assert path.read_bytes() == raw
        return
    assert path.read_bytes() == raw
    assert loaded is not None and all(check_entry(e) is None for e in loaded.entries.values())
    assert all(reason.startswith(f"{path}: entry ") for reason in loaded.bad_entries.values())
    before = {**loaded.bad_raw, **loaded.entries}
    store.write_entries("any", "d", {"new": GOOD})
    after = json.loads(path.read_text())["entries"]
    assert after == {**before, "new": GOOD}  # nothing lost, bad entries included

"""The baseline store: round trips, merging, corrupt files, concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwregress.baselines import BaselineError, BaselineFile, BaselineStore, merge, parse

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**9, 10**9),
                         st.floats(allow_nan=False, allow_infinity=False), st.text())
entries_strategy = st.dictionaries(
    st.text(min_size=1),
    st.dictionaries(st.text(), json_scalars, max_size=4).map(lambda d: {**d, "recorded_at": d.get("recorded_at", "")}),
    max_size=6,
)


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
    ('{"schema_version": 7, "entries": {}}', "schema version 7 is not supported (this hwregress reads 1)"),
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

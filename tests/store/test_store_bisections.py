"""Bisections in the fleet store, probe by probe (hwregress.store.bisection_store), on a real SQLite file and a real
PostgreSQL: a bisection started, probed and finished reads back as its document (NaN and infinity as None); one
killed after two probes reads back with those two, status "running", and its page renders; every write is
idempotent; bisections written by several processes at once into one new store each read back whole; an unknown id
is None and an ambiguous prefix names the ids; arbitrary figures and texts round-trip by
the rules of hwregress.store.bisection_rows (hypothesis, SQLite); ``store bisections`` and ``store bisection``."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from hwregress.bisect.ladders import Ladder
from hwregress.bisect.search import CandidateSkipped, ProbeOutcome, bisect
from hwregress.bisect.stacks import ProbeSettings
from hwregress.cli import main
from hwregress.cli.bisect import bisection_json
from hwregress.report.bisect_view import render_bisection
from hwregress.store.database import open_store
from hwregress.store.fleet_store import Store
from hwregress.store.store_errors import StoreUnavailable
from hwregress.store.tables import bisection_probes

SHAS = [f"{index:02d}" + "b" * 38 for index in range(8)]
LABELS = [f"{sha[:12]} commit {index:02d}: a note" for index, sha in enumerate(SHAS)]
STARTED = dt.datetime(2026, 11, 27, 1, 22, 15, tzinfo=dt.timezone.utc)
SETTINGS = {"pytest_args": ["-m", "cpu"], "threshold": 0.05, "looks": [20, 40, 80], "work_dir": "/abs/work"}
OUTCOME_KEYS = ("verdict", "ratio", "ratio_low", "ratio_high", "pairs", "seconds", "details")


@pytest.fixture
def store(store_on_each_engine):
    return store_on_each_engine


def searched_document(work_dir: Path, culprit: int = 5, broken: int = 3) -> dict[str, Any]:
    """What ``python -m hwregress bisect --repo`` writes at its end: the real search over :data:`SHAS`, the candidate
    ``culprit`` and after it 10% slower, ``broken`` skipped (its setup fails), one ratio NaN and one bound infinite."""

    def run(candidate: int, reference: int) -> ProbeOutcome:
        if candidate == broken:
            raise CandidateSkipped("its setup failed (exit 1)\nthe log's tail")
        slow = candidate >= culprit
        if reference == 0:
            return ProbeOutcome("regression" if slow else "pass", 0.90 if slow else math.nan, 0.88 if slow else 0.97,
                                0.92 if slow else math.inf, pairs=40, seconds=96.0,
                                details={"report_dir": f"/abs/work/probe-{candidate}", "slowest_test": "t[cpu]",
                                         "tests": {"t[cpu]": {"verdict": "pass", "ratio": math.nan, "pairs": 40}}})
        return ProbeOutcome("pass" if slow else "improvement", 1.0 if slow else 1.11, pairs=20, seconds=80.0)

    found = bisect(len(SHAS), run)
    ladder = Ladder("commits", LABELS, SHAS, SHAS.__getitem__)
    return bisection_json(found, ladder, ProbeSettings(("-m", "cpu"), 0.05, (20, 40, 80), work_dir))


def finite(value: Any) -> Any:
    """``value`` as the store gives it back: NaN and infinity None, NUL and surrogates of a text (a key too) U+FFFD,
    at any depth (tuples as lists)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return stored_text(value)
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    if isinstance(value, dict):
        return {stored_text(key): finite(item) for key, item in value.items()}
    return value


def stored_text(text: str | None) -> str | None:
    """A text as it reads back: NUL and surrogates U+FFFD."""
    return None if text is None else "".join("\ufffd" if c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF else c
                                             for c in text)


def start(store: Store, document: dict[str, Any], bisection_id: str | None = None) -> str:
    bisection_id = bisection_id or str(uuid.uuid4())
    store.start_bisection(bisection_id, STARTED, "runner-1", document["kind"], document["candidates"],
                          document["labels"], document["settings"])
    return bisection_id


def probe_rows(store: Store, bisection_id: str) -> list[dict[str, Any]]:
    return store.read(select(bisection_probes).where(bisection_probes.c.bisection_id == bisection_id)
                      .order_by(bisection_probes.c.number))


def test_a_bisection_stored_probe_by_probe_reads_back_as_its_document(store, tmp_path):
    document = searched_document(tmp_path)
    assert document["status"] == "culprit" and any(p["side"] == "skip" for p in document["probes"])
    bisection_id = start(store, document)
    for number, probe in enumerate(document["probes"], start=1):
        store.add_bisection_probe(bisection_id, number, probe)
    finished = STARTED + dt.timedelta(seconds=document["seconds"])
    store.finish_bisection(bisection_id, document, finished)
    assert store.bisection(bisection_id) == finite(document)
    assert json.loads(json.dumps(store.bisection(bisection_id[:8]), allow_nan=False)) == finite(document)
    [row] = store.bisections()
    assert row["id"] == bisection_id and "document" not in row
    assert (row["status"], row["exit_code"], row["culprit"], row["last_good"], row["first_bad"]) == (
        "culprit", 0, SHAS[5], SHAS[4], SHAS[5])
    assert (row["started_at"], row["finished_at"], row["hostname"], row["kind"]) == (
        STARTED, finished, "runner-1", "commits")
    assert (row["candidates"], row["labels"], row["settings"]) == (SHAS, LABELS, finite(document["settings"]))
    assert row["probes"] == len(document["probes"]) and row["seconds"] == document["seconds"]


def test_a_bisection_killed_after_two_probes_reads_back_with_them_as_running(store, tmp_path):
    document = searched_document(tmp_path, broken=1)
    first_two = document["probes"][:2]
    bisection_id = start(store, document)
    for number, probe in enumerate(first_two, start=1):
        store.add_bisection_probe(bisection_id, number, probe)
    found = store.bisection(bisection_id[:12])
    assert (found["status"], found["exit_code"], found["culprit"], found["seconds"]) == ("running", None, None, None)
    assert found["probes"] == finite(first_two)
    assert (found["candidates"], found["labels"], found["kind"]) == (SHAS, LABELS, "commits")
    assert found["settings"] == finite(document["settings"])
    assert found["skipped"] == {p["candidate"]: p["skipped"] for p in first_two if p["skipped"] is not None}
    assert "<html" in render_bisection(found).lower()
    [row] = store.bisections()
    assert (row["status"], row["probes"], row["finished_at"], row["seconds"]) == ("running", 2, None, None)


def test_every_write_is_idempotent_and_the_end_adds_the_probes_not_stored(store, tmp_path):
    document = searched_document(tmp_path)
    bisection_id = start(store, document)
    start(store, {**document, "kind": "stacks", "labels": [f"other {label}" for label in LABELS]}, bisection_id)
    store.add_bisection_probe(bisection_id, 1, document["probes"][0])
    store.add_bisection_probe(bisection_id, 1, {**document["probes"][0], "verdict": "unstable"})
    store.add_bisection_probe(bisection_id, 2, document["probes"][1])
    [row] = store.bisections()
    assert (row["kind"], row["labels"], row["probes"]) == ("commits", LABELS, 2)
    assert probe_rows(store, bisection_id)[0]["verdict"] == document["probes"][0]["verdict"]
    for _ in range(2):
        store.finish_bisection(bisection_id, document, STARTED)
        numbers = [row["number"] for row in probe_rows(store, bisection_id)]
        assert numbers == list(range(1, len(document["probes"]) + 1))
    assert store.bisection(bisection_id) == finite(document)


def test_an_unknown_id_is_none_and_an_ambiguous_prefix_names_the_ids(store, tmp_path):
    document = searched_document(tmp_path)
    ids = [start(store, document, f"0193a2b4-{index:04d}-7000-8000-000000000000") for index in range(2)]
    assert store.bisection("0193a2b5") is None and store.bisection("x" * 40) is None
    assert store.bisection("0193a2b4-\x00") is None and store.bisection("0193A2B4") is None  # case-sensitive
    assert store.bisection("0193a2b4-0001")["status"] == "running"
    with pytest.raises(ValueError, match=f"'0193a2b4' matches 2 bisections: {ids[0]}, {ids[1]}$"):
        store.bisection("0193a2b4")
    with pytest.raises(ValueError, match="empty"):
        store.bisection("")
    assert [row["id"] for row in store.bisections()] == sorted(ids, reverse=True)  # one start: by id, newest first
    assert [row["id"] for row in store.bisections(limit=1)] == [ids[1]]


@pytest.mark.parametrize(("call", "said"), [
    (lambda s, i: s.add_bisection_probe(i, 0, {}), "probe number 0 is not a whole number from 1"),
    (lambda s, i: s.add_bisection_probe(i, 1, {"candidate": "a", "reference": "b", "side": "bad", "ratio": "slow",
                                               "verdict": "regression"}), "probe 1 ratio 'slow' is not a number"),
    (lambda s, i: s.add_bisection_probe(i, 1, {"candidate": "a", "reference": "b", "side": "bad", "ratio": 0.9}),
     "probe 1 verdict None: a probe with figures names its verdict"),
    (lambda s, i: s.add_bisection_probe(i, 1, {"candidate": "a", "reference": "b", "side": "bad", "verdict": "pass",
                                               "pairs": True}), "probe 1 pairs True is not a whole number"),
    (lambda s, i: s.add_bisection_probe(i, 1, {"candidate": "a", "reference": "b", "side": "bad", "verdict": "pass",
                                               "details": {"path": Path("/x")}}), "probe 1 details.path PosixPath"),
    (lambda s, i: s.add_bisection_probe(i, 1, {"candidate": "a", "reference": "b", "side": "x" * 17}),
     "probe 1 side 'xxxxxxxxxxxxxxxxx' is longer than 16 characters"),
    (lambda s, i: s.add_bisection_probe("0193a2b4-0000-7000-8000-00000000000f", 1, {
        "candidate": "a", "reference": "b", "side": "skip", "skipped": "why"}), "no bisection '0193a2b4-0000-7000"),
    (lambda s, i: s.finish_bisection(i, {"status": "culprit", "exit_code": "0", "probes": []}, STARTED),
     "document exit_code '0' is not a whole number"),
    (lambda s, i: s.finish_bisection(i, {"status": "culprit"}, STARTED), "document probes None is not a list"),
    (lambda s, i: s.start_bisection(i + "-too-long", STARTED, None, "stacks", [], [], {}), "bisection id '0193"),
    (lambda s, i: s.start_bisection(i, STARTED, None, "stacks", ["a"], [], {}), "candidates and labels differ"),
    (lambda s, i: s.start_bisection(i, "2026-11-27", None, "stacks", [], [], {}), "started_at '2026-11-27' is not"),
    (lambda s, i: s.bisections(limit=-1), "limit -1 is negative"),
], ids=["number", "ratio", "verdict", "pairs", "details", "side", "unknown", "exit-code", "probes", "id", "labels",
        "time", "limit"])
def test_a_value_that_does_not_fit_is_a_value_error_naming_it_and_writes_nothing(store, call, said):
    bisection_id = "0193a2b4-0000-7000-8000-00000000000a"
    store.start_bisection(bisection_id, STARTED, None, "stacks", ["a", "b"], ["A", "B"], {})
    with pytest.raises(ValueError, match=said.replace("(", r"\(").replace(".", r"\.")):
        call(store, bisection_id)
    assert [(row["status"], row["probes"]) for row in store.bisections()] == [("running", 0)]


def test_texts_no_database_can_hold_are_stored_as_replacement_characters(store):
    bisection_id = str(uuid.uuid4())
    store.start_bisection(bisection_id, STARTED, "host\x00name", "stacks", ["a\x00", "b"], ["A", "B\ud800\udfff"],
                          {"why \x00": "nul \x00 and \udfff"})
    probe = {"candidate": "a\x00", "reference": "b", "side": "skip", "skipped": "log \x00\ud800 tail"}
    store.add_bisection_probe(bisection_id, 1, probe)
    found = store.bisection(bisection_id)
    stored_probe = {**probe, "candidate": "a\ufffd", "skipped": "log \ufffd\ufffd tail"}
    assert found["probes"] == [stored_probe] and found["skipped"] == {"a\ufffd": "log \ufffd\ufffd tail"}
    assert (found["candidates"], found["labels"]) == (["a\ufffd", "b"], ["A", "B\ufffd\ufffd"])
    assert found["settings"] == {"why \ufffd": "nul \ufffd and \ufffd"}
    assert store.bisections()[0]["hostname"] == "host\ufffdname"
    document = {**found, "status": "only skipped candidates left", "exit_code": 3, "probes": [probe]}
    store.finish_bisection(bisection_id, document, STARTED)
    assert store.bisection(bisection_id) == {**document, "probes": [stored_probe]}


def test_a_store_that_cannot_be_written_is_the_stores_one_line_error(tmp_path):
    url = f"sqlite:///{tmp_path / 'hwregress.sqlite'}"
    store = open_store(url)
    with store.engine.begin() as connection:
        connection.exec_driver_sql("DROP TABLE bisection_probes")
    bisection_id = start(store, searched_document(tmp_path))
    with pytest.raises(StoreUnavailable, match="no such table") as raised:
        store.add_bisection_probe(bisection_id, 1, {"candidate": "a", "reference": "b", "side": "skip"})
    assert raised.value.url == url and "\n" not in str(raised.value)
    with pytest.raises(StoreUnavailable, match="no such table"):
        store.bisections()
    store.close()


# any text, and often one holding what no text column can (NUL, lone surrogates), which st.text() alone seldom draws
TEXT = st.one_of(st.text(max_size=30),
                 st.text(st.sampled_from(["\x00", "\ud800", "\udfff", "a", "\u00e9", "\U0001f600"]), max_size=8))
FIGURE = st.one_of(st.none(), st.floats(), st.floats(min_value=1e300), st.floats(max_value=-1e300),
                   st.sampled_from([sys.float_info.max, sys.float_info.min, 5e-324, -0.0]), st.integers(-2**53, 2**53))
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), TEXT)
RAN = st.fixed_dictionaries({
    "candidate": TEXT, "reference": TEXT, "side": st.sampled_from(["good", "bad", "undecided"]),
    "skipped": st.none(), "verdict": st.sampled_from(["regression", "pass", "improvement", "unstable"]),
    "ratio": FIGURE, "ratio_low": FIGURE, "ratio_high": FIGURE,
    "pairs": st.one_of(st.none(), st.integers(0, 2**31 - 1)), "seconds": FIGURE,
    "details": st.one_of(st.none(), st.dictionaries(TEXT, st.recursive(JSON_LEAF, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)), max_leaves=6), max_size=4)),
})
SKIPPED = st.fixed_dictionaries({"candidate": TEXT, "reference": TEXT, "side": st.just("skip"),
                                 "skipped": st.one_of(st.none(), TEXT)})


def probe_read_back(probe: dict[str, Any]) -> dict[str, Any]:
    """A probe as the rows of a bisection that never finished give it back (hwregress.store.bisection_rows)."""
    found = {key: stored_text(probe[key]) for key in ("candidate", "reference", "side", "skipped")}
    if "verdict" not in probe:
        return found
    figures = {key: None if probe[key] is None else finite(float(probe[key]))
               for key in ("ratio", "ratio_low", "ratio_high", "seconds")}
    return {**found, **figures, "verdict": probe["verdict"], "pairs": probe["pairs"],
            "details": finite(probe["details"])}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(probes=st.lists(st.one_of(RAN, SKIPPED), min_size=1, max_size=4), seconds=FIGURE)
def test_arbitrary_figures_and_texts_round_trip_by_the_rules(sqlite_store, probes, seconds):
    bisection_id = str(uuid.uuid4())
    candidates = [str(index) for index in range(3)]
    sqlite_store.start_bisection(bisection_id, STARTED, None, "stacks", candidates, candidates, {"seconds": seconds})
    for number, probe in enumerate(probes, start=1):
        sqlite_store.add_bisection_probe(bisection_id, number, copy.deepcopy(probe))
    found = sqlite_store.bisection(bisection_id)
    assert found["probes"] == [probe_read_back(probe) for probe in probes]
    assert found["settings"] == {"seconds": finite(seconds)}
    document = {"status": "undecided", "exit_code": 3, "kind": "stacks", "candidates": candidates,
                "labels": candidates, "culprit": None, "last_good": "0", "first_bad": "2", "probes": probes,
                "skipped": {}, "seconds": seconds, "settings": {}}
    sqlite_store.finish_bisection(bisection_id, document, STARTED)
    assert sqlite_store.bisection(bisection_id) == finite(document)
    [row] = [row for row in sqlite_store.bisections() if row["id"] == bisection_id]
    assert row["seconds"] == (None if seconds is None else finite(float(seconds)))


@pytest.fixture
def sqlite_store(tmp_path):
    opened = open_store(f"sqlite:///{tmp_path / 'hwregress.sqlite'}")
    yield opened
    opened.close()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_store_bisections_lists_them_and_store_bisection_writes_the_page(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'hwregress.sqlite'}"
    store = open_store(url)
    document = searched_document(tmp_path)
    finished = start(store, document, "0193a2b4-0000-7000-8000-000000000001")
    store.finish_bisection(finished, document, STARTED)
    killed = "0193a2b5-0000-7000-8000-000000000002"
    store.start_bisection(killed, STARTED + dt.timedelta(hours=1), None, "commits", SHAS, LABELS, SETTINGS)
    store.add_bisection_probe(killed, 1, document["probes"][0])
    store.close()

    status, out, err = run(capsys, "store", "bisections", "--store", url)
    assert status == 0 and err == ""
    assert out.splitlines() == [
        "0193a2b5-000  2026-11-27 02:22:15Z  commits  running  –  1 probe",
        f"0193a2b4-000  2026-11-27 01:22:15Z  commits  culprit  {LABELS[5]}  {len(document['probes'])} probes, "
        f"{document['seconds']:.0f} s"]
    assert run(capsys, "store", "bisections", "--last", "1", "--store", url)[1].count("\n") == 1

    page, as_json = tmp_path / "page.html", tmp_path / "bisection.json"
    status, out, err = run(capsys, "store", "bisection", "0193a2b4", "--store", url, "-o", str(page),
                           "--json", str(as_json))
    assert status == 0 and err == "" and out.startswith(f"{page}: bisection page (culprit, ")
    assert LABELS[5] in page.read_text(encoding="utf-8")
    assert json.loads(as_json.read_text(encoding="utf-8")) == finite(document)

    status, out, err = run(capsys, "store", "bisection", "0193a2b4", "--store", url)
    assert status == 0 and out.splitlines()[0] == f"culprit: {LABELS[5]} (the first bad; the last good: {LABELS[4]})"
    assert out.splitlines()[-1] == f"{len(document['probes'])} probes, {document['seconds']:.0f} s"
    assert f"skipped {LABELS[3]}: its setup failed (exit 1)" in out.splitlines()

    killed_page = tmp_path / "killed.html"
    assert run(capsys, "store", "bisection", killed, "--store", url, "-o", str(killed_page))[0] == 0
    assert "running" in killed_page.read_text(encoding="utf-8")


@pytest.mark.parametrize(("given_id", "said"), [
    ("0193ffff", "no bisection '0193ffff' in the store"),
    ("0193a2b", "the bisection id prefix '0193a2b' matches 2 bisections: 0193a2b4-"),
])
def test_store_bisection_of_a_bad_id_is_one_line_naming_it(tmp_path, capsys, given_id, said):
    url = f"sqlite:///{tmp_path / 'hwregress.sqlite'}"
    store = open_store(url)
    for bisection_id in ("0193a2b4-0000-7000-8000-000000000001", "0193a2b5-0000-7000-8000-000000000002"):
        store.start_bisection(bisection_id, STARTED, None, "commits", SHAS, LABELS, SETTINGS)
    store.close()
    page = tmp_path / "page.html"
    status, out, err = run(capsys, "store", "bisection", given_id, "--store", url, "-o", str(page))
    assert status == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"hwregress: {url}: {said}") and "store bisections lists" in err
    assert not page.exists()


def check_bisections_written_at_once(url: str, folder: Path, writers: int) -> None:
    """``writers`` processes start at once on a store not yet created, each keeping a bisection probe by probe (its
    own culprit): every one reads back whole, as its document, and none was told its store failed."""
    from support.processes import start_script
    from support.project import SUPPORT_DIR

    documents = [searched_document(folder / f"work-{index}", culprit=index % 6 + 1, broken=7)
                 for index in range(writers)]
    paths = []
    for index, document in enumerate(documents):
        paths.append(folder / f"bisection-{index}.json")
        paths[-1].write_text(json.dumps(document))
    processes = [start_script(SUPPORT_DIR / "bisection_writer.py", url, str(path)) for path in paths]
    ids = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        assert out.splitlines()[0].startswith("said store: bisection ") and out.splitlines()[-1].startswith("id "), out
        ids.append(out.splitlines()[-1].removeprefix("id "))
    store = open_store(url)
    try:
        assert sorted(row["id"] for row in store.bisections()) == sorted(ids)
        for bisection_id, document in zip(ids, documents, strict=True):
            assert store.bisection(bisection_id) == finite(json.loads(json.dumps(document)))
        assert {row["id"]: row["probes"] for row in store.bisections()} == {
            bisection_id: len(document["probes"]) for bisection_id, document in zip(ids, documents, strict=True)}
    finally:
        store.close()


def test_four_bisections_written_at_once_into_one_sqlite_store(tmp_path):
    check_bisections_written_at_once(f"sqlite:///{tmp_path / 'hwregress.sqlite'}", tmp_path, 4)


@pytest.mark.needs_extra
def test_eight_bisections_written_at_once_into_one_postgresql_store(postgres_database, tmp_path):
    check_bisections_written_at_once(postgres_database, tmp_path, 8)

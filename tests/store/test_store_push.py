"""The fleet store's push and reads on a real SQLite file: figures come back as pushed (hypothesis), a push is
idempotent by the session's name, and a store that cannot be used is one clear line."""

from __future__ import annotations

import datetime as dt
import os
import stat
import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.read_only import read_only_view
from support.store_results import results_document

from hwregress.store.database import open_store, store_url
from hwregress.store.results import TestRecord
from hwregress.store.session_rows import session_rows
from hwregress.store.store_errors import StoreUnavailable

finite = st.floats(min_value=1e-6, max_value=1e12, allow_nan=False)
optional = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False, width=64))
record = st.fixed_dictionaries({
    "test_id": st.text(min_size=1, max_size=40), "family": st.sampled_from(["throughput", "ceiling", "parity"]),
    "hardware_key": st.one_of(st.none(), st.sampled_from(["cpu-a", "nvidia-h100"])),
    "device": st.sampled_from(["cpu", "cuda:0"]), "model": st.one_of(st.none(), st.text(max_size=20)),
    "batch_size": st.one_of(st.none(), st.integers(1, 4096)), "unit": st.sampled_from(["samples/s", "GB/s"]),
    "samples": st.lists(finite, max_size=8), "throughput": optional, "latency_ms": optional,
    "peak_memory_bytes": st.one_of(st.none(), st.integers(0, 2**50)), "accuracy": optional, "ratio": optional,
    "threshold": optional, "p_value": optional, "baseline_throughput": optional,
    "verdict": st.sampled_from(["pass", "regression", "new", "improvement"]),
    "diagnosis": st.lists(st.text(max_size=30), max_size=2),
    "identity": st.dictionaries(st.sampled_from(["gpu_uuid", "cpu_brand"]), st.text(min_size=1, max_size=12)),
})


def comparable(rows):
    return sorted(({k: v for k, v in row.items() if k not in ("id", "session_id")} for row in rows),
                  key=lambda row: (row["test_id"], row["metric"]))


@given(records=st.lists(record, max_size=6, unique_by=lambda r: r["test_id"]),
       started=st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2100, 1, 1),
                            timezones=st.just(dt.timezone.utc)))
def test_figures_come_back_as_pushed(records, started):
    results = {"meta": {"session": "s-1", "hostname": "h", "started_at": started.isoformat()}, "records": records}
    expected = session_rows(results)
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(f"sqlite:///{folder}/hwregress.sqlite")
        try:
            outcome = store.push(results)
            assert (outcome.inserted, outcome.figures) == (True, len(expected.figures))
            assert comparable(store.figures()) == comparable(expected.figures)
            [session] = store.sessions()
            assert {k: session[k] for k in expected.session} == expected.session
        finally:
            store.close()


def test_a_second_push_of_a_session_inserts_nothing_and_changes_nothing(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'hwregress.sqlite'}")
    first = store.push(results_document("vm-1-20261127T012215Z"))
    before = (store.sessions(), store.figures(), store.hosts())
    again = store.push(results_document("vm-1-20261127T012215Z", hostname="renamed"))
    assert first.inserted and not again.inserted
    assert (again.session_id, again.figures) == (first.session_id, first.figures) == (first.session_id, 6)
    assert (store.sessions(), store.figures(), store.hosts()) == before


def test_sessions_are_found_by_key_host_branch_and_time(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'hwregress.sqlite'}")
    store.push(results_document("a-1-20261127T012215Z", hostname="a"))
    store.push(results_document("b-1-20261128T012215Z", hostname="b", started="2026-11-28T01:22:15+00:00"))
    assert [s["name"] for s in store.sessions(host="b")] == ["b-1-20261128T012215Z"]
    assert len(store.sessions(hardware_key="amd-epyc-f26m2-2t", branch="main")) == 2
    assert [s["hostname"] for s in store.sessions(since=dt.datetime(2026, 11, 28))] == ["b"]
    assert [s["hostname"] for s in store.sessions(until=dt.datetime(2026, 11, 27, 12))] == ["a"]
    [session] = store.sessions(host="a")
    assert (session["git_sha"], session["git_branch"], session["ci_build_url"]) == (
        "abc123", "main", "https://ci.example.org/1")
    assert len(store.figures(session_ids=[session["id"]])) == 6


def test_a_session_names_the_commit_branch_and_build_the_plugin_recorded_before_a_hooks_guess(tmp_path):
    document = results_document("a-1-20261127T012215Z")
    document["meta"]["provenance"] = {"git_sha": "f00d", "git_branch": "nightly", "ci_build_url": None}
    store = open_store(f"sqlite:///{tmp_path / 'hwregress.sqlite'}")
    store.push(document)
    [session] = store.sessions()
    assert (session["git_sha"], session["git_branch"], session["ci_build_url"]) == (
        "f00d", "nightly", "https://ci.example.org/1")  # the build only a user's hook knew


def test_the_store_url_is_the_option_else_the_environment_else_the_report_folder():
    assert store_url("sqlite:///x.sqlite", {"HWREGRESS_STORE": "postgresql://h/db"}, "r") == "sqlite:///x.sqlite"
    assert store_url(None, {"HWREGRESS_STORE": "postgresql://h/db"}, "r") == "postgresql://h/db"
    assert store_url(None, {}, "reports") == "sqlite:///reports/hwregress.sqlite"


@pytest.mark.parametrize(("url", "said"), [
    ("not a url", "not a SQLAlchemy URL"),
    ("nosuchdb://x/y", "no SQLAlchemy dialect"),
    ("postgresql+psycopg://fleet:secret@127.0.0.1:1/hwregress", "refused the connection"),
])
def test_a_store_that_cannot_be_reached_is_one_line_with_the_password_masked(url, said):
    if url.startswith("postgresql"):
        pytest.importorskip("psycopg")
    with pytest.raises(StoreUnavailable) as raised:
        open_store(url)
    message = str(raised.value)
    assert said in message and "\n" not in message and "secret" not in message
    assert message.endswith(")")


def test_a_read_only_store_file_is_one_line(tmp_path):
    # a read-only bind mount (root writes a chmod-ed file: CI runs as root, where a chmod would test nothing)
    writable = tmp_path / "writable"
    writable.mkdir()
    open_store(f"sqlite:///{writable / 'hwregress.sqlite'}").close()
    with read_only_view(writable, tmp_path / "read-only") as read_only, \
            pytest.raises(StoreUnavailable, match="read-only"):
        open_store(f"sqlite:///{read_only / 'hwregress.sqlite'}").push(results_document("s-1-20261127T012215Z"))


def test_a_full_disk_is_one_line_and_stores_no_half_session(tmp_path):
    path = tmp_path / "hwregress.sqlite"
    store = open_store(f"sqlite:///{path}")
    pages = store.engine.connect().exec_driver_sql("PRAGMA page_count").scalar()
    store.close()
    store = open_store(f"sqlite:///{path}")

    from sqlalchemy import event

    @event.listens_for(store.engine, "connect")
    def _full(dbapi_connection, _record):  # the file may not grow: SQLite's own "database or disk is full"
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages + 1}")

    store.engine.dispose()
    with pytest.raises(StoreUnavailable, match="disk is full") as raised:
        store.push(results_document("s-1-20261127T012215Z", tests=400))
    assert "\n" not in str(raised.value)
    store = open_store(f"sqlite:///{path}")
    assert store.sessions() == [] and store.figures() == []


@pytest.mark.parametrize(("url", "said"), [
    ("postgresql+psycopg://ci:secret@db:port/hwregress", "is not a SQLAlchemy URL"),
    ("sqlite:////etc/hostname/inside-a-file.sqlite", "its folder cannot be created"),
])
def test_a_bad_port_or_a_folder_that_cannot_be_made_is_one_line_not_a_crash(url, said):
    # the review of this change: these raised ValueError and FileExistsError through the session's end
    with pytest.raises(StoreUnavailable, match=said) as caught:
        open_store(url)
    assert "secret" not in str(caught.value)


def test_a_store_password_on_the_command_line_is_masked_in_the_recorded_arguments():
    from hwregress.plugin.store_push import masked_store_args

    args = ["-m", "gpu", "--store=postgresql+psycopg://ci:secret@db/h", "--store", "postgresql://u:pw@db/h", "-q"]
    assert masked_store_args(args) == ["-m", "gpu", "--store=postgresql+psycopg://ci:***@db/h", "--store",
                                       "postgresql://u:***@db/h", "-q"]


def test_a_host_of_sixteen_gpus_has_an_id_the_column_holds(tmp_path):
    # the review of this change: 13 or more UUIDs joined exceed the column (PostgreSQL refuses what SQLite keeps)
    from hwregress.store.session_rows import host_id
    from hwregress.store.tables import HOST_ID_LENGTH

    records = [TestRecord("t", identity={"gpu_uuid": f"GPU-{index:08x}-0000-0000-0000-000000000000"})
               for index in range(16)]
    found = host_id(records, {"hostname": "dgx"})
    assert found.startswith("gpus-sha256:") and len(found) <= HOST_ID_LENGTH
    assert host_id(list(reversed(records)), {}) == found  # stable whatever the order
    assert host_id(records[:2], {}) == ",".join(sorted(r.identity["gpu_uuid"] for r in records[:2]))


def test_a_fifo_or_a_folder_where_the_sqlite_file_should_be_is_one_line_naming_it(tmp_path, character_device):
    fifo, folder = tmp_path / "fifo.sqlite", tmp_path / "folder.sqlite"
    os.mkfifo(fifo)
    folder.mkdir()
    for path, kind in ((fifo, "a FIFO"), (folder, "a folder"), (character_device, "a character device")):
        with pytest.raises(StoreUnavailable) as raised:  # a FIFO was "a disk I/O error (a full or failing disk)"
            open_store(f"sqlite:///{path}")
        message = str(raised.value)
        assert f"{path} is {kind}, not a SQLite file" in message and "--store=none" in message, message
    assert stat.S_ISFIFO(fifo.stat().st_mode) and folder.is_dir() and not list(folder.iterdir())
    os.mkfifo(tmp_path / "new.sqlite-wal")  # beside a database not there yet: SQLite would open it as its log
    with pytest.raises(StoreUnavailable, match=r"new\.sqlite-wal is a FIFO, not a SQLite file"):
        open_store(f"sqlite:///{tmp_path / 'new.sqlite'}")


@pytest.mark.needs_extra
def test_a_connection_dropped_inside_a_push_is_one_line_and_leaves_no_half_session(postgres_database):
    from sqlalchemy import create_engine, event, text

    store, killer = open_store(postgres_database), create_engine(postgres_database)
    dropped: list[int] = []

    @event.listens_for(store.engine, "before_cursor_execute")
    def _drop_the_connection(connection, _cursor, statement, *_):  # the server ends this backend mid-transaction
        if statement.lstrip().upper().startswith("INSERT INTO FIGURES") and not dropped:
            dropped.append(connection.connection.dbapi_connection.info.backend_pid)
            with killer.begin() as other:
                assert other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dropped[0]}).scalar()

    document = results_document("s-1-20261127T012215Z")
    with pytest.raises(StoreUnavailable) as raised:
        store.push(document)
    message = str(raised.value)
    assert dropped and "\n" not in message and "the server dropped the connection" in message, message
    assert message.endswith("a push is whole or nothing and safe to repeat)")
    assert store.sessions() == [] and store.figures() == []  # the session's host, session and figures: none
    outcome = store.push(document)  # the pool replaces the dropped connection
    assert outcome.inserted and len(store.figures()) == outcome.figures > 0
    store.close()
    killer.dispose()

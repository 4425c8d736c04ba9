"""Concurrent writer processes and a killed writer, on a real PostgreSQL (pgserver) and a real SQLite file: every
session is there exactly once with all its figures, duplicates pushed at once are stored once, one machine's sessions
pushed at once, some naming its machine id and some only its hostname, make one host, and a writer SIGKILLed inside
its transaction leaves no session visible, the next push of it storing it whole; a new store opens while another
connection holds its write lock in rollback mode (the moment another process creates it)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
from support.processes import start_script
from support.project import SUPPORT_DIR
from support.store_results import results_document

from hwregress.store.database import open_store

WRITER = SUPPORT_DIR / "store_writer.py"
TESTS = 5  # per session: 10 figures (throughput and peak memory)


def writer(url: str, *paths: Path, pause: bool = False) -> subprocess.Popen:
    return start_script(WRITER, url, *map(str, paths), *(["--pause"] if pause else []))


def session_file(folder: Path, name: str) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(results_document(name, tests=TESTS, hostname=name.split("-")[0])))
    return path


def check_concurrent_writers(url: str, folder: Path, writers: int) -> None:
    names = [f"w{index}-1-20261127T012215Z" for index in range(writers)]
    files = [session_file(folder, name) for name in names]
    # each writer pushes its own session, then its neighbour's: every session is pushed twice, concurrently
    processes = [writer(url, files[i], files[(i + 1) % writers]) for i in range(writers)]
    outcomes = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        outcomes += [json.loads(line) for line in out.splitlines()]
    assert sorted(o["name"] for o in outcomes if o["inserted"]) == sorted(names)  # each inserted exactly once
    assert {o["figures"] for o in outcomes} == {2 * TESTS}
    store = open_store(url)
    assert sorted(s["name"] for s in store.sessions()) == sorted(names)
    assert len(store.figures()) == 2 * TESTS * writers
    assert sorted(h["host_id"] for h in store.hosts()) == sorted(name.split("-")[0] for name in names)
    store.close()


@pytest.mark.needs_extra
def test_sixteen_postgresql_writers_lose_nothing(postgres_database, tmp_path):
    check_concurrent_writers(postgres_database, tmp_path, 16)


def test_four_sqlite_writers_lose_nothing(tmp_path):
    check_concurrent_writers(f"sqlite:///{tmp_path / 'hwregress.sqlite'}", tmp_path, 4)


def check_one_machine_from_many_writers(url: str, folder: Path, writers: int) -> None:
    # every other session names the machine id; the rest only the hostname (as a history written before rows carried
    # the machine id imports): pushed at once, however they interleave, they are one host
    machine = "3d1219c7c4c5404aaa1f6d2a48adfda4"
    names = [f"vm-{index}-20261127T012215Z" for index in range(writers)]
    files = []
    for index, name in enumerate(names):
        results = results_document(name, tests=1, hostname="vm")
        results["meta"].update({"machine_id": machine} if index % 2 else {})
        files.append(folder / f"{name}.json")
        files[-1].write_text(json.dumps(results))
    open_store(url).close()  # migrated first: the writers race in their pushes, not in the migration
    for process in [writer(url, path) for path in files]:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    store = open_store(url)
    [host] = store.hosts()
    assert (host["host_id"], host["aliases"]) == (machine, ["vm"])
    assert sorted((s["name"], s["host_id"]) for s in store.sessions()) == sorted((n, machine) for n in names)
    store.close()


@pytest.mark.needs_extra
def test_one_machine_pushed_by_sixteen_postgresql_writers_by_machine_id_and_hostname_is_one_host(postgres_database,
                                                                                                 tmp_path):
    check_one_machine_from_many_writers(postgres_database, tmp_path, 16)


def test_one_machine_pushed_by_four_sqlite_writers_by_machine_id_and_hostname_is_one_host(tmp_path):
    check_one_machine_from_many_writers(f"sqlite:///{tmp_path / 'hwregress.sqlite'}", tmp_path, 4)


def check_killed_writer(url: str, folder: Path) -> None:
    path = session_file(folder, "killed-1-20261127T012215Z")
    open_store(url).close()  # migrated before the writer, so that its pause is inside the push
    process = writer(url, path, pause=True)
    try:
        assert process.stdout.readline().strip() == "paused", process.stderr.read()
        store = open_store(url)
        assert store.sessions() == [] and store.figures() == []  # figures inserted, not committed: not visible
        store.close()
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    store = open_store(url)
    assert store.sessions() == [] and store.figures() == [] and store.hosts() == []
    outcome = store.push(json.loads(path.read_text()))
    assert (outcome.inserted, outcome.figures) == (True, 2 * TESTS)
    assert len(store.figures()) == 2 * TESTS
    store.close()


def test_a_killed_sqlite_writer_leaves_no_half_session(tmp_path):
    check_killed_writer(f"sqlite:///{tmp_path / 'hwregress.sqlite'}", tmp_path)


@pytest.mark.needs_extra
def test_a_killed_postgresql_writer_leaves_no_half_session(postgres_database, tmp_path):
    check_killed_writer(postgres_database, tmp_path)


def test_a_new_store_opens_while_another_connection_holds_its_rollback_mode_write_lock(tmp_path):
    """What a process creating a new store holds for a moment: the write lock of a file still in rollback mode. SQLite
    refuses the switch to WAL then at once ("database is locked", no busy wait), so a second process opening the store
    failed (one bisection in ~100 of 8 writers starting together lost its record). Now the switch waits, as any other
    statement waits for a lock: the store opens once the lock is let go (0.5 s here)."""
    database = tmp_path / "hwregress.sqlite"
    holder = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE being_created (x)")  # rolled back: the file is left an empty database
    release = threading.Timer(0.5, holder.execute, ["ROLLBACK"])
    started = time.monotonic()  # before the timer starts: the lock is let go 0.5 s after this at the earliest
    release.start()
    try:
        store = open_store(f"sqlite:///{database}")
        opened = time.monotonic() - started
    finally:
        release.join()
        holder.close()
    assert store.sessions() == [] and opened >= 0.45, opened  # it waited for the lock, it did not go around it
    store.push(results_document("vm-1-20261127T012215Z", tests=1))
    assert [s["name"] for s in store.sessions()] == ["vm-1-20261127T012215Z"]
    store.close()


def test_the_switch_to_wal_gives_up_at_its_timeout_naming_the_lock(tmp_path):
    from hwregress.store.sqlite_file import switch_to_wal

    database = tmp_path / "s.sqlite"
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE being_created (x)")
    other = sqlite3.connect(database, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            switch_to_wal(other.cursor(), timeout_s=0.2)
    finally:
        other.close()
        holder.close()

"""hwregress never modifies a database that is neither empty nor its own: ``--store`` pointed at another
application's SQLite file (its own ``sessions`` table or not) or at a PostgreSQL database holding another
application's tables is refused in one line naming it, before any write: no table added, the file's bytes and its
journal mode as they were (SQLite's ``journal_mode=WAL`` is a write to the file's header)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from support.store_results import results_document

from hwregress.cli import main
from hwregress.store.database import open_store
from hwregress.store.store_errors import StoreUnavailable


def other_application(path: Path, table: str) -> str:
    """A SQLite file another application wrote (rollback journal, its ``table`` and a row); its bytes' digest."""
    connection = sqlite3.connect(path)
    connection.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name TEXT)")
    connection.execute(f"INSERT INTO {table} (name) VALUES ('keep me')")
    connection.commit()
    connection.close()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def journal_mode(path: Path) -> str:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return connection.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        connection.close()


@pytest.mark.parametrize("table", ["users", "sessions"])
def test_another_applications_sqlite_file_is_refused_and_left_as_it_was(tmp_path, capsys, table):
    other = tmp_path / "other.db"
    digest = other_application(other, table)
    results = tmp_path / "results.json"
    results.write_text(json.dumps(results_document("vm-1-20261127T012215Z")))
    assert main(["store", "push", str(results), "--store", f"sqlite:///{other}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{other} is a SQLite database of another application" in err, err
    assert f"tables: {table}" in err and "--store=none" in err, err
    with pytest.raises(StoreUnavailable, match="another application"):
        open_store(f"sqlite:///{other}")
    assert hashlib.sha256(other.read_bytes()).hexdigest() == digest
    assert journal_mode(other) == "delete"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["other.db", "results.json"]  # no -wal, no -shm


def test_an_empty_file_and_an_hwregress_store_open_as_stores(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()  # an empty file is an empty database: hwregress's tables go in
    open_store(f"sqlite:///{empty}").push(results_document("vm-1-20261127T012215Z"))
    store = open_store(f"sqlite:///{empty}")  # and it is hwregress's from then on
    assert [session["name"] for session in store.sessions()] == ["vm-1-20261127T012215Z"]
    store.close()
    assert journal_mode(empty) == "wal"


def test_a_file_that_is_no_sqlite_database_is_one_line_and_left_as_it_was(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database, but someone's notes\n" * 200)
    with pytest.raises(StoreUnavailable, match=rf"{text} is not a SQLite database") as raised:
        open_store(f"sqlite:///{text}")
    assert "\n" not in str(raised.value)
    assert text.read_text() == "not a database, but someone's notes\n" * 200


@pytest.mark.needs_extra
def test_a_postgresql_database_of_another_application_is_refused_and_left_as_it_was(postgres_database):
    from sqlalchemy import create_engine, inspect

    engine = create_engine(postgres_database)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE users (id serial PRIMARY KEY, name text)")
    with pytest.raises(StoreUnavailable, match="a database of another application") as raised:
        open_store(postgres_database)
    assert "tables: users" in str(raised.value) and "\n" not in str(raised.value)
    assert inspect(engine).get_table_names() == ["users"]
    engine.dispose()

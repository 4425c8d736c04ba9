"""A SQLite store's file before :func:`hwregress.store.database.open_store` connects to it (a connection already
writes: ``journal_mode=WAL`` changes the file's header): the path must be a regular file, never a FIFO or a device
(:func:`check_sqlite_file`), and a database that is not empty must be hwregress's own, read without writing
(:func:`hwregress.store.tables.owned_by_hwregress`); a reader opens a file it cannot write (:func:`writable`)
read-only (:func:`read_only_url`); a writer's connection switches the file to WAL, waiting for another's lock as its
other statements do (:func:`switch_to_wal`).
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import URL

from hwregress.store.atomic import describe_kind
from hwregress.store.store_errors import StoreUnavailable, unavailable
from hwregress.store.tables import VERSION_TABLE, described_tables, owned_by_hwregress

BUSY_TIMEOUT_MS = 30_000  # how long a connection waits for another's lock: writers queue instead of failing
_WAL_RETRY_S = (0.005, 0.1)  # the first and the longest pause between two tries of the switch to WAL
_NEW_PATH = "point --store or HWREGRESS_STORE at a SQLite file or a new path, or give --store=none"


def check_sqlite_file(database: Path, shown: str) -> None:
    """Refuse the SQLite store ``database`` (shown as ``shown``, a masked URL) before anything connects to it: its
    path, ``-wal`` or ``-shm`` there but no regular file (SQLite would report a FIFO as a failing disk, and must never
    write into a device); a file that is no SQLite database; a database with tables that is not hwregress's
    (:func:`hwregress.store.tables.owned_by_hwregress`: another application's, to which hwregress adds no table and
    whose journal mode it leaves as it is). A path not there, or an empty file, passes: the store is created there.

    Raises:
        StoreUnavailable: one line naming the file, what it is and the fix.
    """
    for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        try:
            mode = path.stat().st_mode
        except OSError:  # not there (created), or unreadable (SQLite says why)
            continue
        if not stat.S_ISREG(mode):
            raise StoreUnavailable(shown, f"{path} is {describe_kind(mode)}, not a SQLite file", _NEW_PATH)
    try:
        if database.stat().st_size == 0:
            return
    except OSError:
        return
    try:
        tables, revisions = _tables_and_revisions(database)
    except sqlite3.DatabaseError as error:
        if "not a database" in str(error):
            raise StoreUnavailable(shown, f"{database} is not a SQLite database (SQLite: {error})",
                                   _NEW_PATH) from None
        raise unavailable(shown, error) from None  # unreadable, locked: nothing is written on a guess
    if not owned_by_hwregress(tables, revisions):
        raise StoreUnavailable(shown, f"{database} is a SQLite database of another application "
                                      f"({described_tables(tables)}), not an hwregress store",
                               "hwregress never writes into another application's database: give --store a new "
                               "file or an hwregress store, or --store=none")


def _tables_and_revisions(database: Path) -> tuple[list[str], list[str]]:
    """The tables and views of ``database`` (SQLite's own aside) and its Alembic revisions, read through a read-only
    connection."""
    connection = sqlite3.connect(f"file:{quote(str(database))}?{_read_only_mode(database)}", uri=True,
                                 timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        tables = [row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
            "ORDER BY name")]
        revisions = ([row[0] for row in connection.execute(f"SELECT version_num FROM {VERSION_TABLE}")]
                     if VERSION_TABLE in tables else [])
    finally:
        connection.close()
    return tables, revisions


def writable(database: Path) -> bool:
    """Whether the SQLite file ``database`` and its folder (where SQLite writes its ``-wal``, ``-shm`` or
    ``-journal``) can be written by this process (``os.access``: a read-only mount says no to root too); True for a
    path that is not there (whether it can be created is found out by creating it)."""
    return not database.exists() or (os.access(database, os.W_OK) and os.access(database.parent, os.W_OK))


def read_only_url(url: URL) -> URL | None:
    """``url`` (a SQLite store's, its database a path) as the URL that opens it read-only, SQLite's URI with
    ``mode=ro`` or ``immutable=1``; None when it can be opened as usual (:func:`writable`). A file that cannot be
    written (a read-only mount, for root too; a file of another user) is read without any write: ``mode=ro`` where
    its folder is writable or its ``-wal`` and ``-shm`` are there (a live store: its log is read too), else
    ``immutable=1`` (SQLite could create neither, and ``mode=ro`` of a WAL database needs them)."""
    database = Path(url.database or "").expanduser()
    if not url.database or writable(database):
        return None
    key, value = _read_only_mode(database).split("=")
    return url.set(database=f"file:{quote(str(database))}", query={**url.query, "uri": "true", key: value})


def _read_only_mode(database: Path) -> str:
    sidecars = Path(f"{database}-wal").exists() and Path(f"{database}-shm").exists()
    return "mode=ro" if sidecars or os.access(database.parent, os.W_OK) else "immutable=1"


def switch_to_wal(cursor: sqlite3.Cursor, timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> None:
    """``PRAGMA journal_mode = WAL`` on a new connection's ``cursor``, tried again for up to ``timeout_s`` while the
    database is locked. SQLite answers "database is locked" at once, without the busy handler that the other
    statements wait in, when another connection holds the write lock of a file still in rollback mode (its SHARED to
    EXCLUSIVE step would deadlock): a new store that another process is creating at that moment. Seen as a bisection
    whose record was not kept, once in ~100 runs of 8 writers starting on one new file
    (tests/store/test_store_bisections.py).

    Raises:
        sqlite3.OperationalError: still locked after ``timeout_s``, or any other error at once.
    """
    deadline = time.monotonic() + timeout_s
    pause, longest = _WAL_RETRY_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "database is locked" not in str(error) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, longest)

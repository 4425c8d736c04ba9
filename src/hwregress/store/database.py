"""Where the fleet store lives and how it is opened: :func:`store_url` picks the SQLAlchemy URL, :func:`open_store`
makes the engine, migrates the schema to head (:mod:`hwregress.store.migrations`) and returns a
:class:`hwregress.store.fleet_store.Store`. Every failure to reach or write the store is one
:class:`StoreUnavailable`: the URL (password masked), what went wrong and the fix.

SQLite (the default, ``<report-dir>/hwregress.sqlite``): every connection sets ``journal_mode=WAL`` (readers never
wait for the writer), ``busy_timeout`` 30 s (writers queue instead of failing) and ``foreign_keys=ON``; a write
transaction begins ``IMMEDIATE``, taking the file's write lock first, so that two writers never both read and then
both fail to upgrade to writing. PostgreSQL (``postgresql+psycopg://``, the ``fleet`` extra): concurrent first opens
of an empty database migrate one at a time under an advisory lock.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Engine, create_engine, event, exc, make_url

from hwregress.store.atomic import describe_kind
from hwregress.store.fleet_store import Store
from hwregress.store.store_errors import FLEET_FIX, StoreUnavailable, unavailable

ENV_VAR = "HWREGRESS_STORE"
SQLITE_NAME = "hwregress.sqlite"
BUSY_TIMEOUT_MS = 30_000
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_MIGRATION_LOCK = 0x6877_7265_6772  # "hwregr": the advisory lock id of a PostgreSQL migration


CONNECT_TIMEOUT_S = 10


def store_url(option: str | None, environ: Mapping[str, str], report_dir: str | os.PathLike[str]) -> str:
    """The store's SQLAlchemy URL: ``option`` (``--store``), else ``environ["HWREGRESS_STORE"]``, else the SQLite file
    ``sqlite:///<report_dir>/hwregress.sqlite`` (``report_dir`` as given, relative or absolute)."""
    for candidate in (option, environ.get(ENV_VAR)):
        if candidate and candidate.strip():
            return candidate.strip()
    return f"sqlite:///{Path(report_dir) / SQLITE_NAME}"


def masked(url: str) -> str:
    """``url`` with its password shown as ``***`` (in a text SQLAlchemy cannot read, whatever lies between
    ``://user:`` and ``@``)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (exc.ArgumentError, ValueError):  # ValueError: a port that is no number
        return re.sub(r"(://[^/:@]*:)[^@/]*@", r"\1***@", url)


def sqlite_files(url: str) -> list[Path]:
    """The files of a SQLite store at ``url`` (the database, its ``-wal`` and ``-shm``), which a command's output must
    never replace; empty for another database, an in-memory one or a text that is no URL."""
    try:
        parsed = make_url(url)
    except (exc.ArgumentError, ValueError):
        return []
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return []
    database = Path(parsed.database).expanduser()
    return [database, Path(f"{database}-wal"), Path(f"{database}-shm")]


def open_store(url: str) -> Store:
    """Open the store at ``url`` (a SQLAlchemy URL: ``sqlite:///path``, ``postgresql+psycopg://user:pw@host/db``),
    creating a SQLite file's folder, and migrate its schema to head.

    Raises:
        StoreUnavailable: a URL SQLAlchemy cannot read, a database driver not installed, a server that refuses or
            does not answer, a file that cannot be created or written (read-only, disk full), a schema newer than
            this hwregress knows.
    """
    shown = masked(url)
    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018 -- a port that is no number raises here, not at connect time
    except (exc.ArgumentError, ValueError):
        raise StoreUnavailable(shown, "is not a SQLAlchemy URL", "give e.g. sqlite:///reports/hwregress.sqlite or "
                                      "postgresql+psycopg://user:password@host/database") from None
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3, the fleet extra's driver
    _require_regular_database(url, shown)
    try:
        engine = _engine(parsed)
    except exc.NoSuchModuleError:
        raise StoreUnavailable(shown, f"no SQLAlchemy dialect {parsed.drivername!r}",
                               "use sqlite:/// or postgresql+psycopg://") from None
    except ImportError as error:
        raise StoreUnavailable(shown, f"the database driver is not installed ({error.name or error})",
                               FLEET_FIX if parsed.get_backend_name() == "postgresql"
                               else f"install the driver of {parsed.drivername}") from None
    except OSError as error:  # the SQLite file's folder cannot be created
        raise StoreUnavailable(shown, f"its folder cannot be created ({error.strerror or error})",
                               "point --store or HWREGRESS_STORE at a writable place, or give --store=none") from None
    try:
        upgrade(engine)
    except (exc.SQLAlchemyError, OSError, CommandError) as error:
        engine.dispose()
        raise unavailable(shown, error) from None
    return Store(engine, shown)


def _require_regular_database(url: str, shown: str) -> None:
    """Refuse a SQLite store's path that is there but no regular file (a folder, a FIFO, a device): SQLite would
    report a FIFO as a failing disk, and must never write into a device.

    Raises:
        StoreUnavailable: naming what the path is.
    """
    for path in sqlite_files(url):  # the database, its -wal and -shm
        try:
            mode = path.stat().st_mode
        except OSError:  # not there (created), or unreadable (SQLite says why)
            continue
        if not stat.S_ISREG(mode):
            raise StoreUnavailable(shown, f"{path} is {describe_kind(mode)}, not a SQLite file",
                                   "point --store or HWREGRESS_STORE at a SQLite file or a new path, or give "
                                   "--store=none")


def _engine(url: Any) -> Engine:
    if url.get_backend_name() != "sqlite":  # a server that does not answer: one line after 10 s, not the OS's 2 min
        return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    if url.database and url.database != ":memory:":
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})
    event.listen(engine, "connect", _sqlite_connection)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # the driver's own BEGIN off: _sqlite_begin says which
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _sqlite_begin(connection: Any) -> None:
    read_only = connection.get_execution_options().get("hwregress_read_only", False)
    connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


@functools.cache
def head_revision() -> str | None:
    """The newest revision of :mod:`hwregress.store.migrations`, read from its scripts once per process (the
    scripts are this package's files: they do not change while it runs)."""
    return ScriptDirectory.from_config(_config()).get_current_head()


def upgrade(engine: Engine) -> None:
    """Migrate the database to the newest revision of :mod:`hwregress.store.migrations`, in one transaction (a
    database already there is only looked at: its ``alembic_version`` against :func:`head_revision`; any other
    revision, a newer one too, goes to Alembic, which migrates it or refuses it).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be reached or written.
        alembic.util.CommandError: its revision is unknown to this hwregress (a newer one migrated it).
    """
    with engine.connect().execution_options(hwregress_read_only=True) as connection:
        if MigrationContext.configure(connection).get_current_revision() == head_revision():
            return
    config = _config()
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
        config.attributes["connection"] = connection
        command.upgrade(config, "head")

"""Where the fleet store lives and how it is opened: :func:`store_url` picks the SQLAlchemy URL (refusing one that
stores nothing), :func:`masked` is how a URL is shown or kept anywhere (its secrets ``***``), :func:`open_store` makes
the engine, migrates the schema to head (:mod:`hwregress.store.migrations`) and returns a
:class:`hwregress.store.fleet_store.Store`. Every failure to reach or write the store is one
:class:`StoreUnavailable`: the URL (masked), what went wrong and the fix. A database that is neither empty nor
hwregress's is never written (:mod:`hwregress.store.sqlite_file` checks a SQLite file before it is connected to).

SQLite (the default, ``<report-dir>/hwregress.sqlite``): every connection sets ``journal_mode=WAL`` (readers never
wait for the writer), ``busy_timeout`` 30 s (writers queue instead of failing) and ``foreign_keys=ON``; a write
transaction begins ``IMMEDIATE``, taking the file's write lock first, so that two writers never both read and then
both fail to upgrade to writing. A reader (``open_store(url, reading=True)``) opens a file it cannot write read-only
(a store on a read-only mount), and never migrates a store of an older revision (:func:`readable_as_it_is`).
PostgreSQL (``postgresql+psycopg://``, the ``fleet`` extra): concurrent first opens of an empty database migrate one
at a time under an advisory lock.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

from sqlalchemy import URL, Engine, create_engine, event, exc, inspect, make_url

from hwregress.store.fleet_store import Store
from hwregress.store.sqlite_file import BUSY_TIMEOUT_MS, check_sqlite_file, read_only_url, switch_to_wal, writable
from hwregress.store.store_errors import FLEET_FIX, NoStoreUrl, NotHwregress, StoreUnavailable, unavailable
from hwregress.store.tables import VERSION_TABLE, described_tables, owned_by_hwregress

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic (~0.45 s of a fresh process's start) is imported by the functions that migrate: a process that only names
# a store (an xdist worker's settings, a command's URL) never opens it

ENV_VAR = "HWREGRESS_STORE"
SQLITE_NAME = "hwregress.sqlite"
# a query parameter whose name says it holds a secret: libpq's password and sslpassword, a token, ...
SECRET_PARAMETER = re.compile(r"pass(?:word|wd)|secret|token", re.IGNORECASE)
# a URL's user part as SQLAlchemy's parser reads it (sqlalchemy.engine.url._parse_url): <scheme>://<user>:<password>@,
# found anywhere in the text (a text SQLAlchemy refuses, e.g. "postgres ql://u:pw@h", keeps its password hidden too)
_USER_PASSWORD = re.compile(r"([\w+]*://[^:/]*:)[^@]*@")
_NO_STORE_FIX = ("give a SQLAlchemy URL of a file or a server, e.g. sqlite:///reports/hwregress.sqlite; a session "
                 "turns the store off with --store=none")
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_MIGRATION_LOCK = 0x6877_7265_6772  # "hwregr": the advisory lock id of a PostgreSQL migration


CONNECT_TIMEOUT_S = 10


def store_url(option: str | None, environ: Mapping[str, str], report_dir: str | os.PathLike[str],
              source: str = "--store") -> str:
    """The store's SQLAlchemy URL: ``option`` (``--store``, from ``source``), else ``environ["HWREGRESS_STORE"]``
    (unset or empty: not given), else the SQLite file ``<report_dir>/hwregress.sqlite`` (``report_dir`` as given,
    relative or absolute), its URL built from the path, so that no character of it (``?``, ``#``, ``%``) is read as
    URL syntax.

    Raises:
        NoStoreUrl: ``option`` given but empty (it would have meant the default silently), or an in-memory SQLite
            database (``sqlite://``: the session would be "pushed" into nothing).
    """
    if option is not None and not option.strip():
        raise NoStoreUrl(f"{source}={option!r}", "an empty URL names no store", _NO_STORE_FIX)
    for candidate, where in ((option, source), (environ.get(ENV_VAR), ENV_VAR)):
        if candidate and candidate.strip():
            if _in_memory(candidate.strip()):
                raise NoStoreUrl(f"{where}={masked(candidate)!r}", "an in-memory SQLite database keeps nothing after "
                                                                   "this process", _NO_STORE_FIX)
            return candidate.strip()
    return URL.create(drivername="sqlite", database=str(Path(report_dir) / SQLITE_NAME)).render_as_string(False)


def _in_memory(url: str) -> bool:
    """Whether ``url`` is an in-memory SQLite database (``sqlite://``, ``:memory:``, a URI's ``file::memory:`` or
    ``mode=memory``); False for a text that is no URL (opening it says so)."""
    try:
        parsed = make_url(url)
    except (exc.ArgumentError, ValueError):
        return False
    if parsed.get_backend_name() != "sqlite":
        return False
    database = parsed.database or ""
    return database in ("", ":memory:") or database.startswith("file::memory:") or parsed.query.get("mode") == "memory"


def masked(url: str) -> str:
    """``url`` as it may be shown or kept (the terminal, results.json, the report, the store's ``sessions.meta``,
    errors): the password of its user part and the value of every query parameter :data:`SECRET_PARAMETER` names
    (``password``, ``sslpassword``, a token; libpq takes a password there too) replaced by ``***``, the rest as given.
    The text is read by SQLAlchemy's own grammar (:data:`_USER_PASSWORD`; the query after the first ``?``, its
    parameters split on ``&``, their names percent-decoded), so a text it cannot parse is masked the same."""
    text = _USER_PASSWORD.sub(r"\1***@", url, count=1)
    head, mark, query = text.partition("?")
    if not mark:
        return text
    parameters = query.split("&")
    for index, parameter in enumerate(parameters):
        name, equals, _ = parameter.partition("=")
        if equals and SECRET_PARAMETER.search(unquote_plus(name)):
            parameters[index] = f"{name}=***"
    return f"{head}?{'&'.join(parameters)}"


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


def open_store(url: str, *, reading: bool = False) -> Store:
    """Open the store at ``url`` (a SQLAlchemy URL: ``sqlite:///path``, ``postgresql+psycopg://user:pw@host/db``),
    creating a SQLite file's folder, and migrate its schema to head. ``reading``: the caller only reads, so a SQLite
    file it cannot write (a read-only mount) is opened read-only (:func:`hwregress.store.sqlite_file.read_only_url`)
    instead of failing, and a store of an older revision this hwregress knows is read at that revision, not migrated
    (:func:`readable_as_it_is`): what a later migration added reads as empty. So a newer hwregress that only reads a
    fleet's store never moves it past the revision of the runners that write it (they would refuse it).

    Raises:
        StoreUnavailable: a URL SQLAlchemy cannot read, a database driver not installed, a server that refuses or
            does not answer, a file that cannot be created or written (read-only, disk full), a database that is
            neither empty nor hwregress's (nothing is written to it), a schema newer than this hwregress knows.
    """
    from alembic.util import CommandError

    shown = masked(url)
    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018 -- a port that is no number raises here, not at connect time
    except (exc.ArgumentError, ValueError):
        raise StoreUnavailable(shown, "is not a SQLAlchemy URL", "give e.g. sqlite:///reports/hwregress.sqlite or "
                                      "postgresql+psycopg://user:password@host/database") from None
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3, the fleet extra's driver
    files = sqlite_files(url)
    if files:
        check_sqlite_file(files[0], shown)  # before any connection: journal_mode=WAL is already a write
        if not reading and not writable(files[0]):
            raise StoreUnavailable(shown, f"{files[0]} or its folder is read-only (a read-only mount or file)",
                                   "give a writable file with --store or HWREGRESS_STORE, or --store=none")
    read_only = read_only_url(parsed) if files and reading else None
    try:
        engine = _engine(read_only or parsed, read_only is not None)
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
        if not (reading and readable_as_it_is(engine)):
            upgrade(engine)
    except NotHwregress as error:
        engine.dispose()
        raise StoreUnavailable(shown, f"is a database of another application ({described_tables(error.tables)}), "
                                      "not an hwregress store",
                               "hwregress never writes into another application's database: give --store an empty "
                               "database or an hwregress store, or --store=none") from None
    except (exc.SQLAlchemyError, OSError, CommandError) as error:
        engine.dispose()
        raise unavailable(shown, error) from None
    return Store(engine, shown)


def _engine(url: Any, read_only: bool) -> Engine:
    if url.get_backend_name() != "sqlite":  # a server that does not answer: one line after 10 s, not the OS's 2 min
        return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    if url.database and url.database != ":memory:" and not read_only:
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})
    event.listen(engine, "connect", functools.partial(_sqlite_connection, wal=not read_only))
    event.listen(engine, "begin", _sqlite_read_only_begin if read_only else _sqlite_begin)
    return engine


def _sqlite_connection(dbapi_connection: Any, _record: Any, wal: bool = True) -> None:
    dbapi_connection.isolation_level = None  # the driver's own BEGIN off: _sqlite_begin says which
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if wal:  # a read-only connection leaves the file's journal mode as it is (setting it is a write)
        switch_to_wal(cursor)
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _sqlite_read_only_begin(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN")


def _sqlite_begin(connection: Any) -> None:
    read_only = connection.get_execution_options().get("hwregress_read_only", False)
    connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


@functools.cache
def head_revision() -> str | None:
    """The newest revision of :mod:`hwregress.store.migrations`, read from its scripts once per process (the
    scripts are this package's files: they do not change while it runs)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config()).get_current_head()


@functools.cache
def known_revisions() -> tuple[str, ...]:
    """The revisions of :mod:`hwregress.store.migrations`, newest first (read from its scripts once per process)."""
    from alembic.script import ScriptDirectory

    return tuple(script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions())


def readable_as_it_is(engine: Engine) -> bool:
    """Whether a reader can read the store without migrating it: its revision is the newest or an older one of
    :mod:`hwregress.store.migrations` (every migration so far only adds tables, so the older tables read the same).
    False for an empty database, another application's or a revision this hwregress does not know: :func:`upgrade`
    then creates the tables or names what is wrong.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
    """
    current = _current_revision(engine)
    return current is not None and current in known_revisions()


def _current_revision(engine: Engine) -> str | None:
    """The store's ``alembic_version``, read without writing; None for a database that has none."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect().execution_options(hwregress_read_only=True) as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine) -> None:
    """Migrate the database to the newest revision of :mod:`hwregress.store.migrations`, in one transaction (a
    database already there is only looked at: its ``alembic_version`` against :func:`head_revision`; any other
    revision, a newer one too, goes to Alembic, which migrates it or refuses it).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be reached or written.
        alembic.util.CommandError: its revision is unknown to this hwregress (a newer one migrated it).
        NotHwregress: it holds tables and is not hwregress's (:func:`hwregress.store.tables.owned_by_hwregress`):
            another application's, left as it was.
    """
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    if _current_revision(engine) == head_revision():
        return
    config = _config()
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
        found = inspect(connection)
        tables = [*found.get_table_names(), *found.get_view_names()]
        revisions = MigrationContext.configure(connection).get_current_heads() if VERSION_TABLE in tables else ()
        if not owned_by_hwregress(tables, revisions):
            raise NotHwregress(sorted(tables))
        config.attributes["connection"] = connection
        command.upgrade(config, "head")

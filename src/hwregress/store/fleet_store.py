"""The fleet store's reads and writes (:func:`hwregress.store.database.open_store` opens one): push a session whole
or not at all, list sessions and figures, export the history files today's dashboard reads.

A push is one transaction: the host row (inserted, or its aliases and last sighting updated; the machine's stable id
where the session names only a hostname, :mod:`hwregress.store.host_identity`), the session row and all its figures,
so that a reader sees the whole session or none of it, and a writer killed halfway leaves nothing.
It is idempotent by the session's name: a session already there is left as it is (``inserted`` False), also when
two writers push it at once (the second's insert does nothing on the unique name, and it re-reads the first's).

A bisection is stored probe by probe as it runs, and read back as its JSON document
(:mod:`hwregress.store.bisection_store`).
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from hwregress.store import bisection_store
from hwregress.store.history import HistoryStore, iter_history
from hwregress.store.history_export import history_rows
from hwregress.store.history_row import HistoryRow
from hwregress.store.host_identity import settle_host, take_over
from hwregress.store.session_rows import SessionRows, session_rows
from hwregress.store.store_errors import unavailable
from hwregress.store.tables import figures, hosts, sessions
from hwregress.store.times import utc

_TIMES = ("started_at", "finished_at", "pushed_at", "first_seen", "last_seen")


@dataclass(frozen=True)
class PushOutcome:
    """What a push did: the session's id, whether this push inserted it (False: it was there already, unchanged)
    and how many figure rows the session has in the store."""

    session_id: str
    inserted: bool
    figures: int


class _AlreadyThere(Exception):
    """Raised inside a push's transaction to roll it back: another writer's copy of the session is there."""


class Store:
    """An open fleet store; methods raise :class:`hwregress.store.store_errors.StoreUnavailable` when the database
    cannot be reached or written (the URL masked, the fix named)."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine, self.url = engine, url

    def close(self) -> None:
        """Close the store's connections."""
        self.engine.dispose()

    def push(self, results: Mapping[str, Any]) -> PushOutcome:
        """Store the session of a ``results.json`` document (parsed JSON), whole, once.

        Raises:
            ValueError: not a results document (:func:`hwregress.store.session_rows.session_rows`).
            StoreUnavailable: the store cannot be reached or written (nothing of the session is stored).
        """
        return self.push_rows(session_rows(results))

    def push_rows(self, rows: SessionRows) -> PushOutcome:
        """Store one session's rows in one transaction unless a session of its name is there (see the module doc).

        Raises:
            StoreUnavailable: the store cannot be reached or written (nothing of the session is stored).
        """
        try:
            present = self._existing(rows.session["name"])
            if present is not None:
                return present
            try:
                with self.engine.begin() as connection:
                    settled = settle_host(connection, rows.host)
                    self._upsert_host(connection, settled.host)
                    take_over(connection, settled)
                    stamped = {**rows.session, "host_id": settled.host["host_id"],
                               "pushed_at": _dt.datetime.now(_dt.timezone.utc)}
                    added = connection.execute(self._insert_absent(sessions).values(**stamped)
                                               .returning(sessions.c.id)).first()
                    if added is None:
                        raise _AlreadyThere
                    if rows.figures:
                        connection.execute(insert(figures), [{**row, "session_id": stamped["id"]}
                                                             for row in rows.figures])
            except (_AlreadyThere, IntegrityError):
                present = self._existing(rows.session["name"])
                if present is None:
                    raise
                return present
        except SQLAlchemyError as error:
            raise unavailable(self.url, error) from None
        return PushOutcome(rows.session["id"], True, len(rows.figures))

    def sessions(self, hardware_key: str | None = None, host: str | None = None, branch: str | None = None,
                 since: _dt.datetime | None = None, until: _dt.datetime | None = None) -> list[dict[str, Any]]:
        """The sessions matching every filter given, oldest start first, as ``sessions`` rows (column -> value; times
        aware UTC). ``host`` matches a host id or a hostname; ``since``/``until`` bound the start (inclusive; a naive
        time is UTC).

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        query = select(sessions).order_by(sessions.c.started_at, sessions.c.name)
        if hardware_key is not None:
            query = query.where(sessions.c.hardware_key == hardware_key)
        if host is not None:
            query = query.where(or_(sessions.c.host_id == host, sessions.c.hostname == host))
        if branch is not None:
            query = query.where(sessions.c.git_branch == branch)
        if since is not None:
            query = query.where(sessions.c.started_at >= utc(since))
        if until is not None:
            query = query.where(sessions.c.started_at <= utc(until))
        return self._read(query)

    def session(self, name_or_id: str) -> dict[str, Any] | None:
        """The ``sessions`` row whose name (``meta.session``) or UUID is ``name_or_id``; None when there is none.

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        found = self._read(select(sessions).where(or_(sessions.c.name == name_or_id, sessions.c.id == name_or_id)))
        return found[0] if found else None

    def session_names(self) -> list[tuple[str, str]]:
        """Every session's (UUID, name), oldest start first.

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        rows = self._read(select(sessions.c.id, sessions.c.name).order_by(sessions.c.started_at, sessions.c.name))
        return [(row["id"], row["name"]) for row in rows]

    def figures(self, hardware_key: str | None = None, test_id: str | None = None,
                session_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The figure rows matching every filter given (column -> value), ordered by session id (that is, by start),
        test id and metric.

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        query = select(figures).order_by(figures.c.session_id, figures.c.test_id, figures.c.metric)
        if hardware_key is not None:
            query = query.where(figures.c.hardware_key == hardware_key)
        if test_id is not None:
            query = query.where(figures.c.test_id == test_id)
        if session_ids is not None:
            query = query.where(figures.c.session_id.in_(list(session_ids)))
        return self._read(query)

    def hosts(self) -> list[dict[str, Any]]:
        """Every ``hosts`` row, by host id."""
        return self._read(select(hosts).order_by(hosts.c.host_id))

    def history_by_key(self, hardware_keys: Iterable[str] | None = None, test_ids: Iterable[str] | None = None,
                       host_ids: Iterable[str] | None = None) -> dict[str, list[HistoryRow]]:
        """The store's throughput figures as history rows (:func:`hwregress.store.history_export.history_rows`) per
        hardware key (sorted), of ``hardware_keys``, ``test_ids`` and the sessions of ``host_ids`` only when given;
        each key's rows by session start, as ``python -m hwregress history`` reads them from a history folder. Only
        the sessions holding such a figure are read; test ids are matched here, not in SQL (thousands of them would
        pass SQLite's bound-parameter limit, 999 on older builds).

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        wanted = figures.c.metric == "throughput"
        if hardware_keys is not None:
            wanted = wanted & figures.c.hardware_key.in_(sorted(set(hardware_keys)))
        if host_ids is not None:
            of_hosts = select(sessions.c.id).where(sessions.c.host_id.in_(sorted(set(host_ids))))
            wanted = wanted & figures.c.session_id.in_(of_hosts)
        tests = None if test_ids is None else set(test_ids)
        by_session: dict[str, list[dict[str, Any]]] = {}
        for row in self._read(select(figures).where(wanted).order_by(figures.c.session_id, figures.c.test_id)):
            if tests is None or row["test_id"] in tests:
                by_session.setdefault(row["session_id"], []).append(row)
        by_key: dict[str, list[HistoryRow]] = {}
        for session in self._read(select(sessions).where(sessions.c.id.in_(select(figures.c.session_id).where(wanted)))
                                  .order_by(sessions.c.started_at, sessions.c.name)):
            for row in history_rows(session, by_session.get(session["id"], [])):
                by_key.setdefault(row["hardware_key"], []).append(row)
        return dict(sorted(by_key.items()))

    def export_history(self, folder: str | os.PathLike[str]) -> dict[str, int]:
        """Append the store's throughput figures to ``<folder>/<hardware-key>.jsonl`` as history rows
        (:func:`hwregress.store.history_export.history_rows`) that :func:`hwregress.store.history.read_history` reads
        and ``python -m hwregress history render`` draws; a (session, test) row already in a file is not appended
        again, so exporting twice or into a runner's own history adds only what is new. Returns rows appended per key.

        Raises:
            StoreUnavailable: the store cannot be read.
            OSError, ValueError, filelock.Timeout: a history file cannot be read or written
                (:meth:`hwregress.store.history.HistoryStore.append`).
        """
        by_key = self.history_by_key()
        history, appended = HistoryStore(folder), {}
        for key, rows in sorted(by_key.items()):
            present = {(row["session"], row["test_id"]) for row in iter_history(history.path_for(key), [])}
            absent = [row for row in rows if (row["session"], row["test_id"]) not in present]
            if absent:
                history.append(key, absent)
            appended[key] = len(absent)
        return appended

    def start_bisection(self, bisection_id: str, started_at: _dt.datetime, hostname: str | None, kind: str,
                        candidates: list[str], labels: list[str], settings: Mapping[str, Any]) -> None:
        """Store a bisection as it starts, status ``running``, once
        (:func:`hwregress.store.bisection_store.start_bisection`).

        Raises:
            ValueError: a value that does not fit its column (named).
            StoreUnavailable: the store cannot be reached or written.
        """
        bisection_store.start_bisection(self.engine, self.url, bisection_id, started_at, hostname, kind, candidates,
                                        labels, settings)

    def add_bisection_probe(self, bisection_id: str, number: int, probe: Mapping[str, Any]) -> None:
        """Store probe ``number`` (1 the first) of a bisection as it ends, once
        (:func:`hwregress.store.bisection_store.add_bisection_probe`).

        Raises:
            ValueError: a malformed probe, or no such bisection.
            StoreUnavailable: the store cannot be reached or written.
        """
        bisection_store.add_bisection_probe(self.engine, self.url, bisection_id, number, probe)

    def finish_bisection(self, bisection_id: str, document: Mapping[str, Any], finished_at: _dt.datetime) -> None:
        """Store a bisection's end: its final JSON document, status and bounds, and the probes not stored yet
        (:func:`hwregress.store.bisection_store.finish_bisection`).

        Raises:
            ValueError: a malformed document, or no such bisection.
            StoreUnavailable: the store cannot be reached or written.
        """
        bisection_store.finish_bisection(self.engine, self.url, bisection_id, document, finished_at)

    def bisections(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The bisections, newest first, without their documents, each with its count of ``probes``
        (:func:`hwregress.store.bisection_store.list_bisections`).

        Raises:
            ValueError: a negative ``limit``.
            StoreUnavailable: the store cannot be read.
        """
        return bisection_store.list_bisections(self.engine, self.url, limit)

    def bisection(self, id_or_prefix: str) -> dict[str, Any] | None:
        """The JSON document of the bisection of this id or id prefix, rebuilt from its rows where it never finished;
        None when there is none (:func:`hwregress.store.bisection_store.find_bisection`).

        Raises:
            ValueError: an empty id, or a prefix of several bisections' ids (naming them).
            StoreUnavailable: the store cannot be read.
        """
        return bisection_store.find_bisection(self.engine, self.url, id_or_prefix)

    def _existing(self, name: str) -> PushOutcome | None:
        count = (select(func.count()).select_from(figures).where(figures.c.session_id == sessions.c.id)
                 .scalar_subquery())
        found = self._read(select(sessions.c.id, count.label("figures")).where(sessions.c.name == name))
        return PushOutcome(found[0]["id"], False, found[0]["figures"]) if found else None

    def _insert_absent(self, table: Any) -> Any:
        """INSERT that does nothing where a unique key is taken (PostgreSQL and SQLite's ON CONFLICT DO NOTHING)."""
        dialect = {"postgresql": postgresql, "sqlite": sqlite}.get(self.engine.dialect.name)
        return dialect.insert(table).on_conflict_do_nothing() if dialect else insert(table)

    def _upsert_host(self, connection: Connection, host: dict[str, Any]) -> None:
        connection.execute(self._insert_absent(hosts).values(**host))
        current = connection.execute(select(hosts).where(hosts.c.host_id == host["host_id"])
                                     .with_for_update()).mappings().one()
        aliases = list(current["aliases"]) + [a for a in host["aliases"] if a not in current["aliases"]]
        changed = {"aliases": aliases, "last_seen": max(utc(current["last_seen"]), host["last_seen"]),
                   "first_seen": min(utc(current["first_seen"]), host["first_seen"]),
                   "hardware_key": host["hardware_key"] or current["hardware_key"]}
        if any(changed[k] != (utc(current[k]) if k in _TIMES else current[k]) for k in changed):
            connection.execute(update(hosts).where(hosts.c.host_id == host["host_id"]).values(**changed))

    def _read(self, query: Any) -> list[dict[str, Any]]:
        try:
            with self.engine.connect().execution_options(hwregress_read_only=True) as connection:
                return [_aware(dict(row)) for row in connection.execute(query).mappings()]
        except SQLAlchemyError as error:
            raise unavailable(self.url, error) from None

    def read(self, query: Any) -> list[dict[str, Any]]:
        """The rows of a read-only ``select`` over this store's tables (column label -> value; times aware UTC): the
        narrow queries of :mod:`hwregress.store.fleet_queries`.

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        return self._read(query)


def _aware(row: dict[str, Any]) -> dict[str, Any]:
    """SQLite gives back naive times (stored as UTC): make every time of a row aware UTC, as PostgreSQL's are."""
    return {key: utc(value) if key in _TIMES and isinstance(value, _dt.datetime) else value
            for key, value in row.items()}


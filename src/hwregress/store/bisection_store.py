"""Bisections in the fleet store, probe by probe: what :class:`hwregress.store.fleet_store.Store`'s bisection methods
do, on its engine (each function takes the engine and the store's masked URL, which its errors name).

A bisection is written as it runs: its row as it starts (status ``running``), each probe's row as the probe ends, and
at its end the final JSON document, the status and the bounds, with any probe not written yet. So a bisection killed
halfway keeps its finished probes, and reads back (:func:`find_bisection`) as a document of the same shape that the
bisection page renders. Every write is idempotent: a row already there (the same id, the same probe number) is left
as it is, so a caller may retry any of them. :mod:`hwregress.store.bisection_rows` checks and converts the values
(NaN and infinity stored as None) before anything is written.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, inspect, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from hwregress.store.bisection_rows import ID_LENGTH, bisection_row, finished_rows, probe_row, running_document
from hwregress.store.store_errors import unavailable
from hwregress.store.tables import bisection_probes, bisections
from hwregress.store.times import utc

_LISTED = 10  # ids an ambiguous prefix's message names before "and N more"


def start_bisection(engine: Engine, url: str, bisection_id: str, started_at: _dt.datetime, hostname: str | None,
                    kind: str, candidates: Sequence[str], labels: Sequence[str], settings: Mapping[str, Any]) -> None:
    """Insert the row of a bisection that starts (:func:`hwregress.store.bisection_rows.bisection_row`: status
    ``running``); a bisection of that id already there is left as it is.

    Raises:
        ValueError: a value that does not fit its column (named).
        StoreUnavailable: the store cannot be reached or written.
    """
    row = bisection_row(bisection_id, started_at, hostname, kind, candidates, labels, settings)
    _write(engine, url, lambda connection: connection.execute(_insert_absent(engine, bisections).values(**row)))


def add_bisection_probe(engine: Engine, url: str, bisection_id: str, number: int, probe: Mapping[str, Any]) -> None:
    """Insert probe ``number`` (1 the first) of a bisection as it ends; a probe of that number already there is left
    as it is.

    Raises:
        ValueError: a malformed probe (:func:`hwregress.store.bisection_rows.probe_row`), or no bisection of that id
            in the store (start it first).
        StoreUnavailable: the store cannot be reached or written.
    """
    row = probe_row(bisection_id, number, probe)

    def add(connection: Connection) -> None:
        _require(connection, bisection_id)
        connection.execute(_insert_absent(engine, bisection_probes).values(**row))

    _write(engine, url, add)


def finish_bisection(engine: Engine, url: str, bisection_id: str, document: Mapping[str, Any],
                     finished_at: _dt.datetime) -> None:
    """Record a bisection's end in one transaction: its status, exit code, culprit, last good, first bad, seconds,
    ``document`` (the final JSON document, NaN and infinity as None) and ``finished_at``; and each probe of
    ``document["probes"]`` (numbered from 1 in order) not written yet. Finishing again replaces the row's values
    and adds only probes not there.

    Raises:
        ValueError: a malformed document (:func:`hwregress.store.bisection_rows.finished_rows`), or no bisection of
            that id in the store (start it first).
        StoreUnavailable: the store cannot be reached or written.
    """
    values, probes = finished_rows(bisection_id, document, finished_at)

    def finish(connection: Connection) -> None:
        _require(connection, bisection_id)
        connection.execute(update(bisections).where(bisections.c.id == bisection_id).values(**values))
        if probes:
            connection.execute(_insert_absent(engine, bisection_probes), probes)

    _write(engine, url, finish)


def list_bisections(engine: Engine, url: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The bisections, newest start first (the ``limit`` newest where given), as ``bisections`` rows without
    ``document`` (times aware UTC), each with ``probes``: how many probe rows it has; none in a store read as it is
    at a revision before the bisection tables.

    Raises:
        ValueError: a negative ``limit``.
        StoreUnavailable: the store cannot be read.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit {limit} is negative: give a number of bisections, or None for all")
    count = (select(func.count()).select_from(bisection_probes)
             .where(bisection_probes.c.bisection_id == bisections.c.id).scalar_subquery())
    query = (select(*(column for column in bisections.c if column.name != "document"), count.label("probes"))
             .order_by(bisections.c.started_at.desc(), bisections.c.id.desc()).limit(limit))

    def read(connection: Connection) -> Sequence[Mapping[str, Any]]:
        return connection.execute(query).mappings().all() if _has_bisections(connection) else []

    return [_aware(row) for row in _read(engine, url, read)]


def find_bisection(engine: Engine, url: str, id_or_prefix: str) -> dict[str, Any] | None:
    """The JSON document of the bisection whose id is ``id_or_prefix``, else the one bisection whose id starts with it
    (case-sensitive); None when there is none. A finished bisection's is the document it finished with; one that has
    not finished (killed, or still running) is rebuilt from its rows
    (:func:`hwregress.store.bisection_rows.running_document`: status ``running``, exit code None, its probes so far).
    None in a store read as it is at a revision before the bisection tables.

    Raises:
        ValueError: an empty ``id_or_prefix``, or a prefix of several bisections' ids (naming them).
        StoreUnavailable: the store cannot be read.
    """
    if not id_or_prefix:
        raise ValueError("the bisection id is empty (it would match every bisection)")
    if len(id_or_prefix) > ID_LENGTH or not id_or_prefix.isprintable():
        return None  # no id is (bisection_rows.checked_id): not sent, as a text PostgreSQL could not take may be

    def read(connection: Connection) -> dict[str, Any] | None:
        if not _has_bisections(connection):
            return None
        found = connection.execute(select(bisections.c.id).where(or_(
            bisections.c.id == id_or_prefix,
            func.substr(bisections.c.id, 1, len(id_or_prefix)) == id_or_prefix))).scalars().all()
        chosen = id_or_prefix if id_or_prefix in found else _only(found, id_or_prefix)
        if chosen is None:
            return None
        row = connection.execute(select(bisections).where(bisections.c.id == chosen)).mappings().one()
        if row["document"] is not None:
            return dict(row["document"])
        probes = connection.execute(select(bisection_probes).where(bisection_probes.c.bisection_id == chosen)
                                    .order_by(bisection_probes.c.number)).mappings().all()
        return running_document(row, probes)

    return _read(engine, url, read)


def _has_bisections(connection: Connection) -> bool:
    """False for a store read as it is at revision 0001 (by a reader: :func:`hwregress.store.database.open_store`),
    which predates the bisection tables."""
    return inspect(connection).has_table(bisections.name)


def _only(found: Sequence[str], prefix: str) -> str | None:
    if len(found) > 1:
        ids = sorted(found)
        more = f" and {len(ids) - _LISTED} more" if len(ids) > _LISTED else ""
        raise ValueError(f"the bisection id prefix {prefix!r} matches {len(ids)} bisections: "
                         f"{', '.join(ids[:_LISTED])}{more}")
    return found[0] if found else None


def _require(connection: Connection, bisection_id: str) -> None:
    if connection.execute(select(bisections.c.id).where(bisections.c.id == bisection_id)).first() is None:
        raise ValueError(f"no bisection {bisection_id!r} in the store: start_bisection writes it first")


def _insert_absent(engine: Engine, table: Any) -> Any:
    """INSERT that does nothing where a unique key is taken (PostgreSQL and SQLite's ON CONFLICT DO NOTHING)."""
    dialect = {"postgresql": postgresql, "sqlite": sqlite}.get(engine.dialect.name)
    return dialect.insert(table).on_conflict_do_nothing() if dialect else insert(table)


def _write(engine: Engine, url: str, action: Any) -> None:
    try:
        with engine.begin() as connection:
            action(connection)
    except SQLAlchemyError as error:
        raise unavailable(url, error) from None


def _read(engine: Engine, url: str, action: Any) -> Any:
    try:
        with engine.connect().execution_options(hwregress_read_only=True) as connection:
            return action(connection)
    except SQLAlchemyError as error:
        raise unavailable(url, error) from None


def _aware(row: Mapping[str, Any]) -> dict[str, Any]:
    """SQLite gives back naive times (stored as UTC): aware UTC, as PostgreSQL's are."""
    return {key: utc(value) if isinstance(value, _dt.datetime) else value for key, value in row.items()}

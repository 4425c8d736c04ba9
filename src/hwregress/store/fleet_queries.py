"""What the fleet store says about a hardware key's hosts: each host's latest median per test, the fleet a new host of
that key is judged against on its first day (:mod:`hwregress.judge.day_one`), and each session's host check.

The judge of a session reads through one :class:`FleetReader`: the sessions once, in one SELECT of the columns it
needs (:func:`judged_sessions`), and per hardware key each host's latest figure of each test, chosen in SQL
(:func:`latest_measured`: a window function, one row per host and test however long the history); the hardware keys,
the host names and the hosts' earlier checks come from the one read of the sessions.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from sqlalchemy import func, or_, select

from hwregress.store.fleet_store import Store
from hwregress.store.tables import figures, sessions

# the verdicts of figures that measured the machine: a failed, oom, skipped or invalid test's figure says nothing
MEASURED_VERDICTS = frozenset({"pass", "improvement", "regression", "new", "unstable", "env-changed",
                               "other-hardware"})


def judged_sessions(store: Store) -> list[dict[str, Any]]:
    """Every session of ``store`` as the fleet judge needs it, oldest start first (then by name): ``id``, ``name``,
    ``host_id``, ``hostname``, ``hardware_key``, ``started_at`` (aware UTC), ``interrupted``, ``machine_id`` and
    ``host_check`` (``meta``'s: the machine id or None, the session's host-check entries or ``[]``), in one SELECT.
    The two ``meta`` fields are extracted in SQL (SQLAlchemy's JSON paths: ``json_extract`` on SQLite, ``->`` on
    PostgreSQL), not the whole ``meta`` and ``environment``.

    Raises:
        StoreUnavailable: the store cannot be read.
    """
    query = select(sessions.c.id, sessions.c.name, sessions.c.host_id, sessions.c.hostname, sessions.c.hardware_key,
                   sessions.c.started_at, sessions.c.interrupted,
                   sessions.c.meta["machine_id"].as_string().label("machine_id"),
                   sessions.c.meta["host_check"].label("host_check"),
                   ).order_by(sessions.c.started_at, sessions.c.name)
    return [{**row, "host_check": row["host_check"] if isinstance(row["host_check"], list) else []}
            for row in store.read(query)]


def latest_measured(store: Store, hardware_key: str, metric: str) -> list[dict[str, Any]]:
    """Each host's latest measured figure of each test of ``hardware_key`` and ``metric``, uninterrupted sessions
    only: ``host_id``, ``test_id``, ``median`` (the figure's unit), ``session_id``, ``started_at``, ``name``. What
    :func:`latest_figures` keeps of the key's figures (a self-test holds the two equal), chosen in SQL by
    ``row_number() OVER (PARTITION BY host, test ORDER BY start DESC, name DESC)``, so the rows read are hosts x tests,
    not sessions x tests. ``median < inf`` leaves out infinity and NaN (PostgreSQL orders NaN above infinity; SQLite
    stores it NULL). Window functions: SQLite >= 3.25 (2018), PostgreSQL >= 8.4.

    Raises:
        StoreUnavailable: the store cannot be read.
    """
    rank = func.row_number().over(partition_by=(sessions.c.host_id, figures.c.test_id),
                                  order_by=(sessions.c.started_at.desc(), sessions.c.name.desc()))
    ranked = select(sessions.c.host_id, figures.c.test_id, figures.c.median, figures.c.session_id,
                    sessions.c.started_at, sessions.c.name, rank.label("rank")).join(
        sessions, sessions.c.id == figures.c.session_id).where(
        figures.c.hardware_key == hardware_key, figures.c.metric == metric, figures.c.median > 0,
        figures.c.median < math.inf, or_(figures.c.verdict.in_(sorted(MEASURED_VERDICTS)),
                                             figures.c.verdict.is_(None)),
        sessions.c.interrupted.is_(False)).subquery()
    return store.read(select(*(column for column in ranked.c if column.name != "rank")).where(ranked.c.rank == 1)
                      .order_by(ranked.c.test_id, ranked.c.host_id))


class FleetReader:
    """The fleet store as one process's day-one judge reads it: its sessions once (:func:`judged_sessions`, kept),
    each host's latest figures of a hardware key at each :meth:`latest_medians` (the judge keeps each key's). A read
    that fails is not kept: the next call reads again. Not locked: the judge calls it under its own lock."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._sessions: list[dict[str, Any]] | None = None

    def sessions(self) -> list[dict[str, Any]]:
        """The store's sessions, oldest first, as :func:`judged_sessions` gives them, read at the first call.

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        if self._sessions is None:
            self._sessions = judged_sessions(self.store)
        return self._sessions

    def latest_medians(self, hardware_key: str, metric: str = "throughput") -> dict[str, dict[str, float]]:
        """``{test_id: {host_id: median}}`` over the figures of ``hardware_key``: each host's median of ``metric``
        (the figure's unit, e.g. samples/s) from its latest session that measured the test, interrupted sessions left
        out (:func:`latest_measured`; a session filed under another key counts: a GPU session's CPU figures are filed
        under the GPU's key).

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        medians: dict[str, dict[str, float]] = {}
        for row in latest_measured(self.store, hardware_key, metric):
            medians.setdefault(row["test_id"], {})[row["host_id"]] = float(row["median"])
        return medians

    def host_names(self) -> dict[str, set[str]]:
        """``{host_id: names}``: every hostname and machine id the sessions of each host recorded (a GPU host's id is
        its GPUs' UUIDs, which its CPU tests do not carry: by these names a session knows its own host in the store).

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        names: dict[str, set[str]] = {}
        for session in self.sessions():
            known = names.setdefault(str(session["host_id"]), set())
            known.update(str(v) for v in (session["hostname"], session["machine_id"]) if v)
        return names

    def hardware_keys(self) -> list[str]:
        """The hardware keys of the store's sessions, sorted.

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        return sorted({str(s["hardware_key"]) for s in self.sessions() if s["hardware_key"]})


def latest_medians(store: Store, hardware_key: str, metric: str = "throughput") -> dict[str, dict[str, float]]:
    """:meth:`FleetReader.latest_medians` of ``store`` (its sessions read for this call only).

    Raises:
        StoreUnavailable: the store cannot be read.
    """
    return FleetReader(store).latest_medians(hardware_key, metric)


Latest = dict[tuple[str, str], dict[str, tuple[Mapping[str, Any], Mapping[str, Any]]]]


def latest_figures(sessions: Mapping[Any, Mapping[str, Any]], figures: Iterable[Mapping[str, Any]],
                   metrics: Collection[str]) -> Latest:
    """``(metric, test id) -> host id -> (figure, session)`` of each host's latest session (by start, then name) with
    a measured figure of the test: one of ``metrics``, in a session of ``sessions`` (id -> ``sessions`` row), a
    positive finite median, a verdict of :data:`MEASURED_VERDICTS` (or none recorded)."""
    out: Latest = {}
    for figure in figures:
        session = sessions.get(figure["session_id"])
        if session is None or figure.get("metric") not in metrics or not measured(figure):
            continue
        hosts = out.setdefault((figure["metric"], figure["test_id"]), {})
        held = hosts.get(session["host_id"])
        if held is None or (held[1]["started_at"], held[1]["name"]) < (session["started_at"], session["name"]):
            hosts[session["host_id"]] = (figure, session)
    return out


def measured(figure: Mapping[str, Any]) -> bool:
    """Whether a figure row measured the machine: a positive finite median, of a test that was measured."""
    median = figure.get("median")
    return (isinstance(median, (int, float)) and not isinstance(median, bool) and math.isfinite(median)
            and median > 0 and figure.get("verdict") in (*MEASURED_VERDICTS, None))

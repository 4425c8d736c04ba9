"""Which host a pushed session is filed under when one machine reaches the store under two ids: a session that names
only its hostname (a history imported from rows written before they carried the machine id, a results.json without
one) and the sessions of the same machine pushed with its machine id or GPU UUIDs. docs/store.md, 'Schema' states the
rule; inside the push's transaction (:meth:`hwregress.store.fleet_store.Store.push_rows`):

- a host is *bare* when its id is one of its hostnames (:func:`is_bare`), *stable* otherwise (GPU UUIDs, machine id);
- a session of hostname ``h`` and hardware key ``k`` has a stable owner when exactly one stable host of key ``k``
  has ``h`` among its aliases, counting the session's own host when that is stable; a bare session is filed under
  that owner, and the owner takes over the bare host ``h`` of key ``k`` where there is one (its sessions re-pointed,
  its aliases and sightings merged, its row deleted);
- no stable host, or two (two machines that share a hostname: containers, Conbench #924), or another hardware key:
  nothing is merged.

Writers serialize per hostname: SQLite's write transaction holds the file's write lock from its BEGIN IMMEDIATE
(:mod:`hwregress.store.database`); PostgreSQL's takes a transaction advisory lock on the hostname first, so that a
bare and a stable push of one machine at once cannot both miss the other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, select, text, update

from hwregress.store.tables import hosts, sessions
from hwregress.store.times import utc

# the first key of PostgreSQL's two-key advisory locks (a space apart from the migration's one-key lock): "hwho"
_HOSTNAME_LOCK = 0x6877_686F


@dataclass(frozen=True)
class SettledHost:
    """The ``hosts`` row to file the session under (``host_id`` the stable owner's where one was found, aliases and
    sightings merged with the bare host it takes over) and the id of that bare host (None: nothing to take over)."""

    host: dict[str, Any]
    taken_over: str | None


def is_bare(host_id: str, aliases: list[str]) -> bool:
    """Whether a host is known by a hostname only: its id is one of its aliases."""
    return host_id in aliases


def settle_host(connection: Connection, host: Mapping[str, Any]) -> SettledHost:
    """The host a session's ``hosts`` row (:class:`hwregress.store.session_rows.SessionRows` ``host``) is filed
    under, read in ``connection``'s transaction after taking the session's hostname's lock (see the module doc).
    The session's hostname is its host row's single alias; a row without one, or without a hardware key, is kept."""
    row = dict(host)
    if len(row["aliases"]) != 1 or not row["hardware_key"]:
        return SettledHost(row, None)
    hostname = row["aliases"][0]
    _lock_hostname(connection, hostname)
    same_key = connection.execute(select(hosts).where(hosts.c.hardware_key == row["hardware_key"])).mappings().all()
    owners = {h["host_id"] for h in same_key if hostname in h["aliases"] and not is_bare(h["host_id"], h["aliases"])}
    if not is_bare(row["host_id"], row["aliases"]):
        owners.add(row["host_id"])
    if len(owners) != 1:
        return SettledHost(row, None)
    row["host_id"] = owners.pop()
    bare = next((h for h in same_key if h["host_id"] == hostname and is_bare(h["host_id"], h["aliases"])), None)
    if bare is None or bare["host_id"] == row["host_id"]:
        return SettledHost(row, None)
    row["aliases"] = row["aliases"] + [a for a in bare["aliases"] if a not in row["aliases"]]
    row["first_seen"] = min(row["first_seen"], utc(bare["first_seen"]))
    row["last_seen"] = max(row["last_seen"], utc(bare["last_seen"]))
    return SettledHost(row, bare["host_id"])


def take_over(connection: Connection, settled: SettledHost) -> None:
    """Re-point the sessions of the bare host ``settled`` takes over to its host, and delete the bare host's row; the
    host's row must be written first (the sessions' foreign key)."""
    if settled.taken_over is None:
        return
    connection.execute(update(sessions).where(sessions.c.host_id == settled.taken_over)
                       .values(host_id=settled.host["host_id"]))
    connection.execute(delete(hosts).where(hosts.c.host_id == settled.taken_over))


def _lock_hostname(connection: Connection, hostname: str) -> None:
    if connection.dialect.name == "postgresql":  # SQLite: the transaction holds the file's write lock already
        key = int.from_bytes(hashlib.sha256(hostname.encode("utf-8")).digest()[:4], "big", signed=True)
        connection.execute(text("SELECT pg_advisory_xact_lock(:space, :key)"), {"space": _HOSTNAME_LOCK, "key": key})


"""The session's push to the fleet store at its end (``--store``, ``HWREGRESS_STORE``; by default the SQLite file
``<report-dir>/hwregress.sqlite``), after ``results.json`` is written.

A store that cannot be reached or written never costs the session its results: ``results.json`` is written first,
the session is queued as ``<report-dir>/store-queue/<session>.json`` for ``python -m hwregress store push``, one line
says so, and the exit status changes only under ``--require-store``. The store's figures are this machine's: an
interleaved A/B session (stack B against stack A) is not pushed, as it is not appended to the history. The session
also reads the store: its fleet for day-one verdicts (:func:`fleet_judge`) and its tests' history for the report's
trends (:func:`store_history`).
"""

from __future__ import annotations

import socket
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from hwregress.plugin.options import masked_option, value_of
from hwregress.plugin.provenance import machine_id
from hwregress.store.atomic import atomic_write_json
from hwregress.store.printable import one_line

if TYPE_CHECKING:
    from hwregress.judge.day_one import FleetJudge
    from hwregress.store.history_row import HistoryRow

OFF = "none"  # --store=none: no store
QUEUE_DIR = "store-queue"


def chosen_url(config: pytest.Config, environ: Mapping[str, str], report_dir: Path) -> str | None:
    """The store URL the session pushes to, or None for none (``--store=none``).

    Raises:
        pytest.UsageError: a ``--store`` (or its ini twin, or ``HWREGRESS_STORE``) that stores nothing: empty, or an
            in-memory SQLite database (:func:`hwregress.store.database.store_url`).
    """
    from hwregress.store.database import store_url
    from hwregress.store.store_errors import NoStoreUrl

    option, source = value_of(config, "hwregress_store")
    try:
        url = store_url(option, environ, report_dir, source)
    except NoStoreUrl as error:
        raise pytest.UsageError(str(error)) from None
    return None if url.strip().lower() == OFF else url


def masked_store_args(args: list[str]) -> list[str]:
    """The session's arguments with a ``--store`` URL's secrets (its password, a ``?password=``) shown as ``***``
    (results.json, the store: :func:`hwregress.store.database.masked`)."""
    from hwregress.store.database import masked

    return masked_option(args, "--store", masked)


@dataclass(frozen=True)
class PushReport:
    """What the push did: ``line`` for the terminal; ``failed`` when the session is queued instead of stored."""

    line: str
    failed: bool


def push_session(results: Mapping[str, Any], url: str, report_dir: Path) -> PushReport:
    """Push ``results`` (a ``results.json`` document) to the store at ``url``; on failure queue it under
    ``report_dir`` (:data:`QUEUE_DIR`). Never raises for a store's failure."""
    from hwregress.store.database import masked, open_store
    from hwregress.store.store_errors import StoreUnavailable

    try:
        store = open_store(url)
        try:
            outcome = store.push(results)
        finally:
            store.close()
    except (StoreUnavailable, ValueError) as error:
        return PushReport(_queued(results, report_dir, str(error), masked(url)), failed=True)
    said = "pushed" if outcome.inserted else "already there"
    session = one_line(results["meta"].get("session"))
    return PushReport(f"store: session {session} {said} ({outcome.figures} figures) in {masked(url)}", failed=False)


def _queued(results: Mapping[str, Any], report_dir: Path, error: str, shown: str) -> str:
    session = str(results.get("meta", {}).get("session") or "session")
    target = report_dir / QUEUE_DIR / f"{session}.json"
    try:
        atomic_write_json(target, dict(results))
    except OSError as write_error:
        return (f"store not written: {error}; not queued either ({write_error}): results.json holds the session, "
                f"push it later with python -m hwregress store push {report_dir / 'results.json'} --store '{shown}'")
    return (f"store not written: {error}; the session is queued in {target}: push it later with "
            f"python -m hwregress store push {target} --store '{shown}' (a password shown *** is the store's own)")


def store_history(url: str, hardware_keys: Collection[str], test_ids: Collection[str],
                  host_ids: Collection[str]) -> tuple[list[HistoryRow], str | None]:
    """This machine's history rows of ``hardware_keys`` and ``test_ids`` in the fleet store (the sessions of
    ``host_ids``: :meth:`hwregress.store.fleet_store.Store.history_by_key`) for this session's trends, and None; no rows
    and a sentence when the store cannot be read (the trends then show the history folder's sessions only). Other
    hosts' sessions are left out: a trend, its drift and an alert's "first bad session" are this machine's."""
    from hwregress.store.database import masked, open_store
    from hwregress.store.store_errors import StoreUnavailable

    try:
        store = open_store(url, reading=True)
        try:
            by_key = store.history_by_key(hardware_keys, test_ids, host_ids)
        finally:
            store.close()
    except (StoreUnavailable, ValueError) as error:  # ValueError: a row this hwregress cannot read
        return [], (f"fleet store {masked(url)} not read for the trends: {error}; they show the history folder's "
                    "sessions only")
    return [row for rows in by_key.values() for row in rows], None


def fleet_judge(url: str) -> FleetJudge:
    """The day-one judge of this process (:class:`hwregress.judge.day_one.FleetJudge`), reading the store at ``url``
    through one :class:`hwregress.store.fleet_queries.FleetReader`: its sessions once (the hardware keys, the host
    names and the hosts' earlier checks all come from that read), each hardware key's figures once; one store opened
    at the first read and kept for the process; this host known by its machine id and hostname. Nothing is read
    before a test needs it."""
    from hwregress.judge.day_one import FleetJudge

    opened: list[Any] = []

    def reader() -> Any:
        if not opened:
            from hwregress.store.database import open_store
            from hwregress.store.fleet_queries import FleetReader

            # StoreUnavailable: the judge says so, and reads again later
            opened.append(FleetReader(open_store(url, reading=True)))
        return opened[0]

    return FleetJudge(lambda key: reader().latest_medians(key),
                      {"machine_id": machine_id(), "hostname": socket.gethostname()},
                      lambda: reader().hardware_keys(), lambda: reader().host_names(), lambda: reader().sessions(),
                      peaks=lambda key: reader().latest_medians(key, "peak_memory"))

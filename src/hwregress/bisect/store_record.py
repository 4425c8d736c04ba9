"""A bisection kept in the fleet store (``--store URL``, else ``HWREGRESS_STORE``, else the SQLite file
``reports/hwregress.sqlite``; ``--store none``: not kept): its row as it starts, each probe as it ends, its document at
the end (:mod:`hwregress.store.bisection_store`), so that a bisection is a kept, shareable record
(``python -m hwregress store bisections``, ``store bisection ID -o page.html``), and one killed halfway keeps the
probes it finished.

A store that cannot be reached or written never costs the bisection anything: one line says so, and the bisection
goes on without the store (its ``bisect.json`` in the work folder holds the same record).
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hwregress.store.store_errors import StoreUnavailable

if TYPE_CHECKING:  # the store's modules import SQLAlchemy: only a bisection that keeps its record loads them
    from hwregress.store.fleet_store import Store

OFF = "none"  # --store none: the bisection is not kept in a store
DEFAULT_REPORT_DIR = "reports"  # where the default SQLite store lies, as a session's


class StoreRecord:
    """The store side of one bisection; every method is a no-op once the store has failed (or without one)."""

    def __init__(self, option: str | None, say: Callable[[str], None] = print) -> None:
        """``option``: ``--store``'s value (None: the default). Raises :class:`hwregress.store.database.NoStoreUrl`
        for an empty or in-memory URL (a usage error)."""
        from hwregress.store.database import store_url

        self.bisection_id = str(uuid.uuid4())
        self.say = say
        self.url = None if option == OFF else store_url(option, os.environ, DEFAULT_REPORT_DIR)
        self._store: Store | None = None
        self._failed = self.url is None

    def start(self, kind: str, candidates: list[str], labels: list[str], settings: Mapping[str, Any]) -> None:
        """Keep the bisection's row, status ``running``."""
        self._write(lambda store: store.start_bisection(self.bisection_id, _now(), socket.gethostname(), kind,
                                                        candidates, labels, settings))

    def probe(self, number: int, probe: Mapping[str, Any]) -> None:
        """Keep probe ``number`` (1 the first) as it ended (:func:`hwregress.cli.bisect`'s probe JSON)."""
        self._write(lambda store: store.add_bisection_probe(self.bisection_id, number, probe))

    def finish(self, document: Mapping[str, Any]) -> None:
        """Keep the bisection's document, status and bounds, then close the store."""
        self._write(lambda store: store.finish_bisection(self.bisection_id, document, _now()))
        if self._store is not None:
            self.say(f"store: bisection {self.bisection_id} kept in {self._store.url}")
        self.close()

    def close(self) -> None:
        """Close the store's connections; idempotent."""
        if self._store is not None:
            self._store.close()
            self._store = None

    def _write(self, write: Callable[[Store], None]) -> None:
        if self._failed:
            return
        try:
            if self._store is None:
                from hwregress.store.database import open_store

                self._store = open_store(str(self.url))
            write(self._store)
        except (StoreUnavailable, ValueError) as error:
            self._failed = True
            self.close()
            self.say(f"store: not kept ({error}); bisect.json in the work folder holds the record")


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)

"""A session's results on disk: ``results.json`` and its archive copy ``archive/results-<stem>.json``, written here,
before any rendering, so that a report that cannot be rendered (a template error, a value the page cannot show)
never costs the results. The report (:mod:`hwregress.report`) only reads them and writes its own page under the same
stem (``archive/report-<stem>.html``).
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwregress.store.archive import archive_stem, free_archive_stem
from hwregress.store.atomic import atomic_write_json
from hwregress.store.history import parse_time
from hwregress.store.results import SessionResults

RESULTS_FILE = "results.json"
ARCHIVE_FOLDER = "archive"
# the session's copies under archive/, by the key the collector lists them under; {} is the session's stem
ARCHIVE_COPIES = {"results archive": "results-{}.json", "report archive": "report-{}.html"}


@dataclass(frozen=True)
class WrittenResults:
    """Where :func:`write_results` put a session's results, and the stem its report's archive copy takes."""

    paths: dict[str, Path]  # "results" and "results archive"
    stem: str


def session_stem(meta: dict[str, Any], archive: Path) -> str:
    """``<start>-<session>`` of a session's archive copies (:func:`hwregress.store.archive.archive_stem`): its start
    (``meta["started_at"]``; now when absent or unreadable) and its id (``meta["session"]``, ``host-pid-start``;
    ``host-pid`` when absent), as a dead session's journal is archived. The id keeps apart sessions that write into
    one report folder in the same second; a stem already taken in ``archive`` by either copy (one session written
    twice) gets ``-1``, ``-2``, ... (:func:`hwregress.store.archive.free_archive_stem`)."""
    started = parse_time(meta["started_at"]) if isinstance(meta.get("started_at"), str) else None
    session = str(meta.get("session") or f"{socket.gethostname()}-{os.getpid()}")
    stem = archive_stem(started or _dt.datetime.now(_dt.timezone.utc), session)
    return free_archive_stem(archive, stem, list(ARCHIVE_COPIES.values()))


def archive_copy(report_dir: Path, key: str, stem: str) -> Path:
    """The path of the archive copy ``key`` (a key of :data:`ARCHIVE_COPIES`) of the session with ``stem``."""
    return report_dir / ARCHIVE_FOLDER / ARCHIVE_COPIES[key].format(stem)


def write_results(results: SessionResults, report_dir: Path) -> WrittenResults:
    """Write ``results.json`` under ``report_dir`` and its copy under ``report_dir/archive/``, each atomically.

    Raises:
        OSError: a file cannot be written, or is not a regular file (``NotARegularFileError``).
        ValueError: a value JSON cannot hold (see :func:`hwregress.store.atomic.atomic_write_json`).
    """
    data = results.to_json()
    stem = session_stem(results.meta, report_dir / ARCHIVE_FOLDER)
    paths = {"results": report_dir / RESULTS_FILE, "results archive": archive_copy(report_dir, "results archive", stem)}
    for path in paths.values():
        atomic_write_json(path, data)
    return WrittenResults(paths, stem)

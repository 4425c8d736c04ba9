"""The names of what a session leaves under ``<report-dir>/archive/``: its results and report copies
(``results-<stem>.json``, ``report-<stem>.html``) and a dead session's journal (``results-<stem>-unfinished.jsonl``),
all named by one stem, ``<start>-<session>``, so a session's files sort by time and sessions that start in the same
second stay apart. A stem already taken (one session written twice) gets ``-1``, ``-2``, ...
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Sequence
from pathlib import Path

from hwregress.store.atomic import safe_file_name

SESSION_CHARACTERS = 100  # the last characters of a session id kept in a file name (its start and pid are at its end)


def archive_stem(started_at: _dt.datetime, session: str) -> str:
    """``<YYYYmmdd-HHMMSS>-<session>``: the session's start (an aware time, written in UTC) and its id as a file name
    (:func:`hwregress.store.atomic.safe_file_name`, its last ``SESSION_CHARACTERS`` characters)."""
    return f"{started_at.astimezone(_dt.timezone.utc):%Y%m%d-%H%M%S}-{safe_file_name(session, SESSION_CHARACTERS)}"


def free_archive_stem(archive: Path, stem: str, patterns: Sequence[str]) -> str:
    """The first of ``stem``, ``stem-1``, ``stem-2``, ... with which no name of ``patterns`` (each with ``{}`` where
    the stem goes, e.g. ``results-{}.json``) is taken in the folder ``archive`` (a link to nothing counts as taken)."""
    name, index = stem, 0
    while any(os.path.lexists(archive / pattern.format(name)) for pattern in patterns):
        index += 1
        name = f"{stem}-{index}"
    return name

"""``python -m hwregress history append ARCHIVED.jsonl... [--dir reports/history]``: bring the finished records of
journals that sessions left behind (``reports/archive/results-*-unfinished.jsonl``) into the history, as a session
does at its start for the journals it archives (:func:`hwregress.store.recovery.append_to_history`): with the dead
session's id, start time and hwregress version, marked interrupted, and never twice (a row whose session id and test
id the history holds already is not appended again), so journals archived by older hwregress versions can still reach
the history. The journal of a session still running is refused: that session appends its own rows.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hwregress.cli.common import CliError, history_store, require_regular
from hwregress.store.journal import JournalError, JournalRead, read_journal, session_is_writing
from hwregress.store.printable import one_line
from hwregress.store.recovery import append_to_history

JOURNAL_FIX = "give a journal a session left: reports/archive/results-*-unfinished.jsonl"


def append_journals(args: argparse.Namespace) -> int:
    """``history append``: every journal of ``args.journals`` read first (one error names a bad one and nothing is
    appended), then each appended to the history folder ``args.dir``, one line each on stdout. Exit status 0.

    Raises:
        hwregress.cli.common.CliError: a journal cannot be read, holds no journal line or is still being written by a
            running session; no such history folder.
    """
    store = history_store(args.dir)
    journals = [(Path(name), _read(Path(name))) for name in args.journals]
    for path, journal in journals:
        recovered = append_to_history(journal, store)
        how = "interrupted" if recovered.interrupted else "closed"
        present = recovered.rows - recovered.appended
        print(f"{path}: session {one_line(recovered.session)} (started {one_line(recovered.started_at)}, {how}): "
              f"{recovered.appended} rows appended to {args.dir}" + (f", {present} already there" if present else ""))
    return 0


def _read(path: Path) -> JournalRead:
    require_regular(path, "a journal")
    try:
        writing = session_is_writing(path)
    except OSError as error:
        raise CliError(path, f"cannot tell whether a session still writes it: {error.strerror or error}",
                       "check the permissions of its folder") from None
    if writing:
        raise CliError(path, "a running session is still writing it", "let that session end: it appends its own rows "
                       "to its history, and a journal it leaves is archived and appended by the next session")
    try:
        journal = read_journal(path)
    except JournalError as error:
        raise CliError(path, str(error), JOURNAL_FIX) from None
    meta = journal.results.meta
    if not journal.results.records and not {"session", "died_in", "closed_at"} & set(meta):
        raise CliError(path, f"is not a hwregress journal (none of its {meta['skipped_lines']} lines is a journal "
                             "line)", JOURNAL_FIX)
    return journal

"""``python -m hwregress history append ARCHIVED.jsonl... [--dir reports/history]``: bring the finished records of
journals that sessions left behind (``reports/archive/results-*-unfinished.jsonl``) into the history, as a session
does at its start for the journals it archives (:func:`hwregress.store.journal.append_to_history`): with the dead
session's id and start time, marked interrupted, and never twice (a row whose session id and test id the history
holds already is not appended again), so journals archived by older hwregress versions can still reach the history.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hwregress.cli.common import CliError, history_store, require_regular
from hwregress.store.journal import JournalError, append_to_history, load_journal
from hwregress.store.results import SessionResults

JOURNAL_FIX = "give a journal a session left: reports/archive/results-*-unfinished.jsonl"


def append_journals(args: argparse.Namespace) -> int:
    """``history append``: every journal of ``args.journals`` read first (one error names a bad one and nothing is
    appended), then each appended to the history folder ``args.dir``, one line each on stdout. Exit status 0.

    Raises:
        hwregress.cli.common.CliError: a journal cannot be read or holds no journal line; no such history folder.
    """
    store = history_store(args.dir)
    journals = [(Path(name), _read(Path(name))) for name in args.journals]
    for path, results in journals:
        recovered = append_to_history(path, results, store)
        how = "interrupted" if recovered.interrupted else "closed"
        present = recovered.rows - recovered.appended
        print(f"{path}: session {recovered.session} (started {recovered.started_at}, {how}): {recovered.appended} "
              f"rows appended to {args.dir}" + (f", {present} already there" if present else ""))
    return 0


def _read(path: Path) -> SessionResults:
    require_regular(path, "a journal")
    try:
        results = load_journal(path)
    except JournalError as error:
        raise CliError(path, str(error), JOURNAL_FIX) from None
    meta = results.meta
    if not results.records and "session" not in meta and "died_in" not in meta and "closed_at" not in meta:
        raise CliError(path, f"is not a hwregress journal (none of its {meta['skipped_lines']} lines is a journal "
                             "line)", JOURNAL_FIX)
    return results

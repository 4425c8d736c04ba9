"""``python -m hwregress report merge|render|compare``: several machines' results side by side in one HTML page, or
one results file (or what is readable of an unfinished session's journal) as a page, with trend charts from history
folders and the fleet store when given (``--history-dir``, ``--store``); ``compare`` (:mod:`hwregress.cli.compare`)
judges one session against another. Jinja2 is imported only when a page is rendered."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hwregress.cli.common import (
    CliError,
    command_inputs,
    history_store,
    load_results,
    output_path,
    require_regular,
    write_output,
)
from hwregress.cli.compare import add_compare_parser
from hwregress.cli.store_source import (
    add_host_option,
    add_store_option,
    check_host_option,
    host_ids,
    reading_store,
    resolved_url,
)
from hwregress.store import results as results_module
from hwregress.store.journal import JournalError, load_journal


def cmd_merge(args: argparse.Namespace) -> int:
    """``report merge``: several results files side by side in one HTML page."""
    from hwregress.report import render_merge

    output = output_path(args.output, _inputs(args, args.results))
    sessions = [load_results(Path(path)) for path in args.results]
    history = _history_section(args, sessions)
    write_output(output, render_merge(results_module.merge_sessions(sessions), history))
    print(f"wrote {output} ({len(sessions)} machines)")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    """``report render``: one results file, or what is readable of a journal, as an HTML page."""
    from hwregress.report import render

    source = Path(args.source)
    output = output_path(args.output, _inputs(args, [args.source]))
    if source.suffix == ".jsonl":
        require_regular(source, "a journal (.jsonl)")
        try:
            session = load_journal(source)
        except JournalError as error:
            raise CliError(source, str(error), "give the .jsonl journal an unfinished session left") from None
    else:
        session = load_results(source)
    write_output(output, render(session, _history_section(args, [session])))
    skipped = session.meta.get("skipped_lines") or 0
    note = f"; skipped {skipped} unreadable lines of {source}" if skipped else ""
    print(f"wrote {output} ({len(session.records)} tests{note})")
    return 0


def _inputs(args: argparse.Namespace, files: Sequence[str]) -> Any:
    """The files the command reads (results, history folders, a SQLite store's files): the output must not be one."""
    if args.store is None:
        return command_inputs(files, args.history_dir)
    from hwregress.store.database import sqlite_files

    return command_inputs([*files, *sqlite_files(resolved_url(args.store))], args.history_dir)


def _history_section(args: argparse.Namespace, sessions: Sequence[results_module.SessionResults]) -> Any:
    """The trend section for the tests of ``sessions`` from the history folders and the fleet store given (a session
    in both counted once; None without either)."""
    check_host_option(args)
    if args.host and args.history_dir:
        raise CliError("--host and --history-dir", "--host picks a runner's sessions of the store, and a history "
                       "folder does not say which runner wrote a row", "give that runner's own folder with "
                       "--history-dir, or --store with --host")
    if not args.history_dir and args.store is None:
        return None
    from hwregress.judge.trends import load_trends
    from hwregress.report.history_view import HistorySection

    keys = {r.hardware_key for s in sessions for r in s.records if r.hardware_key}
    test_ids = {r.test_id for s in sessions for r in s.records}
    stored, sources = [], [str(d) for d in args.history_dir]
    if args.store is not None:
        with reading_store(resolved_url(args.store)) as store:
            by_key = store.history_by_key(keys, test_ids, host_ids(store, args.host))
            stored = [row for rows in by_key.values() for row in rows]
            sources.append(store.url + (f" (host {', '.join(args.host)})" if args.host else ""))
    trends, warnings = load_trends([history_store(d) for d in args.history_dir], keys, test_ids, more_rows=stored)
    return HistorySection(trends, warnings, sources)


def add_commands(commands: argparse._SubParsersAction) -> None:
    """The ``report`` command and its ``merge`` and ``render`` actions."""
    report = commands.add_parser("report", help="render reports").add_subparsers(dest="action", required=True)
    merge = report.add_parser("merge", help="several machines' results.json side by side in one page")
    merge.add_argument("results", nargs="+", help="results.json files")
    merge.add_argument("-o", "--output", required=True, help="the HTML file to write")
    merge.add_argument("--history-dir", type=Path, action="append", default=[],
                       help="add trend charts from this history folder (repeatable: one per machine's history)")
    add_store_option(merge, "the trend charts' sessions (with or without --history-dir)")
    add_host_option(merge)
    merge.set_defaults(handler=cmd_merge)
    render = report.add_parser("render", help="render one results.json, or the journal of an unfinished session")
    render.add_argument("source", help="results.json or results-*-unfinished.jsonl")
    render.add_argument("-o", "--output", required=True, help="the HTML file to write")
    render.add_argument("--history-dir", type=Path, action="append", default=[],
                        help="add trend charts from this history folder")
    add_store_option(render, "the trend charts' sessions (with or without --history-dir)")
    add_host_option(render)
    render.set_defaults(handler=cmd_render)
    add_compare_parser(report)

"""``python -m hwregress store bisections|bisection``: the bisections the fleet store keeps, probe by probe
(:mod:`hwregress.store.bisection_store`), read as every reader reads the store
(:func:`hwregress.cli.store_source.reading_store`: a SQLite file that is not there is an error, never created).

    store bisections [--last N]        one line per bisection, newest first: the first 12 characters of its id, its
                                       start (UTC), kind, status, culprit (its label; "–" none), probes (and seconds,
                                       once finished)
    store bisection ID [-o PAGE.html] [--json FILE]
                                       one bisection, by its id or the start of it: its page
                                       (hwregress.report.bisect_view) and/or its JSON document; neither: its summary.
                                       One that never finished (killed) is its probes so far, status "running"
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any

from hwregress.cli.bisect import candidate_labels, probes_text, summary
from hwregress.cli.common import CliError, command_inputs, output_path, write_output
from hwregress.cli.store_source import cli_store_url, reading_store
from hwregress.store.metrics import finite_number
from hwregress.store.printable import one_line
from hwregress.store.times import utc

ACTIONS = ("bisections", "bisection")
ID_SHOWN = 12  # characters of an id a line shows: a UUID's first 11 hex digits tell a store's bisections apart
LIST_FIX = "give an id, or the start of one, that python -m hwregress store bisections lists"


def cmd_bisections(args: argparse.Namespace) -> int:
    """``store bisections`` and ``store bisection``: see the module doc. Exit status 0.

    Raises:
        hwregress.cli.common.CliError: a store that cannot be opened or read, a SQLite store that is not there, no
            bisection of the id, an id prefix of several (naming them), an output that cannot be written, a stored
            document the page cannot draw.
    """
    url = cli_store_url(args.store)
    if args.action == "bisections":
        with reading_store(url) as store:
            rows = store.bisections(args.last)
        for row in rows:
            print(bisection_line(row))
        if not rows:
            print(f"no bisection in {store.url}")
        return 0
    return _show(url, args)


def _show(url: str, args: argparse.Namespace) -> int:
    """Write the page and/or the JSON of bisection ``args.id``, or print its summary."""
    from hwregress.store.database import sqlite_files

    store_files = [str(path) for path in sqlite_files(url)]
    page = output_path(args.output, command_inputs(store_files)) if args.output is not None else None
    json_path = output_path(args.json, command_inputs(store_files)) if args.json is not None else None
    if page is not None and json_path is not None and os.path.realpath(page) == os.path.realpath(json_path):
        raise CliError(json_path, "is the page -o writes too", "give --json and -o two different files")
    with reading_store(url) as store:
        try:
            document = store.bisection(args.id)
        except ValueError as error:
            raise CliError(store.url, str(error), LIST_FIX) from None
    if document is None:
        raise CliError(store.url, f"no bisection {args.id!r} in the store", LIST_FIX)
    if page is not None:
        from hwregress.report.bisect_view import render_bisection

        try:
            html = render_bisection(document)
        except ValueError as error:
            raise CliError(store.url, f"bisection {args.id!r}: {error}",
                           "its stored document is malformed: read it with --json, or re-run the bisection") from None
        write_output(page, html)
        print(f"{page}: bisection page ({one_line(document.get('status'))}, {probes_text(document)})")
    if json_path is not None:
        write_output(json_path, json.dumps(document, indent=2) + "\n")
        print(f"{json_path}: bisection document ({one_line(document.get('status'))}, {probes_text(document)})")
    if page is None and json_path is None:
        for line in summary(document):
            print(line)
    return 0


def bisection_line(row: Mapping[str, Any]) -> str:
    """One bisection of :meth:`hwregress.store.fleet_store.Store.bisections` as a line: id (its first
    :data:`ID_SHOWN` characters), start (UTC), kind, status, culprit's label ("–": none), probes and seconds."""
    ran = f"{row['probes']} probe{'' if row['probes'] == 1 else 's'}"
    if finite_number(row.get("seconds")) is not None:
        ran += f", {row['seconds']:.0f} s"
    culprit = candidate_labels(row).get(row["culprit"], row["culprit"]) if row["culprit"] is not None else "–"
    return "  ".join([one_line(row["id"][:ID_SHOWN]), utc(row["started_at"]).strftime("%Y-%m-%d %H:%M:%SZ"),
                      one_line(row["kind"]), one_line(row["status"]), one_line(culprit), ran])


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def add_actions(actions: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:
    """The ``bisections`` and ``bisection`` actions of ``store``; returns their parsers (``store`` gives each its
    ``--store`` and handler)."""
    listed = actions.add_parser("bisections", help="the bisections stored, newest first, one line each")
    listed.add_argument("--last", type=_count, default=None, metavar="N", help="the N newest only (default: all)")
    shown = actions.add_parser("bisection", help="one stored bisection: its page, its JSON or its summary")
    shown.add_argument("id", metavar="ID", help="the bisection's id, or the start of it")
    shown.add_argument("-o", "--output", default=None, metavar="PAGE.html", help="write its page here")
    shown.add_argument("--json", default=None, metavar="FILE", help="write its JSON document here")
    return [listed, shown]


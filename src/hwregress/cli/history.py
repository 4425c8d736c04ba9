"""``python -m hwregress history``: per test its recent sessions from a history folder, with change points marked,
and the status of its latest segment (regression, drift, improvement); exit 1 on ``--fail-on``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hwregress.cli.common import CliError, fraction, history_store
from hwregress.cli.history_actions import add_history_actions
from hwregress.cli.store_source import (
    add_host_option,
    add_store_option,
    check_host_option,
    host_ids,
    reading_store,
    resolved_url,
)
from hwregress.judge.trends import MIN_SESSIONS, TREND_WINDOW, Trend
from hwregress.store.history import parse_time

DEFAULT_DIR = Path("reports/history")
HISTORY_FAIL_ON = {"regression": {"regression", "drift"}, "drift": {"drift"},
                   "any": {"regression", "drift", "improvement"}}


def cmd_history(args: argparse.Namespace) -> int:
    """``history``: per test its recent sessions with change points marked; exit 1 on ``--fail-on``."""
    from hwregress.cli.history_actions import check_actions, history_json, render_dashboard_file, with_status
    from hwregress.report.history_table import recorded_since, status_counts, trend_table

    _resolve_source(args)
    output = check_actions(args)
    if args.action == "append":
        from hwregress.cli.history_append import append_journals

        return append_journals(args)
    check_host_option(args)
    trends, warnings = _trends(args)
    trends = [t for t in trends if args.test is None or args.test in t.test_id]
    if args.since is not None:
        trends = [t for t in trends if any(recorded_since(row, args.since) for row in t.rows)]
    for warning in warnings:
        print(f"hwregress: warning: {warning}", file=sys.stderr)
    if not trends:
        raise CliError(args.source, "no test in the history matches" + (f" --test {args.test!r}" if args.test else "")
                       + (f" since {args.since.isoformat()}" if args.since else ""),
                       "check the filters, or run a session first")
    trends = with_status(trends, args.status)
    if output is not None:
        return render_dashboard_file(output, args, trends, warnings)
    if args.format == "json":
        store = args.source if args.store_url else None
        print(history_json(trends, warnings, args.dir and str(args.dir), args.tolerance, store))
    else:
        for trend in trends:
            print("\n".join(trend_table(trend, args.since, args.last)), end="\n\n")
        print(status_counts(trends) if trends else f"0 tests with status {', '.join(args.status)}")
    failing = [t for t in trends if args.fail_on and t.status in HISTORY_FAIL_ON[args.fail_on]]
    for trend in failing:
        print(f"hwregress: {trend.status}: {trend.hardware_key} {trend.test_id}: {trend.summary}", file=sys.stderr)
    return 1 if failing else 0


def _resolve_source(args: argparse.Namespace) -> None:
    """Where the rows come from: ``args.dir`` (default reports/history) or, with ``--store``, ``args.store_url``;
    ``args.source`` names it in messages and on the dashboard."""
    if args.store is not None and args.dir is not None:
        raise CliError("--store and --dir", "name two sources of history; the command reads one",
                       "give --store URL for the fleet store or --dir FOLDER for a history folder")
    args.store_url = None if args.store is None else resolved_url(args.store)
    if args.store_url is None:
        args.dir = args.dir or DEFAULT_DIR
        args.source = str(args.dir)
        return
    from hwregress.store.database import masked

    args.source = masked(args.store_url)


def _trends(args: argparse.Namespace) -> tuple[list[Trend], list[str]]:
    """The trends of ``--key`` (every key when none) from the history folder or the store, and the warnings of the
    rows skipped while reading; an unknown key is an error naming the known ones."""
    from hwregress.judge.trends import analyze_all, load_trends

    if args.store_url is None:
        store = history_store(args.dir)
        _check_keys(args, store.hardware_keys())
        return load_trends(store, args.key or None, tolerance=args.tolerance, window=args.window or None)
    with reading_store(args.store_url) as fleet:
        by_key = fleet.history_by_key(host_ids=host_ids(fleet, args.host))
    _check_keys(args, list(by_key))
    rows = [row for key in sorted(set(args.key or by_key)) for row in by_key[key]]
    return analyze_all(rows, args.tolerance, window=args.window or None), []


def _check_keys(args: argparse.Namespace, known: list[str]) -> None:
    unknown = [key for key in args.key or () if key not in known]
    if unknown:
        hosts = f" of host {', '.join(args.host)}" if args.host else ""
        raise CliError(args.source, f"no history for hardware key {', '.join(unknown)}{hosts}",
                       f"known{hosts}: {', '.join(known) or 'none'}" + ("; leave --host out for every runner's keys"
                                                                         if args.host else ""))


def _since(text: str) -> Any:
    moment = parse_time(text)
    if moment is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a date or time; use ISO 8601, e.g. 2026-11-01 or 2026-11-01T03:00")
    return moment


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def _window(text: str) -> int:
    if not text.isdigit() or 0 < int(text) < MIN_SESSIONS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of sessions to analyse; give {MIN_SESSIONS} or "
                                         "more, 0 for all")
    return int(text)


def _tolerance(text: str) -> float:
    value = fraction(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0, e.g. 0.05 for 5%")
    return value


def add_commands(commands: argparse._SubParsersAction) -> None:
    """The ``history`` command."""
    history = commands.add_parser("history", help="per test its recent sessions, change points and drift")
    history.add_argument("--dir", type=Path, default=None,
                         help=f"history folder (default: {DEFAULT_DIR}; not with --store)")
    add_store_option(history, "the history")
    add_host_option(history)
    history.add_argument("--key", action="append", help="hardware key (repeatable; default: every key in the folder)")
    history.add_argument("--test", help="only tests whose id contains this text")
    history.add_argument("--since", type=_since,
                         help="only sessions at or after this date (ISO 8601, UTC); the analysis still reads the "
                              "latest --window sessions")
    history.add_argument("--last", type=_positive, default=10, help="sessions shown per test (default: %(default)s)")
    history.add_argument("--window", type=_window, default=TREND_WINDOW,
                         help="the latest sessions analysed per test (default: %(default)s; 0: every session, "
                              "slower: the change-point search grows ~k^2)")
    history.add_argument("--tolerance", type=_tolerance, default=0.05,
                         help="smallest level change that sets a status (default: %(default)s)")
    history.add_argument("--fail-on", choices=sorted(HISTORY_FAIL_ON), default=None,
                         help="exit 1 when a test's latest segment is a regression or drift (regression), "
                              "a drift, or any change")
    history.set_defaults(handler=cmd_history)
    add_history_actions(history)

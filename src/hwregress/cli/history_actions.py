"""What ``python -m hwregress history`` adds to its table: ``--status`` (keep the tests of some statuses),
``--format json`` (the analysis as one JSON document on stdout), the ``render`` action (the static dashboard,
:mod:`hwregress.report.dashboard`) and the ``append`` action (journals of dead sessions into the history,
:mod:`hwregress.cli.history_append`)::

    python -m hwregress history [--dir reports/history] [--status regression|drift|changed|...]... [--format text|json]
    python -m hwregress history render [--dir reports/history] -o dashboard.html [the same filters]
    python -m hwregress history append ARCHIVED.jsonl... [--dir reports/history]

``history --dir X`` (no action) keeps printing the table. The filters (``--key``, ``--test``, ``--since``,
``--status``) select the same tests for the table, the JSON and the dashboard.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hwregress.cli.common import CliError, command_inputs, output_path, write_output
from hwregress.judge.trends import STATUSES, TREND_WINDOW, Trend, has_changed
from hwregress.store.results import _finite  # NaN and infinity as null, as results.json writes them

CHANGED = "changed"  # --status changed: every test whose history moved (hwregress.judge.trends.has_changed)
STATUS_CHOICES = (*STATUSES, CHANGED)
FORMATS = ("text", "json")
JSON_FORMAT_VERSION = 1
# the options of the table and the dashboard, and their values when not given: `history append` reads no trends
TREND_OPTIONS = {"--fail-on": ("fail_on", None), "--format": ("format", "text"), "--key": ("key", None),
                 "--test": ("test", None), "--status": ("status", None), "--since": ("since", None),
                 "--last": ("last", 10), "--tolerance": ("tolerance", 0.05), "--store": ("store", None),
                 "--window": ("window", TREND_WINDOW), "--host": ("host", None)}


def add_history_actions(history: argparse.ArgumentParser) -> None:
    """Add the ``render`` and ``append`` actions, ``-o``, ``--status`` and ``--format`` to the ``history`` parser. The
    action is an optional positional, so ``history --dir X``, ``history render --dir X -o F`` (or ``--dir X render``)
    and ``history append A.jsonl B.jsonl --dir X`` parse."""
    history.add_argument("action", nargs="?", choices=("render", "append"), default=None,
                         help="render: write the static HTML dashboard of the history to -o; append: add the finished "
                              "records of journals of sessions that died (reports/archive/results-*-unfinished.jsonl) "
                              "to the history, once (default: print the table)")
    history.add_argument("journals", nargs="*", help="the journals `history append` adds")
    history.add_argument("-o", "--output", help="the HTML file `history render` writes")
    history.add_argument("--status", action="append", choices=STATUS_CHOICES,
                         help="only tests of this status (repeatable); 'changed': every test whose history moved "
                              "(regression, drift, improvement, accepted, or a significant change point)")
    history.add_argument("--format", choices=FORMATS, default="text",
                         help="text: the table (default); json: the analysis as one JSON document on stdout")


def check_actions(args: argparse.Namespace) -> Path | None:
    """Refuse options that do not go together, and an output ``render`` may not write, before anything is read.
    Returns the file ``render`` writes (None without the action).

    Raises:
        hwregress.cli.common.CliError: ``render`` without ``-o``, ``-o`` without ``render``, ``render --format
            json``, ``append`` without a journal or with an option of the table (:data:`TREND_OPTIONS`, which it would
            ignore), a journal without ``append``, or an ``-o`` that is a file of the history folder (or would be
            read as one), a folder, a FIFO or a device (:func:`hwregress.cli.common.output_path`).
    """
    if args.action == "append" and not args.journals:
        raise CliError("history append", "needs the archived journal(s) to append",
                       "give reports/archive/results-*-unfinished.jsonl")
    for option, (name, unset) in TREND_OPTIONS.items():
        if args.action == "append" and getattr(args, name) != unset:
            raise CliError(option, "is not an option of `history append`, which appends journals and reads no trends",
                           f"leave {option} out; after appending, run python -m hwregress history {option} ...")
    if args.action != "append" and args.journals:
        raise CliError(args.journals[0], "only `history append` takes journals",
                       "add the action: python -m hwregress history append FILE.jsonl ...")

    if args.action == "render" and not args.output:
        raise CliError("history render", "needs the HTML file to write", "give -o dashboard.html")
    if args.action != "render" and args.output:
        raise CliError("-o", "only `history render` writes a file",
                       "add the action: python -m hwregress history render ...")
    if args.action == "render" and args.format != "text":
        raise CliError("--format", f"{args.format} is for the table, not the dashboard",
                       "leave --format out with render")
    if args.action != "render":
        return None
    return output_path(args.output, command_inputs(_store_files(args.store_url), [args.dir] if args.dir else []))


def _store_files(url: str | None) -> list[Path]:
    """The files of the SQLite store at ``url`` (none without ``--store``), which the output must not replace."""
    if not url:
        return []
    from hwregress.store.database import sqlite_files  # SQLAlchemy and Alembic only for a command with a store

    return sqlite_files(url)


def with_status(trends: Sequence[Trend], statuses: Sequence[str] | None) -> list[Trend]:
    """The trends whose status is one of ``statuses`` (``changed``: :func:`hwregress.judge.trends.has_changed`); all
    of them when ``statuses`` is empty or None."""
    if not statuses:
        return list(trends)
    wanted = set(statuses)
    return [t for t in trends if t.status in wanted or (CHANGED in wanted and has_changed(t))]


def history_json(trends: Sequence[Trend], warnings: Sequence[str], directory: str | None, tolerance: float,
                 store: str | None = None) -> str:
    """The analysis as JSON text: ``{"format_version", "dir", "store", "tolerance", "counts": {status: n}, "warnings",
    "tests": [...]}``, one test per (hardware key, test id), worst first, with its status, sentence, level now,
    reference, drift (fractions), slope per session (fraction), the sessions analysed and the earlier ones left out
    (``--window``), the latest session, and each change point (index of the first session after it, its time, the
    last good session's time, size as a fraction, Welch p-value, significance, the levels before and after in the
    test's unit, what changed). NaN and infinity become null.
    ``dir`` is the history folder read, ``store`` the store's URL (password masked) with ``--store``; the other null."""
    document = {
        "format_version": JSON_FORMAT_VERSION, "dir": directory, "store": store, "tolerance": tolerance,
        "counts": {status: n for status in STATUSES if (n := sum(t.status == status for t in trends))},
        "warnings": list(warnings), "tests": [trend_json(t) for t in trends],
    }
    return json.dumps(_finite(document), indent=1, ensure_ascii=False, allow_nan=False)


def trend_json(trend: Trend) -> dict[str, Any]:
    """One trend as plain JSON types (see :func:`history_json`)."""
    latest = trend.rows[-1]
    return {
        "hardware_key": trend.hardware_key, "test_id": trend.test_id, "unit": trend.unit, "status": trend.status,
        "changed": has_changed(trend), "summary": trend.summary, "sessions": len(trend.rows),
        "earlier_sessions": trend.earlier_sessions,
        "level_now": trend.level_now, "reference": trend.reference, "reference_source": trend.reference_source,
        "drift": trend.drift, "drift_p_value": trend.drift_p_value, "slope_per_session": trend.slope_per_session,
        "latest": {"session": latest.get("session"), "time": latest.get("time"), "median": latest.get("median"),
                   "verdict": latest.get("verdict"), "ratio": latest.get("ratio"),
                   "baseline_median": latest.get("baseline_median")},
        "change_points": [{"index": item.change.index, "first_bad": item.first_bad.get("time"),
                           "last_good": item.last_good.get("time"), "change": item.change.change,
                           "p_value": item.change.p_value, "significant": item.change.significant,
                           "before": item.change.before, "after": item.change.after, "differences": item.differences}
                          for item in trend.changes],
    }


def render_dashboard_file(output: Path, args: argparse.Namespace, trends: Sequence[Trend],
                          warnings: Sequence[str]) -> int:
    """``history render``: write the dashboard of ``trends`` to ``output`` (:func:`check_actions`) and say so; exit
    status 0."""
    from hwregress.report.dashboard import render_dashboard

    write_output(output, render_dashboard(trends, warnings, [args.source], args.tolerance))
    keys = len({t.hardware_key for t in trends})
    print(f"wrote {output} ({len(trends)} tests on {keys} hardware keys, {sum(has_changed(t) for t in trends)} moved)")
    return 0

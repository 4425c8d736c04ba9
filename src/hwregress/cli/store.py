"""``python -m hwregress store import|push|export|fleet|bisections|bisection``: the fleet store
(:mod:`hwregress.store.fleet_store`) from the command line, at ``--store URL`` (default: ``HWREGRESS_STORE``, else
``sqlite:///reports/hwregress.sqlite``).

    store push RESULTS.json...        each session, whole and once: "inserted" or "already present"
    store import PATH...              results.json files, history folders or history files (*.jsonl): their
                                      sessions, each pushed once (a history's rows grouped by their session; its
                                      lines that are no valid row skipped and counted, an error when none is valid)
    store export --dir DIR            the store's throughput figures as DIR/<hardware-key>.jsonl history rows, which
                                      python -m hwregress history [render] reads (rows already there are kept)
    store fleet -o FILE.html          the fleet page: one section per hardware key (--hardware-key KEY: that one),
                                      each host's latest median per test over the fleet's, outliers, defective hosts
                                      and the sessions, filterable (hwregress.report.fleet_view)
    store bisections | bisection ID   the bisections stored probe by probe: one line each, or one's page, JSON or
                                      summary (hwregress.cli.store_bisections)

Every input is read and checked before anything is written (each record of a results.json against the types
:class:`hwregress.store.results.TestRecord` declares: :func:`hwregress.store.session_rows.typed_record`); an
unreachable store is one line naming its URL (its secrets masked). ``export`` and ``fleet`` read the store as the
other readers do (:func:`hwregress.cli.store_source.reading_store`): a SQLite file that is not there is an error,
never created.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hwregress.cli import store_bisections
from hwregress.cli.common import RESULTS_FIX, CliError, command_inputs, output_path, require_regular, write_output
from hwregress.cli.store_source import REPORT_DIR, cli_store_url, reading_store
from hwregress.store.atomic import read_regular_file
from hwregress.store.history import HistoryStore, iter_history
from hwregress.store.printable import one_line
from hwregress.store.store_errors import StoreUnavailable

if TYPE_CHECKING:
    from hwregress.store.fleet_store import PushOutcome, Store
    from hwregress.store.session_rows import SessionRows

# the store's modules (SQLAlchemy, Alembic) and the fleet page's are imported by the actions that use them: every
# other command builds its parser with this module's, and never needs them


def cmd_store(args: argparse.Namespace) -> int:
    """``store push|import|export|fleet``, and ``bisections|bisection``
    (:func:`hwregress.cli.store_bisections.cmd_bisections`): see the module doc. Exit status 0.

    Raises:
        hwregress.cli.common.CliError: a missing or unreadable input, a file that is no results.json or history, a
            store that cannot be opened or written, a SQLite store to read that is not there, a ``--store`` that
            stores nothing (empty, in memory).
    """
    if args.action in store_bisections.ACTIONS:
        return store_bisections.cmd_bisections(args)
    if args.action == "fleet":
        return _fleet_page(args)
    if args.action == "export":
        from hwregress.store.database import masked

        url = cli_store_url(args.store)
        with reading_store(url) as store:
            appended = store.export_history(args.dir)
        for key, count in appended.items():
            print(f"{args.dir / (key + '.jsonl')}: {count} rows appended")
        print(f"{sum(appended.values())} rows exported to {args.dir} from {masked(url)}")
        return 0
    batches = [(path, _session_rows(Path(path), args.action)) for path in args.paths]
    with _store(args) as store:
        for path, sessions in batches:
            for rows in sessions:
                outcome = _unavailable_is_cli_error(lambda rows=rows: store.push_rows(rows))
                print(f"{path}: session {one_line(rows.session['name'])}: {_said(outcome)}")
    return 0


def _fleet_page(args: argparse.Namespace) -> int:
    """Write the fleet page of the store's keys (or ``--hardware-key``'s) to ``-o``."""
    from hwregress.report.fleet_view import build_fleet_view, hardware_keys, render_fleet
    from hwregress.store.database import masked, sqlite_files

    url = cli_store_url(args.store)
    output = output_path(args.output, command_inputs([str(f) for f in sqlite_files(url)]))
    with reading_store(url) as store:
        sessions = store.sessions()
        keys = hardware_keys(sessions)
        if not keys:
            raise CliError(masked(url), "holds no session", "push sessions first: python -m hwregress store push "
                                                             "reports/results.json --store URL")
        if args.hardware_key is not None and args.hardware_key not in keys:
            raise CliError(masked(url), f"has no session of hardware key {args.hardware_key!r}; its keys: "
                                        f"{', '.join(keys)}", "give one of them to --hardware-key, or leave it out")
        chosen = [args.hardware_key] if args.hardware_key is not None else keys
        figures = store.figures(session_ids=[s["id"] for s in sessions if s["hardware_key"] in chosen])
    views = [build_fleet_view(key, sessions, figures) for key in chosen]
    write_output(output, render_fleet(views, masked(url)))
    hosts = sum(len(view.hosts) for view in views)
    print(f"{output}: fleet page of {len(views)} hardware key(s), {hosts} host(s), from {masked(url)}")
    return 0


def _said(outcome: PushOutcome) -> str:
    if outcome.inserted:
        return f"inserted ({outcome.figures} figures)"
    return f"already present ({outcome.figures} figures), unchanged"


class _store:
    def __init__(self, args: argparse.Namespace) -> None:
        from hwregress.store.database import open_store

        url = cli_store_url(args.store)
        self.store: Store = _unavailable_is_cli_error(lambda: open_store(url))

    def __enter__(self) -> Store:
        return self.store

    def __exit__(self, *_: object) -> None:
        self.store.close()


def _unavailable_is_cli_error(action: Any) -> Any:
    try:
        return action()
    except StoreUnavailable as error:
        raise CliError(error.url, error.what, error.fix) from None


def _session_rows(path: Path, action: str) -> list[SessionRows]:
    """The sessions of one input: a results.json (push and import), a history folder or file (import only)."""
    if action == "import" and (path.is_dir() or path.suffix == ".jsonl"):
        return _history_sessions(path)
    require_regular(path, "a results.json" if action == "push" else "a results.json or a history folder")
    try:
        data = json.loads(read_regular_file(path))
    except OSError as error:
        raise CliError(path, f"cannot be read: {error.strerror or error}", "check its permissions") from None
    except (ValueError, RecursionError):
        raise CliError(path, "is not JSON, so not a results.json", RESULTS_FIX) from None
    if not isinstance(data, dict) or "records" not in data or "meta" not in data:
        raise CliError(path, "is not a results.json (no meta and records)", RESULTS_FIX)
    from hwregress.store.session_rows import MalformedResults, session_rows

    try:
        return [session_rows(data)]
    except MalformedResults as error:
        raise CliError(path, error.what, error.fix) from None


def _history_sessions(path: Path) -> list[SessionRows]:
    """The sessions of a history folder or file, by their rows' ``session``; a file's lines that are no valid row are
    skipped and counted (one warning per file: how many, and why).

    Raises:
        hwregress.cli.common.CliError: no history file in the folder, a file that cannot be read, no valid row in any
            file (naming the first line's problem), or rows that make no session.
    """
    if path.is_dir():
        files = [HistoryStore(path).path_for(key) for key in HistoryStore(path).hardware_keys()]
        if not files:
            raise CliError(path, "holds no history file (<hardware-key>.jsonl)", "give a history folder a session "
                                 "wrote, e.g. reports/history")
    else:
        require_regular(path, "a history file (<hardware-key>.jsonl)")
        files = [path]
    by_session: dict[str, list[Any]] = {}
    skipped: list[tuple[Path, int, list[str]]] = []  # (file, rows kept, its warnings)
    try:
        for file in files:
            warnings: list[str] = []
            kept = 0
            for row in iter_history(file, warnings):
                by_session.setdefault(row["session"], []).append(row)
                kept += 1
            if warnings:
                skipped.append((file, kept, warnings))
    except OSError as error:
        raise CliError(path, f"cannot be read: {error.strerror or error}", "check the files and their "
                             "permissions") from None
    if not by_session:
        raise CliError(path, _no_valid_row(path, skipped), HISTORY_FIX)
    for file, kept, warnings in skipped:
        print(f"hwregress: warning: {file}: {len(warnings)} of {_lines(kept + len(warnings))} skipped, not imported: "
              f"{_reasons(file, warnings)}")
    from hwregress.store.history_import import rows_from_history

    try:
        return [rows_from_history(rows) for rows in by_session.values()]
    except ValueError as error:
        raise CliError(path, str(error), "fix or remove the row") from None


HISTORY_FIX = "give a history file a session wrote, e.g. reports/history/<hardware-key>.jsonl"
REASONS_SHOWN = 3  # distinct reasons a file's skipped lines are summed up by; more are counted


def _no_valid_row(path: Path, skipped: list[tuple[Path, int, list[str]]]) -> str:
    """Why ``path`` gave no row: empty, or its lines' count and the first one's problem."""
    if not skipped:
        return "holds no history row: " + ("its history files are empty" if path.is_dir() else "the file is empty")
    file, _, warnings = skipped[0]
    line, why = _line_and_why(file, warnings[0])
    total = sum(len(found) for _, _, found in skipped)
    at = f"{file}:{line}" if path.is_dir() else f"line {line}"
    return f"holds no valid history row: {_lines(total)} skipped, the first at {at}: {why}"


def _reasons(file: Path, warnings: list[str]) -> str:
    """``"2 not a JSON line (...) (the first at line 3), 1 ..."``: each distinct reason, its count and first line."""
    counts: dict[str, list[int]] = {}
    for warning in warnings:
        line, why = _line_and_why(file, warning)
        counts.setdefault(why, []).append(line)
    shown = [f"{len(lines)} {why} (the first at line {lines[0]})"
             for why, lines in list(counts.items())[:REASONS_SHOWN]]
    more = len(counts) - REASONS_SHOWN
    return ", ".join(shown) + (f", and {more} other reason(s)" if more > 0 else "")


def _line_and_why(file: Path, warning: str) -> tuple[int, str]:
    """The line number and the reason of one of :func:`hwregress.store.history.iter_history`'s warnings,
    ``<file>:<line>: skipped: <why>``."""
    number, _, why = warning.removeprefix(f"{file}:").partition(": skipped: ")
    return (int(number) if number.isdigit() else 0), why


def _lines(count: int) -> str:
    return f"{count} line" + ("" if count == 1 else "s")


def add_commands(commands: argparse._SubParsersAction) -> None:
    """The ``store`` command and its actions."""
    store = commands.add_parser("store", help="the fleet store: push sessions, import histories, export")
    actions = store.add_subparsers(dest="action", required=True)
    push = actions.add_parser("push", help="store each results.json's session, once")
    push.add_argument("paths", nargs="+", metavar="RESULTS_JSON")
    imported = actions.add_parser("import", help="store the sessions of results.json files and history folders")
    imported.add_argument("paths", nargs="+", metavar="PATH")
    export = actions.add_parser("export", help="the store's throughput figures as history files")
    export.add_argument("--dir", type=Path, required=True, help="history folder to write <hardware-key>.jsonl into")
    fleet = actions.add_parser("fleet", help="the fleet page: hosts side by side per test, outliers, defective hosts")
    fleet.add_argument("--hardware-key", default=None, metavar="KEY", help="only this key's section (default: all)")
    fleet.add_argument("-o", "--output", required=True, metavar="FILE.html", help="the page to write")
    for parser in (push, imported, export, fleet, *store_bisections.add_actions(actions)):
        parser.add_argument("--store", default=None, metavar="URL",
                            help="SQLAlchemy URL of the store (default: HWREGRESS_STORE, else "
                                 f"sqlite:///{REPORT_DIR}/hwregress.sqlite)")
        parser.set_defaults(handler=cmd_store)

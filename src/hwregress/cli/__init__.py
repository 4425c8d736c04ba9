"""``python -m hwregress``: inspect and compare baselines, merge several machines' results into one page.

    python -m hwregress baselines list [--dir baselines]
    python -m hwregress baselines show KEY|FILE [--dir baselines]
    python -m hwregress baselines diff A B [--tolerance F] [--fail-on regression|improvement|any]
                                          (each a baselines file, a hardware key or a results.json)
    python -m hwregress report merge RESULTS.json... -o FILE.html [--history-dir DIR]...
    python -m hwregress report render RESULTS.json|UNFINISHED.jsonl -o FILE.html [--history-dir DIR]
    python -m hwregress history [--dir reports/history] [--key K]... [--test SUBSTRING] [--since DATE]
                                [--last N] [--tolerance 0.05] [--fail-on regression|drift|any]

Every error is one line ``hwregress: <file>: <what> (<fix>)`` on stderr and exit status 2. ``baselines diff``
exits 1 when a test's direction matches ``--fail-on``;
``history`` exits 1 when a test's latest segment matches ``--fail-on`` (``regression``: a regression or a drift).
Outputs are written atomically and never over an input.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwregress.judge.compare import Tolerances, is_cpu_entry, starting_tolerance
from hwregress.judge.stats import compare, summarize
from hwregress.store import results as results_module
from hwregress.store.atomic import atomic_write_text, describe_kind, read_regular_file
from hwregress.store.baselines import BaselineError, BaselineFile, BaselineStore, entry_key, load_file
from hwregress.store.history import HistoryStore, parse_time
from hwregress.store.journal import JournalError, dataclass_values, load_journal, record_problem

FAIL_ON = {"regression": {"regression"}, "improvement": {"improvement"}, "any": {"regression", "improvement"}}
HISTORY_FAIL_ON = {"regression": {"regression", "drift"}, "drift": {"drift"}, "any": {"regression", "drift", "improvement"}}
RESULTS_FIX = "give a results.json written by hwregress, or re-run the session that wrote it"


class CliError(Exception):
    """A user error, printed as ``hwregress: <file>: <what> (<fix>)``; exit status 2."""

    def __init__(self, file: str | os.PathLike[str], what: str, fix: str) -> None:
        what = str(what)
        prefix = f"{file}: "
        while what.startswith(prefix):  # messages from the library already name the file: say it once
            what = what[len(prefix):]
        super().__init__(f"{file}: {what} ({fix})")


# -- inputs ------------------------------------------------------------------------------------------------
def _require_regular(path: Path, what: str) -> None:
    """Refuse a missing path, a folder or a device before anything tries to read it."""
    try:
        mode = path.stat().st_mode
    except OSError as error:
        raise CliError(path, f"cannot open: {error.strerror or error}", f"give the path of {what}") from None
    if not stat.S_ISREG(mode):
        raise CliError(path, f"is {describe_kind(mode)}, not a file", f"give the path of {what}")


def _baseline_file(argument: str, directory: Path) -> BaselineFile:
    path = Path(argument)
    if not (path.exists() or path.is_symlink()):
        path = BaselineStore(directory).path_for(argument)
    if not (path.exists() or path.is_symlink()):
        known = ", ".join(BaselineStore(directory).hardware_keys()) or "none"
        raise CliError(argument, f"no such baselines file or hardware key in {directory}",
                       f"known: {known}; or give --dir")
    return load_file(path)


def _load_results(path: Path) -> results_module.SessionResults:
    """A results file, every record of it checked against the types :class:`TestRecord` declares."""
    _require_regular(path, "a results.json")
    try:
        session = results_module.load(path)
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as error:
        raise CliError(path, str(error) or type(error).__name__, RESULTS_FIX) from None
    for index, record in enumerate(session.records):
        problem = record_problem(dataclass_values(record))
        if problem is not None:
            raise CliError(path, f"record {index} ({record.test_id}) is malformed: {problem}", RESULTS_FIX)
    return session


def _is_results_file(path: Path) -> bool:
    try:
        data = json.loads(read_regular_file(path))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "records" in data and "entries" not in data


# -- outputs -----------------------------------------------------------------------------------------------
def _output_path(output: str, inputs: Sequence[str]) -> Path:
    """Where to write: a file path that is none of the inputs, through any link or relative spelling."""
    if not output.strip():
        raise CliError("-o", "the output path is empty", "give the HTML file to write, e.g. -o report.html")
    path = Path(output)
    if path.is_dir():
        raise CliError(path, "is a folder", f"give a file inside it, e.g. -o {path / 'report.html'}")
    for source in inputs:
        if _same_file(path, Path(source)):
            raise CliError(output, f"is the input {source}", "choose another -o: an output never overwrites an input")
    return path


def _same_file(first: Path, second: Path) -> bool:
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        return os.path.samefile(first, second)  # hard links
    except OSError:
        return False


def _write_output(path: Path, text: str) -> None:
    try:
        atomic_write_text(path, text)
    except OSError as error:
        raise CliError(path, f"cannot be written: {error.strerror or error}",
                       "check the folder exists, is writable and has free space") from None


# -- baselines list / show ---------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    """``baselines list``: one row per baselines file; exit 2 when a file or an entry is unreadable."""
    store = BaselineStore(args.dir)
    listing, errors = store.scan(), []
    for note in listing.skipped:
        print(note)
    if not listing.keys:
        print(f"no baselines files in {args.dir}")
        return 0
    print(f"{'hardware key':<40} {'device':<32} {'entries':>7} {'bad':>4}  recorded")
    for key in listing.keys:
        try:
            baseline = store.load(key)
        except BaselineError as error:
            print(f"{key:<40} UNREADABLE (see below)")
            errors.append(str(error))
            continue
        assert baseline is not None
        stamps = sorted(str(e.get("recorded_at") or "") for e in baseline.entries.values())
        span = f"{stamps[0]} .. {stamps[-1]}" if stamps else "-"
        print(f"{key:<40} {baseline.device_name[:32]:<32} {len(baseline.entries):>7} {len(baseline.bad_entries):>4}  {span}")
        errors.extend(baseline.bad_entries.values())
    return _report_errors(errors)


def cmd_show(args: argparse.Namespace) -> int:
    """``baselines show``: the valid entries of one file; exit 2 (one stderr line each) for bad entries."""
    baseline = _baseline_file(args.target, args.dir)
    print(f"{baseline.hardware_key} — {baseline.device_name} — {len(baseline.entries)} entries")
    print(f"{'test':<52} {'median':>12} {'unit':<10} {'IQR/med':>8} {'n':>4} {'peak MiB':>9} {'torch':<14} recorded")
    for key, entry in sorted(baseline.entries.items()):
        median = entry.get("median") if entry.get("median") is not None else entry.get("accuracy")
        rel = (entry["iqr"] / entry["median"]) if entry.get("iqr") is not None and entry.get("median") else None
        peak = entry.get("peak_memory_bytes")
        print(f"{key:<52} {_fmt(median):>12} {entry.get('unit') or ''!s:<10} {_fmt(rel):>8} {_fmt(entry.get('n')):>4} "
              f"{_fmt(peak / 2**20 if peak is not None else None):>9} {entry.get('environment', {}).get('torch')!s:<14} "
              f"{entry.get('recorded_at') or '-'}")
    return _report_errors(list(baseline.bad_entries.values()))


def _report_errors(errors: Sequence[str]) -> int:
    for error in errors:
        print(f"hwregress: {error}", file=sys.stderr)
    return 2 if errors else 0


# -- baselines diff ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DiffRow:
    """One test of ``baselines diff``: A is the reference, B the candidate (ratio = B / A, higher is better).

    Attributes:
        basis: ``"samples"`` (Mann-Whitney, :func:`hwregress.judge.stats.compare`), ``"medians only"``,
            ``"accuracy only"`` or why nothing could be compared.
        p_value: one-sided p-value in the direction of the change (None without samples).
    """

    key: str
    a: float | None
    b: float | None
    ratio: float | None
    threshold: float | None
    p_value: float | None
    direction: str
    basis: str


def diff_row(key: str, a: dict[str, Any], b: dict[str, Any], tolerance: float | None, tolerances: Tolerances) -> DiffRow:
    """Compare entry ``b`` against reference entry ``a`` with the rule the tests use: the starting tolerance
    of :func:`hwregress.judge.compare.starting_tolerance` (``tolerance`` when given, else A's device default, raised to
    the cap while A holds fewer than three sessions), then, with samples on both sides, ``stats.compare(b samples,
    a samples, ..., history=a's history)``; otherwise medians compare by ratio against that tolerance,
    accuracies by ``tolerances.accuracy_margin``."""
    median_a, median_b = _median(a), _median(b)
    tolerance, _ = starting_tolerance(a, is_cpu_entry(a), tolerances, tolerance)
    if a.get("samples") and b.get("samples"):
        try:
            result = compare(b["samples"], a["samples"], tolerance, alpha=tolerances.alpha, z=tolerances.z,
                             history=a.get("history") or (), max_threshold=tolerances.max_threshold)
        except ValueError as error:
            return DiffRow(key, median_a, median_b, None, None, None, "n/a", f"not comparable: {error}")
        p_value = result.p_slower if result.ratio < 1 else result.p_faster
        return DiffRow(key, median_a, median_b, result.ratio, result.threshold, p_value, result.direction, "samples")
    if median_a and median_b is not None:
        ratio = median_b / median_a
        return DiffRow(key, median_a, median_b, ratio, tolerance, None, _direction(ratio - 1, tolerance), "medians only")
    accuracy_a, accuracy_b = a.get("accuracy"), b.get("accuracy")
    if isinstance(accuracy_a, (int, float)) and isinstance(accuracy_b, (int, float)):
        direction = _direction(accuracy_b - accuracy_a, tolerances.accuracy_margin)
        return DiffRow(key, accuracy_a, accuracy_b, accuracy_b / accuracy_a if accuracy_a else None,
                       tolerances.accuracy_margin, None, direction, "accuracy only")
    return DiffRow(key, median_a, median_b, None, None, None, "n/a", "no figure on both sides")


def _direction(change: float, threshold: float) -> str:
    return "regression" if change < -threshold else "improvement" if change > threshold else "none"


def _median(entry: dict[str, Any]) -> float | None:
    if isinstance(entry.get("median"), (int, float)):
        return float(entry["median"])
    try:
        return summarize(entry["samples"]).median if entry.get("samples") else None
    except (ValueError, TypeError):
        return None


def _entries_of(argument: str, directory: Path) -> tuple[str, dict[str, dict[str, Any]], list[str]]:
    """(label, "hardware:entry key" -> entry, errors of bad entries) of a baselines file, a hardware key or
    a results.json (its records as entries: samples, median = throughput, accuracy)."""
    path = Path(argument)
    if path.exists() and _is_results_file(path):
        session = _load_results(path)
        entries = {}
        for r in session.records:
            if r.model and r.mode and r.batch_size and r.dtype:
                key = f"{r.hardware_key}:{entry_key(r.family, r.model, r.mode, r.batch_size, r.dtype)}"
                entries[key] = {"median": r.throughput, "unit": r.unit, "samples": r.samples, "accuracy": r.accuracy}
        return f"{path} ({results_module.machine_label(session)})", entries, []
    baseline = _baseline_file(argument, directory)
    entries = {f"{baseline.hardware_key}:{k}": v for k, v in baseline.entries.items()}
    return f"{argument} ({baseline.hardware_key})", entries, list(baseline.bad_entries.values())


def cmd_diff(args: argparse.Namespace) -> int:
    """``baselines diff A B``: a table of :func:`diff_row`; exit 1 when ``--fail-on`` matches, 2 on bad input."""
    label_a, a, errors_a = _entries_of(args.a, args.dir)
    label_b, b, errors_b = _entries_of(args.b, args.dir)
    strip = len({k.split(":", 1)[0] for k in a}) <= 1 and len({k.split(":", 1)[0] for k in b}) <= 1
    a_keys = {k.split(":", 1)[1] if strip else k: v for k, v in a.items()}
    b_keys = {k.split(":", 1)[1] if strip else k: v for k, v in b.items()}
    tolerances = Tolerances()
    rows = [diff_row(key, a_keys[key], b_keys[key], args.tolerance, tolerances) for key in sorted(set(a_keys) & set(b_keys))]
    given = f"--tolerance {args.tolerance:.1%}" if args.tolerance is not None else "the device default (CPU 15%, else 5%)"
    print(f"A = {label_a}\nB = {label_b}\nratio = B/A; threshold: at least {given}, the cap while A holds fewer than "
          "three sessions, more where A's noise or history asks for it")
    print(f"{'test':<52} {'A':>11} {'B':>11} {'B/A':>7} {'thresh':>7} {'p':>8}  {'direction':<11} basis")
    for row in rows:
        print(f"{row.key:<52} {_fmt(row.a):>11} {_fmt(row.b):>11} {_fmt(row.ratio):>7} {_fmt(row.threshold):>7} "
              f"{_fmt(row.p_value):>8}  {row.direction:<11} {row.basis}")
    for name, only in (("only in A", set(a_keys) - set(b_keys)), ("only in B", set(b_keys) - set(a_keys))):
        if only:
            print(f"{name}: {', '.join(sorted(only))}")
    counts = {d: sum(r.direction == d for r in rows) for d in ("regression", "improvement")}
    print(f"{counts['regression']} regressions, {counts['improvement']} improvements, {len(rows)} tests compared")
    if _report_errors(errors_a + errors_b):
        return 2
    failing = FAIL_ON.get(args.fail_on or "", set())
    return 1 if any(r.direction in failing for r in rows) else 0


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# -- report merge / render ---------------------------------------------------------------------------------
def cmd_merge(args: argparse.Namespace) -> int:
    """``report merge``: several results files side by side in one HTML page."""
    from hwregress.report import render_merge

    output = _output_path(args.output, args.results)
    sessions = [_load_results(Path(path)) for path in args.results]
    history = _history_section(args.history_dir, sessions)
    _write_output(output, render_merge(results_module.merge_sessions(sessions), history))
    print(f"wrote {output} ({len(sessions)} machines)")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    """``report render``: one results file, or what is readable of a journal, as an HTML page."""
    from hwregress.report import render

    source = Path(args.source)
    output = _output_path(args.output, [args.source])
    if source.suffix == ".jsonl":
        _require_regular(source, "a journal (.jsonl)")
        try:
            session = load_journal(source)
        except JournalError as error:
            raise CliError(source, str(error), "give the .jsonl journal an unfinished session left") from None
    else:
        session = _load_results(source)
    _write_output(output, render(session, _history_section(args.history_dir, [session])))
    skipped = session.meta.get("skipped_lines") or 0
    note = f"; skipped {skipped} unreadable lines of {source}" if skipped else ""
    print(f"wrote {output} ({len(session.records)} tests{note})")
    return 0


def _history_section(directories: Sequence[Path], sessions: Sequence[results_module.SessionResults]) -> Any:
    """The trend section for the tests of ``sessions`` from the history folders given (None without any)."""
    if not directories:
        return None
    from hwregress.judge.trends import load_trends
    from hwregress.report.history_view import HistorySection

    keys = {r.hardware_key for s in sessions for r in s.records if r.hardware_key}
    test_ids = {r.test_id for s in sessions for r in s.records}
    trends, warnings = load_trends([_history_store(d) for d in directories], keys, test_ids)
    return HistorySection(trends, warnings, [str(d) for d in directories])


def _history_store(directory: Path) -> HistoryStore:
    if not directory.is_dir():
        raise CliError(directory, "no such history folder", "give the --history-dir a session wrote (default reports/history)")
    return HistoryStore(directory)


# -- history -----------------------------------------------------------------------------------------------
def cmd_history(args: argparse.Namespace) -> int:
    """``history``: per test its recent sessions with change points marked; exit 1 on ``--fail-on``."""
    from hwregress.cli.history_table import recorded_since, status_counts, trend_table
    from hwregress.judge.trends import load_trends

    store = _history_store(args.dir)
    known = store.hardware_keys()
    unknown = [key for key in args.key or () if key not in known]
    if unknown:
        raise CliError(args.dir, f"no history for hardware key {', '.join(unknown)}", f"known: {', '.join(known) or 'none'}")
    trends, warnings = load_trends(store, args.key or None, tolerance=args.tolerance)
    trends = [t for t in trends if args.test is None or args.test in t.test_id]
    if args.since is not None:
        trends = [t for t in trends if any(recorded_since(row, args.since) for row in t.rows)]
    for warning in warnings:
        print(f"hwregress: warning: {warning}", file=sys.stderr)
    if not trends:
        raise CliError(args.dir, "no test in the history matches" + (f" --test {args.test!r}" if args.test else "")
                       + (f" since {args.since.isoformat()}" if args.since else ""), "check the filters, or run a session first")
    for trend in trends:
        print("\n".join(trend_table(trend, args.since, args.last)), end="\n\n")
    print(status_counts(trends))
    failing = [t for t in trends if args.fail_on and t.status in HISTORY_FAIL_ON[args.fail_on]]
    for trend in failing:
        print(f"hwregress: {trend.status}: {trend.hardware_key} {trend.test_id}: {trend.summary}", file=sys.stderr)
    return 1 if failing else 0


def _since(text: str) -> Any:
    moment = parse_time(text)
    if moment is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date or time; use ISO 8601, e.g. 2026-11-01 or 2026-11-01T03:00")
    return moment


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def _tolerance(text: str) -> float:
    value = _fraction(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0, e.g. 0.05 for 5%")
    return value


# -- entry point -------------------------------------------------------------------------------------------
def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in [0, 1), e.g. 0.05 for 5%")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is a :class:`CliError` (one line) instead of usage text and an exit."""

    def error(self, message: str) -> typing.NoReturn:
        raise CliError(self.prog, message, f"see {self.prog} --help")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m hwregress", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    baselines = commands.add_parser("baselines", help="list, show or diff baselines files").add_subparsers(
        dest="action", required=True)
    for name, handler in (("list", cmd_list), ("show", cmd_show), ("diff", cmd_diff)):
        sub = baselines.add_parser(name)
        sub.add_argument("--dir", type=Path, default=Path("baselines"), help="baselines folder (default: baselines)")
        sub.set_defaults(handler=handler)
        if name == "show":
            sub.add_argument("target", help="hardware key or baselines file")
        if name == "diff":
            sub.add_argument("a", help="the reference: baselines file, hardware key or results.json")
            sub.add_argument("b", help="the candidate: baselines file, hardware key or results.json")
            sub.add_argument("--tolerance", type=_fraction, default=None,
                             help="relative change that counts at least (default: the tests' own: 0.15 on CPUs, 0.05 else)")
            sub.add_argument("--fail-on", choices=sorted(FAIL_ON), default=None,
                             help="exit 1 when any test's direction matches (regression, improvement or any)")
    report = commands.add_parser("report", help="render reports").add_subparsers(dest="action", required=True)
    merge = report.add_parser("merge", help="several machines' results.json side by side in one page")
    merge.add_argument("results", nargs="+", help="results.json files")
    merge.add_argument("-o", "--output", required=True, help="the HTML file to write")
    merge.add_argument("--history-dir", type=Path, action="append", default=[],
                       help="add trend charts from this history folder (repeatable: one per machine's history)")
    merge.set_defaults(handler=cmd_merge)
    render = report.add_parser("render", help="render one results.json, or the journal of an unfinished session")
    render.add_argument("source", help="results.json or results-*-unfinished.jsonl")
    render.add_argument("-o", "--output", required=True, help="the HTML file to write")
    render.add_argument("--history-dir", type=Path, action="append", default=[], help="add trend charts from this history folder")
    render.set_defaults(handler=cmd_render)
    history = commands.add_parser("history", help="per test its recent sessions, change points and drift")
    history.add_argument("--dir", type=Path, default=Path("reports/history"), help="history folder (default: %(default)s)")
    history.add_argument("--key", action="append", help="hardware key (repeatable; default: every key in the folder)")
    history.add_argument("--test", help="only tests whose id contains this text")
    history.add_argument("--since", type=_since,
                         help="only sessions at or after this date (ISO 8601, UTC); the analysis uses all")
    history.add_argument("--last", type=_positive, default=10, help="sessions shown per test (default: %(default)s)")
    history.add_argument("--tolerance", type=_tolerance, default=0.05,
                         help="smallest level change that sets a status (default: %(default)s)")
    history.add_argument("--fail-on", choices=sorted(HISTORY_FAIL_ON), default=None,
                         help="exit 1 when a test's latest segment is a regression or drift (regression), a drift, or any change")
    history.set_defaults(handler=cmd_history)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 fine, 1 ``--fail-on`` matched, 2 a user error).
    Set ``HWREGRESS_DEBUG=1`` to see the traceback of an unexpected error."""
    args = argparse.Namespace()
    try:
        args = build_parser().parse_args(argv)
        return int(args.handler(args) or 0)
    except (CliError, BaselineError) as error:
        message = str(error)
    except OSError as error:
        message = f"{error.filename or 'hwregress'}: {error.strerror or error} (check the path and its permissions)"
    except Exception as error:
        if os.environ.get("HWREGRESS_DEBUG"):
            raise
        message = (f"{getattr(args, 'source', None) or getattr(args, 'target', None) or 'hwregress'}: unexpected "
                   f"{type(error).__name__}: {error} (a defect in hwregress: report it; HWREGRESS_DEBUG=1 shows where)")
    print(f"hwregress: {message}", file=sys.stderr)
    return 2

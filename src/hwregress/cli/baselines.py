"""``python -m hwregress baselines list|show|diff``: the baselines files of a folder, the entries of one, and two
of them (or a results.json) compared test by test with the rule the tests use."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwregress.cli.common import CliError, fmt, fraction, is_results_file, load_results, report_errors
from hwregress.judge.stats import compare
from hwregress.judge.tolerances import Tolerances, is_cpu_entry, starting_tolerance
from hwregress.store import results as results_module
from hwregress.store.baseline_file import BaselineError, BaselineFile, entry_key, load_file
from hwregress.store.baselines import BaselineStore
from hwregress.summary import summarize

FAIL_ON = {"regression": {"regression"}, "improvement": {"improvement"}, "any": {"regression", "improvement"}}


def _baseline_file(argument: str, directory: Path) -> BaselineFile:
    path = Path(argument)
    if not (path.exists() or path.is_symlink()):
        path = BaselineStore(directory).path_for(argument)
    if not (path.exists() or path.is_symlink()):
        known = ", ".join(BaselineStore(directory).hardware_keys()) or "none"
        raise CliError(argument, f"no such baselines file or hardware key in {directory}",
                       f"known: {known}; or give --dir")
    return load_file(path)


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
        print(f"{key:<40} {baseline.device_name[:32]:<32} {len(baseline.entries):>7} "
              f"{len(baseline.bad_entries):>4}  {span}")
        errors.extend(baseline.bad_entries.values())
    return report_errors(errors)


def cmd_show(args: argparse.Namespace) -> int:
    """``baselines show``: the valid entries of one file; exit 2 (one stderr line each) for bad entries."""
    baseline = _baseline_file(args.target, args.dir)
    print(f"{baseline.hardware_key} — {baseline.device_name} — {len(baseline.entries)} entries")
    print(f"{'test':<52} {'median':>12} {'unit':<10} {'IQR/med':>8} {'n':>4} {'peak MiB':>9} {'torch':<14} recorded")
    for key, entry in sorted(baseline.entries.items()):
        median = entry.get("median") if entry.get("median") is not None else entry.get("accuracy")
        rel = (entry["iqr"] / entry["median"]) if entry.get("iqr") is not None and entry.get("median") else None
        peak = entry.get("peak_memory_bytes")
        print(f"{key:<52} {fmt(median):>12} {entry.get('unit') or ''!s:<10} {fmt(rel):>8} {fmt(entry.get('n')):>4} "
              f"{fmt(peak / 2**20 if peak is not None else None):>9} {entry.get('environment', {}).get('torch')!s:<14} "
              f"{entry.get('recorded_at') or '-'}")
    return report_errors(list(baseline.bad_entries.values()))


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


def diff_row(key: str, a: dict[str, Any], b: dict[str, Any], tolerance: float | None,
             tolerances: Tolerances) -> DiffRow:
    """Compare entry ``b`` against reference entry ``a`` with the rule the tests use: the starting tolerance
    of :func:`hwregress.judge.tolerances.starting_tolerance` (``tolerance`` when given, else A's device default, raised
    to the cap while A holds fewer than three sessions), then, with samples on both sides, ``stats.compare(b samples,
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
        direction = _direction(ratio - 1, tolerance)
        return DiffRow(key, median_a, median_b, ratio, tolerance, None, direction, "medians only")
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
    if path.exists() and is_results_file(path):
        session = load_results(path)
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
    rows = [diff_row(key, a_keys[key], b_keys[key], args.tolerance, tolerances)
            for key in sorted(set(a_keys) & set(b_keys))]
    given = (f"--tolerance {args.tolerance:.1%}" if args.tolerance is not None
             else "the device default (CPU 15%, else 5%)")
    print(f"A = {label_a}\nB = {label_b}\nratio = B/A; threshold: at least {given}, the cap while A holds fewer than "
          "three sessions, more where A's noise or history asks for it")
    print(f"{'test':<52} {'A':>11} {'B':>11} {'B/A':>7} {'thresh':>7} {'p':>8}  {'direction':<11} basis")
    for row in rows:
        print(f"{row.key:<52} {fmt(row.a):>11} {fmt(row.b):>11} {fmt(row.ratio):>7} {fmt(row.threshold):>7} "
              f"{fmt(row.p_value):>8}  {row.direction:<11} {row.basis}")
    for name, only in (("only in A", set(a_keys) - set(b_keys)), ("only in B", set(b_keys) - set(a_keys))):
        if only:
            print(f"{name}: {', '.join(sorted(only))}")
    counts = {d: sum(r.direction == d for r in rows) for d in ("regression", "improvement")}
    print(f"{counts['regression']} regressions, {counts['improvement']} improvements, {len(rows)} tests compared")
    if report_errors(errors_a + errors_b):
        return 2
    failing = FAIL_ON.get(args.fail_on or "", set())
    return 1 if any(r.direction in failing for r in rows) else 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """The ``baselines`` command and its ``list``, ``show`` and ``diff`` actions."""
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
            sub.add_argument("--tolerance", type=fraction, default=None,
                             help="relative change that counts at least "
                                  "(default: the tests' own: 0.15 on CPUs, 0.05 else)")
            sub.add_argument("--fail-on", choices=sorted(FAIL_ON), default=None,
                             help="exit 1 when any test's direction matches (regression, improvement or any)")

"""``python -m hwregress``: inspect and compare baselines, merge several machines' results into one page.

    python -m hwregress baselines list [--dir baselines]
    python -m hwregress baselines show KEY|FILE [--dir baselines]
    python -m hwregress baselines diff A B        (each a baselines file or a results.json)
    python -m hwregress report merge RESULTS.json... -o FILE.html
    python -m hwregress report render RESULTS.json|UNFINISHED.jsonl -o FILE.html
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hwregress import results as results_module
from hwregress.baselines import BaselineError, BaselineFile, BaselineStore, entry_key, parse
from hwregress.journal import load_journal
from hwregress.stats import summarize


class CliError(Exception):
    """A user error: printed as ``hwregress: <message>``, exit status 2."""


def _baseline_file(argument: str, directory: Path) -> BaselineFile:
    path = Path(argument)
    if not path.exists():
        path = BaselineStore(directory).path_for(argument)
    if not path.exists():
        known = ", ".join(BaselineStore(directory).hardware_keys()) or "none"
        raise CliError(f"{argument}: no such baselines file or hardware key in {directory} (known: {known})")
    return parse(path.read_text(encoding="utf-8"), str(path))


def _entries_of(argument: str, directory: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    """(label, entry key -> {median, unit, ...}) from a baselines file, a hardware key or a results.json."""
    path = Path(argument)
    if path.exists():
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "records" in data:
            session = results_module.load(path)
            entries = {}
            for r in session.records:
                if r.throughput is not None and r.model and r.mode and r.batch_size and r.dtype:
                    key = f"{r.hardware_key}:{entry_key(r.family, r.model, r.mode, r.batch_size, r.dtype)}"
                    entries[key] = {"median": r.throughput, "unit": r.unit, "samples": r.samples}
            return f"{path} ({results_module.machine_label(session)})", entries
    baseline = _baseline_file(argument, directory)
    return (f"{argument} ({baseline.hardware_key})",
            {f"{baseline.hardware_key}:{k}": v for k, v in baseline.entries.items()})


def cmd_list(args: argparse.Namespace) -> None:
    store = BaselineStore(args.dir)
    keys = store.hardware_keys()
    if not keys:
        print(f"no baselines files in {args.dir}")
        return
    print(f"{'hardware key':<40} {'device':<32} {'entries':>7}  recorded")
    for key in keys:
        try:
            baseline = store.load(key)
        except BaselineError as error:
            print(f"{key:<40} UNREADABLE: {error}")
            continue
        assert baseline is not None
        stamps = sorted(str(e.get("recorded_at", "")) for e in baseline.entries.values())
        span = f"{stamps[0]} .. {stamps[-1]}" if stamps else "-"
        print(f"{key:<40} {baseline.device_name[:32]:<32} {len(baseline.entries):>7}  {span}")


def cmd_show(args: argparse.Namespace) -> None:
    baseline = _baseline_file(args.target, args.dir)
    print(f"{baseline.hardware_key} — {baseline.device_name} — {len(baseline.entries)} entries")
    print(f"{'test':<52} {'median':>12} {'unit':<10} {'IQR/med':>8} {'n':>4} {'peak MiB':>9} {'torch':<14} recorded")
    for key, entry in sorted(baseline.entries.items()):
        median = entry.get("median") if entry.get("median") is not None else entry.get("accuracy")
        rel = (entry["iqr"] / entry["median"]) if entry.get("iqr") is not None and entry.get("median") else None
        peak = entry.get("peak_memory_bytes")
        print(f"{key:<52} {_fmt(median):>12} {entry.get('unit', '')!s:<10} {_fmt(rel):>8} {_fmt(entry.get('n')):>4} "
              f"{_fmt(peak / 2**20 if peak is not None else None):>9} {entry.get('environment', {}).get('torch')!s:<14} "
              f"{entry.get('recorded_at', '-')}")


def cmd_diff(args: argparse.Namespace) -> None:
    label_a, a = _entries_of(args.a, args.dir)
    label_b, b = _entries_of(args.b, args.dir)
    strip = len(set(k.split(":", 1)[0] for k in a)) == 1 and len(set(k.split(":", 1)[0] for k in b)) == 1
    a_keys = {k.split(":", 1)[1] if strip else k: v for k, v in a.items()}
    b_keys = {k.split(":", 1)[1] if strip else k: v for k, v in b.items()}
    print(f"A = {label_a}\nB = {label_b}")
    print(f"{'test':<52} {'A':>12} {'B':>12} {'B/A':>7}  unit")
    for key in sorted(set(a_keys) & set(b_keys)):
        median_a, median_b = _median(a_keys[key]), _median(b_keys[key])
        ratio = median_b / median_a if median_a and median_b is not None else None
        print(f"{key:<52} {_fmt(median_a):>12} {_fmt(median_b):>12} {_fmt(ratio):>7}  {a_keys[key].get('unit', '')}")
    for name, only in (("only in A", set(a_keys) - set(b_keys)), ("only in B", set(b_keys) - set(a_keys))):
        if only:
            print(f"{name}: {', '.join(sorted(only))}")


def _median(entry: dict[str, Any]) -> float | None:
    if entry.get("median") is not None:
        return float(entry["median"])
    return summarize(entry["samples"]).median if entry.get("samples") else entry.get("accuracy")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def cmd_merge(args: argparse.Namespace) -> None:
    from hwregress.report import render_merge

    sessions = []
    for path in args.results:
        try:
            sessions.append(results_module.load(path))
        except ValueError as error:
            raise CliError(str(error)) from None
    html = render_merge(results_module.merge_sessions(sessions))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(html, encoding="utf-8")
    print(f"wrote {args.output} ({len(sessions)} machines)")


def cmd_render(args: argparse.Namespace) -> None:
    from hwregress.report import render

    source = Path(args.source)
    try:
        session = load_journal(source) if source.suffix == ".jsonl" else results_module.load(source)
    except (OSError, ValueError) as error:
        raise CliError(f"{source}: {error}") from None
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(render(session), encoding="utf-8")
    print(f"wrote {args.output} ({len(session.records)} tests)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hwregress", description=__doc__,
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
            sub.add_argument("a", help="baselines file, hardware key or results.json")
            sub.add_argument("b", help="baselines file, hardware key or results.json")
    report = commands.add_parser("report", help="render reports").add_subparsers(dest="action", required=True)
    merge = report.add_parser("merge", help="several machines' results.json side by side in one page")
    merge.add_argument("results", nargs="+", help="results.json files")
    merge.add_argument("-o", "--output", required=True, help="the HTML file to write")
    merge.set_defaults(handler=cmd_merge)
    render = report.add_parser("render", help="render one results.json, or the journal of an unfinished session")
    render.add_argument("source", help="results.json or results-*-unfinished.jsonl")
    render.add_argument("-o", "--output", required=True, help="the HTML file to write")
    render.set_defaults(handler=cmd_render)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 on a user error)."""
    args = build_parser().parse_args(argv)
    try:
        args.handler(args)
    except (CliError, BaselineError) as error:
        print(f"hwregress: {error}", file=sys.stderr)
        return 2
    return 0

"""``python -m hwregress check``: run the acceptance checks on this machine and print a pass/fail table.

    python -m hwregress check [--devices cuda:0,cpu|all] [--only NAME,...] [--json FILE]

Exit status 0 when no check failed (skips allowed), 1 when one did, 2 for a usage error. Each line names the
check, the device, its result, its seconds and its figures; a failed check adds what it compared and where the
failure points; a skipped one, why. ``--json`` also writes every result (:class:`hwregress.check.result.CheckResult`),
rewritten atomically after each check (``"complete": false`` until the last), so that a run stopped by a timeout or
an interrupt keeps the checks it finished.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hwregress.check.result import FAIL, PASS, SKIP, CheckResult


def build_parser() -> argparse.ArgumentParser:
    from hwregress.check.runner import CHECKS

    parser = argparse.ArgumentParser(prog="python -m hwregress check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default=None,
                        help="devices to check, comma-separated, or 'all' (default: the first GPU, else the CPU)")
    parser.add_argument("--only", default=None, help=f"checks to run, comma-separated: {', '.join(CHECKS)}")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON to this file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        devices = _devices(args.devices)
        names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
        from hwregress.check.runner import chosen_checks, run_checks

        chosen_checks(names)
        print(f"hwregress check on {', '.join(devices)}")
        finished: list[CheckResult] = []

        def on_result(result: CheckResult) -> None:
            print(line(result), flush=True)
            finished.append(result)
            if args.json is not None:
                _write_json(args.json, devices, finished, complete=False)

        results = run_checks(devices, names, on_result=on_result)
    except ValueError as error:
        print(f"hwregress: check: {error}", file=sys.stderr)
        return 2
    counts = Counter(result.status for result in results)
    print(f"{len(results)} checks: {counts[PASS]} pass, {counts[FAIL]} fail, {counts[SKIP]} skip")
    if args.json is not None:
        _write_json(args.json, devices, results, complete=True)
        print(f"wrote {args.json}")
    return 1 if counts[FAIL] else 0


def line(result: CheckResult) -> str:
    """One check as the table shows it: name, device, result, seconds, figures; then, indented, what it compared
    and where a failure points (or why it was skipped)."""
    figures = " ".join(f"{key}={_value(value)}" for key, value in result.figures.items())
    text = f"{result.name:<19} {result.device:<7} {result.status:<5} {result.seconds:>6.1f}s  {figures}"
    if result.status == FAIL:
        text += f"\n    compared: {result.compared}\n    points to: {result.points_to}"
    elif result.status == SKIP:
        text += f"\n    skipped: {result.points_to}"
    return text


def _value(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (list, dict)) else str(value)


def _devices(text: str | None) -> list[str]:
    from hwregress.hardware.devices import parse_device_list, visible_devices

    visible = visible_devices()
    if text is None:
        return [next((d for d in visible if d.startswith("cuda")), "cpu")]
    if text.strip() == "all":
        return [d for d in visible if d != "mps"]
    chosen = parse_device_list(text, "--devices")
    missing = [d for d in chosen if d not in visible]
    if missing:
        raise ValueError(f"--devices {text!r}: {', '.join(missing)} not visible here (visible: {', '.join(visible)})")
    return chosen


def _write_json(path: Path, devices: list[str], results: list[CheckResult], complete: bool) -> None:
    """``complete`` False: the checks still running (the file then holds the ones finished so far)."""
    from hwregress import __version__
    from hwregress.store.atomic import atomic_write_json

    atomic_write_json(path, {"hwregress_version": __version__, "devices": devices, "complete": complete,
                             "results": [result.as_json() for result in results]})

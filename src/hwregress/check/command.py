"""``python -m hwregress check``: run the acceptance checks on this machine and print a pass/fail table.

    python -m hwregress check [--devices cuda:0,cpu|all] [--only NAME,...] [--json FILE]

Exit status 0 when no check failed (skips allowed), 1 when one did, 2 for a usage error or an output that cannot be
written (``--json`` and stdout are checked before any check runs: :mod:`hwregress.check.output`). Each line names the
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
from typing import Any

from hwregress.check.output import OutputError, first_line, json_target, table_line, write_results
from hwregress.check.result import FAIL, PASS, SKIP, CheckResult


def build_parser() -> argparse.ArgumentParser:
    from hwregress.check.runner import CHECKS

    parser = argparse.ArgumentParser(prog="python -m hwregress check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default=None,
                        help="devices to check, comma-separated, or 'all' (default: the first GPU, else the CPU)")
    parser.add_argument("--only", default=None, help=f"checks to run, comma-separated: {', '.join(CHECKS)}")
    parser.add_argument("--json", default=None, help="also write the results as JSON to this file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status (0 no check failed, 1 one did, 2 a usage error or an output that
    cannot be written, each one line on stderr)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        devices = _devices(args.devices)
        names = _names(args.only)
        from hwregress.check.runner import chosen_checks, run_checks

        chosen_checks(names)
        if args.json is not None:
            json_target(args.json)
        first_line(f"hwregress check on {', '.join(devices)}")
        finished: list[CheckResult] = []

        def on_result(result: CheckResult) -> None:
            finished.append(result)
            if args.json is not None:
                _write_json(args.json, devices, finished, complete=False)
            table_line(line(result))

        results = run_checks(devices, names, on_result=on_result)
        counts = Counter(result.status for result in results)
        table_line(f"{len(results)} checks: {counts[PASS]} pass, {counts[FAIL]} fail, {counts[SKIP]} skip")
        if args.json is not None:
            _write_json(args.json, devices, results, complete=True)
            table_line(f"wrote {args.json}")
    except (ValueError, OutputError) as error:
        print(f"hwregress: check: {error}", file=sys.stderr)
        return 2
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


def _names(text: str | None) -> list[str] | None:
    """The check names of ``--only`` (None: not given, all checks); empty entries between commas are dropped.

    Raises:
        ValueError: ``text`` names no check (``""``, ``","``); the message lists the checks.
    """
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        from hwregress.check.runner import CHECKS

        raise ValueError(f"--only {text!r} names no check; give check names, comma-separated: {', '.join(CHECKS)} "
                         "(or leave --only out for all)")
    return names


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


def _write_json(text: str, devices: list[str], results: list[CheckResult], complete: bool) -> None:
    """``complete`` False: the checks still running (the file then holds the ones finished so far).

    Raises:
        OutputError: the file cannot be written (:func:`hwregress.check.output.write_results`).
    """
    from hwregress import __version__

    write_results(text, {"hwregress_version": __version__, "devices": devices, "complete": complete,
                         "results": [result.as_json() for result in results]})

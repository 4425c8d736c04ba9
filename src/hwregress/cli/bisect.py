"""``python -m hwregress bisect --stacks PY1,PY2,... [-- PYTEST ARGS]``: which interpreter of an ordered list (one venv
per nightly, a wrapper per setting; the first known good, the last known bad) first made the selected tests slower
(:mod:`hwregress.bisect`, docs/bisect.md). Each probe is an A/B session of the selection, the candidate against an
endpoint, run by the endpoint's interpreter (every stack needs hwregress and the selection's packages). A wrapper
stack sets or unsets every setting the ladder varies: stack B's workers inherit the reference's environment.

Prints each probe as it ends, then the culprit (or why there is none), and writes ``--json``. Exit status: 0 culprit
found, 1 no regression between the endpoints, 2 usage error, 3 undecided within the probes' budget (or only skipped
candidates left where the culprit is).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from hwregress.bisect.budget import DEFAULT_LOOKS, DEFAULT_THRESHOLD
from hwregress.bisect.search import CULPRIT, Bisection, Probe, bisect
from hwregress.bisect.stacks import ProbeSettings, StackProbes
from hwregress.cli.common import CliError, command_inputs, fraction, output_path, write_output


def add_commands(commands: Any) -> None:
    """Add ``bisect`` to the top-level subcommands (``add_subparsers()``'s object)."""
    parser = commands.add_parser("bisect", help="which stack of an ordered list first made the tests slower",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stacks", required=True,
                        help="the interpreters in order, comma-separated: the first known good, the last known bad")
    parser.add_argument("--threshold", type=fraction, default=DEFAULT_THRESHOLD,
                        help=f"the smallest slowdown looked for, a fraction (default {DEFAULT_THRESHOLD})")
    parser.add_argument("--looks", default=",".join(str(n) for n in DEFAULT_LOOKS),
                        help="each probe's planned looks, cumulative pair counts (default "
                             f"{','.join(str(n) for n in DEFAULT_LOOKS)}: the last is its budget)")
    parser.add_argument("--work-dir", default="reports/bisect", help="the probes' reports and logs (default "
                                                                     "reports/bisect)")
    parser.add_argument("--probe-timeout", type=float, default=None,
                        help="seconds one probe may take; past it the candidate is skipped (default: no limit)")
    parser.add_argument("--json", default=None, help="also write the bisection as JSON to this file")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER,
                        help="after --: the pytest selection every probe runs, e.g. -- -m cpu -k resnet18")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    stacks = _stacks(args.stacks)
    pytest_args = tuple(args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args)
    settings = ProbeSettings(pytest_args, args.threshold, _looks(args.looks), Path(args.work_dir),
                             args.probe_timeout)
    json_path = output_path(args.json, command_inputs()) if args.json else None
    print(f"bisect: {len(stacks)} stacks, {stacks[0]} (good) .. {stacks[-1]} (bad); each probe an A/B of "
          f"pytest {' '.join(pytest_args) or '(the default selection)'}", flush=True)
    probes = StackProbes(stacks, settings)
    found = bisect(len(stacks), _printing(probes, stacks))
    for line in summary(found, stacks):
        print(line)
    if json_path is not None:
        write_output(json_path, json.dumps(bisection_json(found, stacks, settings), indent=2) + "\n")
    return found.exit_code


def _printing(probes: StackProbes, stacks: list[str]) -> Any:
    """``probes``, printing each probe as it ends."""
    def run(candidate: int, reference: int) -> Any:
        print(f"probe {probes.run_count + 1}: {stacks[candidate]} against {stacks[reference]} ...", flush=True)
        outcome = probes(candidate, reference)
        print(f"  {outcome.verdict}, B/A {_ratio(outcome.ratio, outcome.ratio_low, outcome.ratio_high)}, "
              f"{outcome.pairs} pairs, {outcome.seconds:.0f} s", flush=True)
        return outcome
    return run


def _stacks(text: str) -> list[str]:
    stacks = [entry.strip() for entry in text.split(",") if entry.strip()]
    if len(stacks) < 2:
        raise CliError("--stacks", f"{text!r} names {len(stacks)} interpreter(s)",
                       "give the good one first and the bad one last, comma-separated, at least 2")
    for stack in stacks:
        if not (os.path.isfile(stack) and os.access(stack, os.X_OK)):
            raise CliError("--stacks", f"{stack!r} is not an executable file", "give each stack's python (a venv's "
                           "bin/python, or an executable wrapper)")
    if len(set(stacks)) != len(stacks):
        raise CliError("--stacks", "an interpreter is named twice", "name each stack once, in order")
    return stacks


def _looks(text: str) -> tuple[int, ...]:
    try:
        looks = tuple(int(entry) for entry in text.split(","))
    except ValueError:
        raise CliError("--looks", f"{text!r} is not a list of pair counts", "give e.g. 20,40,80") from None
    if not looks or any(n < 2 or n % 2 for n in looks) or list(looks) != sorted(set(looks)):
        raise CliError("--looks", f"{text!r}", "give increasing even pair counts, e.g. 20,40,80")
    return looks


def _ratio(ratio: float | None, low: float | None, high: float | None) -> str:
    if ratio is None:
        return "–"
    bounds = f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
    return f"{ratio:.3f}{bounds}"


def summary(found: Bisection, stacks: list[str]) -> list[str]:
    """The bisection's end as lines: the culprit and the last good stack, or why there is none, the skipped stacks
    and the probes' time."""
    lines = []
    if found.status == CULPRIT and found.culprit is not None:
        lines.append(f"culprit: {stacks[found.culprit]} (the first bad; the last good: {stacks[found.last_good]})")
    elif found.first_bad is not None:
        lines.append(f"{found.status}: the first bad is after {stacks[found.last_good]} and at or before "
                     f"{stacks[found.first_bad]}")
    else:
        lines.append(found.status)
    lines += [f"skipped {stacks[index]}: {why.splitlines()[0] if why else ''}" for index, why in found.skipped.items()]
    lines.append(f"{len(found.probes)} probes, {found.seconds:.0f} s")
    return lines


def bisection_json(found: Bisection, stacks: list[str], settings: ProbeSettings) -> dict[str, Any]:
    """The bisection as a JSON-able dict: the status, exit code, culprit, bounds, every probe and the settings."""
    return {"status": found.status, "exit_code": found.exit_code, "stacks": stacks,
            "culprit": None if found.culprit is None else stacks[found.culprit],
            "last_good": stacks[found.last_good],
            "first_bad": None if found.first_bad is None else stacks[found.first_bad],
            "probes": [_probe_json(probe, stacks) for probe in found.probes], "skipped": {
                stacks[index]: why for index, why in found.skipped.items()}, "seconds": found.seconds,
            "settings": {"pytest_args": list(settings.pytest_args), "threshold": settings.threshold,
                         "looks": list(settings.looks), "work_dir": str(settings.work_dir)}}


def _probe_json(probe: Probe, stacks: list[str]) -> dict[str, Any]:
    outcome = probe.outcome
    return {"candidate": stacks[probe.candidate], "reference": stacks[probe.reference], "side": str(probe.side),
            "skipped": probe.skipped,
            **({} if outcome is None else {"verdict": outcome.verdict, "ratio": outcome.ratio,
                                           "ratio_low": outcome.ratio_low, "ratio_high": outcome.ratio_high,
                                           "pairs": outcome.pairs, "seconds": outcome.seconds,
                                           "details": outcome.details})}

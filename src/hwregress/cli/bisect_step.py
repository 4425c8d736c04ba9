"""``python -m hwregress bisect-step --against REV [--setup CMD] -- PYTEST ARGS``: one step of ``git bisect run``.

It runs in the checkout ``git bisect`` prepared (or ``--repo``): one probe, an A/B session of the selection with the
checkout's stack (stack B, built by ``--setup`` with the checkout as ``{worktree}``, or this interpreter with the
checkout on PYTHONPATH) against the stack of REV (stack A, checked out in a worktree of a temporary folder, removed
at the end), judged as a bisection's probe is (docs/bisect.md); its report and log go to ``<work-dir>/step-<sha>``
(give an absolute ``--work-dir``: ``git bisect run`` runs the step in the checkout). Exit status, as ``git bisect
run`` reads it:

- 0: the same as REV, or faster (good);
- 1: slower than REV beyond the threshold (bad);
- 125: undecided within the probe's budget of pairs, or the checkout does not build or its tests fail (skip);
- 128: a usage error (a REV that names no commit, uncommitted changes, a REV that does not build), and 130 when
  interrupted: both above 127, so ``git bisect run`` stops instead of marking the commit bad.

Usage: ``git bisect start BAD GOOD && git bisect run python -m hwregress bisect-step --against GOOD -- -m cpu -k x``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from hwregress.bisect.commits import repository_root
from hwregress.bisect.ladders import step_pair
from hwregress.bisect.search import CandidateSkipped, ProbeOutcome
from hwregress.bisect.sides import Side, side_of
from hwregress.bisect.stacks import StackProbes
from hwregress.cli.bisect import INTERRUPTED, add_probe_options, probe_settings, sigterm_as_interrupt
from hwregress.cli.common import command_inputs, output_path, write_output

GOOD, BAD, SKIP = 0, 1, 125
USAGE_ERROR = 128  # above 127: git bisect run stops rather than reading it as "bad"
STEP_EXIT = {Side.GOOD: GOOD, Side.BAD: BAD, Side.UNDECIDED: SKIP}


def add_commands(commands: Any) -> None:
    """Add ``bisect-step`` to the top-level subcommands (``add_subparsers()``'s object)."""
    parser = commands.add_parser("bisect-step", help="one step of git bisect run: the checkout against a good REV",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="the known good commit to compare the checkout with")
    parser.add_argument("--repo", default=".", help="the checkout git bisect prepared (default: the current folder)")
    add_probe_options(parser)
    parser.set_defaults(handler=run, usage_status=USAGE_ERROR)


def run(args: argparse.Namespace) -> int:
    settings = probe_settings(args)
    json_path = output_path(args.json, command_inputs()) if args.json else None
    with sigterm_as_interrupt(), contextlib.ExitStack() as cleanup:
        try:
            repo = repository_root(Path(args.repo), "--repo")
            pair = step_pair(repo, args.against, args.setup, settings.work_dir, cleanup)
            print(f"bisect-step: {pair.labels[1]} against {pair.labels[0]}", flush=True)
            step_settings = replace(settings, work_dir=settings.work_dir / f"step-{pair.ids[1][:12]}")
            try:
                outcome: ProbeOutcome | None = StackProbes(pair.python_of, step_settings)(1, 0)
                side, why = side_of(outcome.verdict, "good"), ""
            except CandidateSkipped as skipped:
                outcome, side, why = None, Side.SKIP, str(skipped)
        except KeyboardInterrupt:
            print("interrupted: the running A/B session is ended and the worktree removed", flush=True)
            return INTERRUPTED
    status = STEP_EXIT.get(side, SKIP)
    print(_line(side, outcome, why, status), flush=True)
    if json_path is not None:
        document = {"checkout": pair.ids[1], "against": pair.ids[0], "side": str(side), "exit_code": status,
                    "skipped": why or None, **({} if outcome is None else {
                        "verdict": outcome.verdict, "ratio": outcome.ratio, "ratio_low": outcome.ratio_low,
                        "ratio_high": outcome.ratio_high, "pairs": outcome.pairs, "seconds": outcome.seconds,
                        "details": outcome.details})}
        write_output(json_path, json.dumps(document, indent=2) + "\n")
    return status


def _line(side: Side, outcome: ProbeOutcome | None, why: str, status: int) -> str:
    if outcome is None:
        return f"skip (exit {status}): {why.splitlines()[0] if why else ''}"
    ratio = "–" if outcome.ratio is None else f"{outcome.ratio:.3f}"
    if outcome.ratio_low is not None and outcome.ratio_high is not None:
        ratio += f" [{outcome.ratio_low:.3f}, {outcome.ratio_high:.3f}]"
    return (f"{side} (exit {status}): {outcome.verdict}, B/A {ratio}, {outcome.pairs} pairs, "
            f"{outcome.seconds:.0f} s")

"""``python -m hwregress bisect-step --against REV [--setup CMD] -- PYTEST ARGS``: one step of ``git bisect run``.

It runs in the checkout ``git bisect`` prepared (or ``--repo``): one probe, an A/B session of the selection with the
checkout's stack (stack B, built by ``--setup`` with the checkout as ``{worktree}``, or this interpreter with the
checkout on PYTHONPATH) against the stack of REV (stack A, checked out in a worktree of a temporary folder, removed
at the end), judged as a bisection's probe is (docs/bisect.md); its report and log go to ``<work-dir>/step-<sha>``
(give an absolute ``--work-dir``: ``git bisect run`` runs the step in the checkout). Exit status, as ``git bisect
run`` reads it:

- 0: the same as REV, or faster (good);
- 1: slower than REV beyond the threshold (bad);
- 125: undecided within the probe's budget of pairs, or the checkout does not build or its tests fail (skip).
  With ``--bad BAD``, a checkout REV leaves undecided is asked against BAD, as a bisection's second opinion: faster
  than BAD is good (0), the same or slower is bad (1), still undecided is a skip (125);
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
from hwregress.cli.bisect import (
    INTERRUPTED,
    add_probe_options,
    outcome_line,
    probe_document,
    probe_settings,
    sigterm_as_interrupt,
)
from hwregress.cli.common import command_inputs, output_path, write_output

GOOD, BAD, SKIP = 0, 1, 125
USAGE_ERROR = 128  # above 127: git bisect run stops rather than reading it as "bad"
STEP_EXIT = {Side.GOOD: GOOD, Side.BAD: BAD, Side.UNDECIDED: SKIP}


def add_commands(commands: Any) -> None:
    """Add ``bisect-step`` to the top-level subcommands (``add_subparsers()``'s object)."""
    parser = commands.add_parser("bisect-step", help="one step of git bisect run: the checkout against a good REV",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="the known good commit to compare the checkout with")
    parser.add_argument("--bad", default=None, help="a known bad commit: a checkout the good one leaves undecided is "
                        "asked against it, as bisect's second opinion (default: none, undecided is a skip)")
    parser.add_argument("--repo", default=".", help="the checkout git bisect prepared (default: the current folder)")
    add_probe_options(parser)
    parser.set_defaults(handler=run, usage_status=USAGE_ERROR)


def run(args: argparse.Namespace) -> int:
    settings = probe_settings(args)
    json_path = output_path(args.json, command_inputs()) if args.json else None
    with sigterm_as_interrupt(), contextlib.ExitStack() as cleanup:
        try:
            repo = repository_root(Path(args.repo), "--repo")
            pair = step_pair(repo, args.against, args.setup, settings.work_dir, cleanup, args.bad)
            print(f"bisect-step: {pair.labels[1]} against {pair.labels[0]}", flush=True)
            step_settings = replace(settings, work_dir=settings.work_dir / f"step-{pair.ids[1][:12]}")
            side, probes = _probed(StackProbes(pair.python_of, step_settings), pair.labels)
        except KeyboardInterrupt:
            print("interrupted: the running A/B session is ended and the worktree removed", flush=True)
            return INTERRUPTED
    status = STEP_EXIT.get(side, SKIP)
    print(f"{side} (exit {status})", flush=True)
    if json_path is not None:
        document = {"checkout": pair.ids[1], "against": pair.ids[0], "bad": pair.ids[2] if len(pair.ids) > 2 else None,
                    "side": str(side), "exit_code": status,
                    "probes": [probe_document(pair.ids[1], pair.ids[reference], probe_side, outcome, why)
                               for reference, probe_side, outcome, why in probes]}
        write_output(json_path, json.dumps(document, indent=2) + "\n")
    return status


def _probed(probes: StackProbes, labels: list[str]) -> tuple[Side, list[tuple[int, Side, ProbeOutcome | None,
                                                                            str | None]]]:
    """The checkout (1) against the good commit (0); undecided there, against the bad one (2) where given. Returns the
    checkout's side and each probe run: (reference, side, outcome, why skipped)."""
    done: list[tuple[int, Side, ProbeOutcome | None, str | None]] = []
    for reference, against in ((0, "good"), (2, "bad")):
        if reference >= len(labels):
            break
        try:
            outcome = probes(1, reference)
        except CandidateSkipped as skipped:
            done.append((reference, Side.SKIP, None, str(skipped)))
            print(f"  against {labels[reference]}: skip: {str(skipped).splitlines()[0]}", flush=True)
            return Side.SKIP, done
        side = side_of(outcome.verdict, against)
        done.append((reference, side, outcome, None))
        print(f"  against {labels[reference]}: {outcome_line(outcome)} ({side})", flush=True)
        if side != Side.UNDECIDED:
            return side, done
    return Side.UNDECIDED, done

"""``python -m hwregress report compare A.json B.json -o diff.html [--fail-on regression]``: session B judged against
session A test by test with the gate's statistics (:mod:`hwregress.judge.session_compare`), as a page and a summary
line. With ``--store [URL]``, A and B are the ids of two sessions in the fleet store (a name, results.json's
``meta.session``, or the store's UUID), rebuilt as results documents (:mod:`hwregress.store.session_results`).

Exit status: 0, or 1 when a test's verdict matches ``--fail-on`` (``regression``, ``improvement`` or ``any``; an
``invalid`` test, one without samples or with a sample that is not a finite number > 0, matches each of them), 2 on a
user error (one line on stderr, as every ``python -m hwregress`` command), comparing nothing included: no test in both
sessions, or none measured in both.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hwregress.cli.baselines import FAIL_ON
from hwregress.cli.common import CliError, command_inputs, fraction, load_results, output_path, write_output
from hwregress.cli.store_source import add_store_option, reading_store, resolved_url, stored_session
from hwregress.store.verdicts import Verdict

# a test the comparison could not judge (invalid: no samples, or a defect in them) fails every gate: a gate never
# passes on a test it could not judge
COMPARE_FAIL_ON = {name: {*verdicts, Verdict.INVALID.value} for name, verdicts in FAIL_ON.items()}
NOTHING_FIX = ("give two results.json of sessions that ran the same tests, e.g. the same pytest selection on both "
               "machines")


def add_compare_parser(report: Any) -> argparse.ArgumentParser:
    """Add ``compare`` to the ``report`` subcommands (``report``'s ``add_subparsers()`` object); returns its parser."""

    compare = report.add_parser("compare", help="session B judged against session A, test by test, as one page")
    compare.add_argument("a", help="the reference session's results.json (with --store: its session id)")
    compare.add_argument("b", help="the candidate session's results.json, judged against A (with --store: its id)")
    compare.add_argument("-o", "--output", required=True, help="the HTML file to write")
    compare.add_argument("--fail-on", choices=sorted(COMPARE_FAIL_ON), default=None,
                         help="exit 1 when any test's verdict of B against A matches (regression, improvement or any); "
                              "an invalid test (no samples, or a defect in them) matches each")
    compare.add_argument("--tolerance", type=fraction, default=None,
                         help="throughput change that counts at least (default: the tests' own, "
                              "0.15 on CPUs, 0.05 else)")
    compare.add_argument("--max-threshold", type=fraction, default=None,
                         help="the cap of the threshold, which a one-session reference starts from (default: 0.25)")
    compare.add_argument("--accept-identity", action="store_true",
                         help="judge tests whose hardware identity differs between A and B instead of 'other-hardware'")
    add_store_option(compare, "sessions A and B (by name or id)")
    compare.set_defaults(handler=cmd_compare)
    return compare


def cmd_compare(args: argparse.Namespace) -> int:
    """``report compare``: write the page, print the counts and each test that matches ``--fail-on`` (stderr)."""
    from hwregress.judge.session_compare import compare_sessions, nothing_compared, tolerances_for
    from hwregress.report.compare_view import render_compare
    from hwregress.store.results import machine_label

    if args.store is None:
        output = output_path(args.output, command_inputs([args.a, args.b]))
        sessions, sources = [load_results(Path(args.a)), load_results(Path(args.b))], [args.a, args.b]
    else:
        from hwregress.store.database import sqlite_files

        url = resolved_url(args.store)
        output = output_path(args.output, command_inputs(sqlite_files(url)))
        with reading_store(url) as store:
            sessions = [stored_session(store, args.a), stored_session(store, args.b)]
            sources = [f"session {args.a} in {store.url}", f"session {args.b} in {store.url}"]
    try:
        tolerances = tolerances_for(args.tolerance, args.max_threshold)
    except ValueError as error:
        raise CliError("--max-threshold", str(error),
                       "give a cap at least the tolerance, e.g. --max-threshold 0.25") from None
    comparison = compare_sessions(*sessions, tolerances=tolerances, accept_identity=args.accept_identity)
    nothing = nothing_compared(comparison)
    if nothing is not None:
        raise CliError(f"{args.a} and {args.b}", f"{nothing}; nothing was compared", NOTHING_FIX)
    write_output(output, render_compare(comparison, [machine_label(s) for s in sessions], sources,
                                         [s.meta for s in sessions]))
    counts = ", ".join(f"{count} {verdict}" for verdict, count in comparison.counts().items()) or "no test in both"
    print(f"wrote {output} ({len(comparison.tests)} tests in both sessions: {counts})")
    failing = comparison.matching(COMPARE_FAIL_ON[args.fail_on]) if args.fail_on else []
    for test in failing:
        why = f": {test.why_not}" if test.verdict == Verdict.INVALID else ""
        ratio = f" (B/A {test.throughput.ratio:.3f})" if test.throughput is not None else ""
        print(f"hwregress: {test.verdict}: {test.test_id}{why}{ratio}", file=sys.stderr)
    return 1 if failing else 0

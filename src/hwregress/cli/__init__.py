"""``python -m hwregress``: inspect and compare baselines, merge several machines' results into one page.

    python -m hwregress baselines list [--dir baselines]
    python -m hwregress baselines show KEY|FILE [--dir baselines]
    python -m hwregress baselines diff A B [--tolerance F] [--fail-on regression|improvement|any]
                                          (each a baselines file, a hardware key or a results.json)
    python -m hwregress report merge RESULTS.json... -o FILE.html [--history-dir DIR]...
    python -m hwregress report render RESULTS.json|UNFINISHED.jsonl -o FILE.html [--history-dir DIR]
    python -m hwregress report compare A.json B.json -o FILE.html [--fail-on regression|improvement|any]
                                       [--tolerance F] [--max-threshold F] [--accept-identity]
    python -m hwregress history [render -o FILE.html] [--dir reports/history] [--key K]... [--test SUBSTRING]
                                [--since DATE] [--last N] [--tolerance 0.05] [--fail-on regression|drift|any]
                                [--status regression|drift|improvement|accepted|steady|short|changed]...
                                [--format text|json]
    python -m hwregress history append ARCHIVED.jsonl... [--dir reports/history]
                                (the finished records of dead sessions' journals, marked interrupted, once)

Every error is one line ``hwregress: <file>: <what> (<fix>)`` on stderr and exit status 2. ``baselines diff``
exits 1 when a test's direction matches ``--fail-on``;
``report compare`` exits 1 when B's verdict against A matches ``--fail-on`` (an invalid test matches each) and 2 when
nothing was compared;
``history`` exits 1 when a test's latest segment matches ``--fail-on`` (``regression``: a regression or a drift).
Outputs are written atomically, only to a regular file or a new path (never a FIFO or a device), and never over a
file the command reads (its results files and every file of a history folder it reads).
"""

from __future__ import annotations

import argparse
import os
import sys
import typing
from collections.abc import Sequence

from hwregress.cli import baselines, history, report
from hwregress.cli.common import CliError
from hwregress.store.baselines import BaselineError

# One module per subcommand (baselines, report, history), each adding its own arguments to the parser built here;
# what they share is in common. None of them imports torch (tests/test_architecture.py checks it).


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is a :class:`CliError` (one line) instead of usage text and an exit."""

    def error(self, message: str) -> typing.NoReturn:
        raise CliError(self.prog, message, f"see {self.prog} --help")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m hwregress", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for command in (baselines, report, history):
        command.add_commands(commands)
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

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
    python -m hwregress store push RESULTS.json... | import PATH... | export --dir DIR [--store URL]
                                (the fleet store: SQLite by default, PostgreSQL for a fleet; docs/store.md)
    python -m hwregress store bisections [--last N] | bisection ID [-o PAGE.html] [--json FILE]
                                (the bisections the store keeps: listed, or one's page)
    python -m hwregress check [--devices cuda:0,cpu|all] [--only NAME,...] [--json FILE]
                                (does hwregress measure this machine right? hwregress.check.command)
    python -m hwregress bisect --stacks PY1,PY2,... [--threshold F] [--looks 20,40,80] [--json FILE]
                               [--work-dir DIR] [--probe-timeout S] [-n N --devices LIST] [--store URL]
                               [-- PYTEST ARGS]
                                (which stack first made the tests slower: docs/bisect.md; exit 0 culprit, 1 none,
                                3 undecided)
    python -m hwregress bisect --repo PATH --good REV [--bad REV] [--setup CMD] | --env-steps FILE  [...as above]
                                (the same over a repository's commits, or over environment settings)
    python -m hwregress bisect-step --against REV [--bad REV] [--setup CMD] [-- PYTEST ARGS]
                                (one step of git bisect run: exit 0 good, 1 bad, 125 skip, 128 usage error)

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

from hwregress.bisect.usage import BisectUsageError
from hwregress.cli import baselines, bisect, bisect_step, history, report, store
from hwregress.cli.common import CliError
from hwregress.store.baseline_file import BaselineError

# One module per subcommand (baselines, report, history), each adding its own arguments to the parser built here;
# what they share is in common. None of them imports torch (tests/project/test_architecture.py checks it).


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is a :class:`CliError` (one line) instead of usage text and an exit."""

    def error(self, message: str) -> typing.NoReturn:
        raise CliError(self.prog, message, f"see {self.prog} --help")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m hwregress", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for command in (baselines, report, history, store, bisect, bisect_step):
        command.add_commands(commands)
    return parser


STDOUT = "<stdout>"  # the file an error of writing the output names


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 fine, 1 ``--fail-on`` matched, 2 a user error).
    Set ``HWREGRESS_DEBUG=1`` to see the traceback of an unexpected error. A reader that closes stdout early
    (``python -m hwregress history | head``) is a normal end of the output: the command goes on with its output
    discarded, so its status is its own (a ``--fail-on`` gate still fails), and nothing is printed about the pipe."""
    args = argparse.Namespace()
    stdout, sys.stdout = sys.stdout, _Output(sys.stdout)
    try:
        args = build_parser().parse_args(argv)
        status = int(args.handler(args) or 0)
        sys.stdout.flush()  # a closed pipe or a full disk shows here, not at exit where it cannot be handled
        return status
    except (CliError, BaselineError, BisectUsageError) as error:
        message = str(error)
    except OSError as error:
        if error.filename == STDOUT:
            _discard_output(stdout)  # what is still buffered must not fail again at exit
        message = _os_error_message(error, args)
    except Exception as error:
        if os.environ.get("HWREGRESS_DEBUG"):
            raise
        message = (f"{_subject(args)}: unexpected {type(error).__name__}: {error} "
                   "(a defect in hwregress: report it; HWREGRESS_DEBUG=1 shows where)")
    finally:
        sys.stdout = stdout
    print(f"hwregress: {message}", file=sys.stderr)
    return _usage_status(argv, args)


def _usage_status(argv: Sequence[str] | None, args: argparse.Namespace) -> int:
    """2, or the status a command declares for its usage errors (``bisect-step``: 128, which ``git bisect run``
    reads as "stop"), found from the command line where parsing failed before the command was known."""
    if hasattr(args, "usage_status"):
        return int(args.usage_status)
    words = list(sys.argv[1:] if argv is None else argv)
    return bisect_step.USAGE_ERROR if words[:1] == ["bisect-step"] else 2


class _Output:
    """``sys.stdout`` while a command runs: an error writing it names stdout as its file, as a file's error does; once
    the reader has gone (a broken pipe), what the command writes is discarded and the command goes on."""

    def __init__(self, stream: typing.TextIO) -> None:
        self._stream = stream
        self._reader_gone = False

    def write(self, text: str) -> int:
        if self._reader_gone:
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._discard()
            return len(text)
        except OSError as error:
            error.filename = error.filename or STDOUT
            raise

    def flush(self) -> None:
        if self._reader_gone:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._discard()
        except OSError as error:
            error.filename = error.filename or STDOUT
            raise

    def _discard(self) -> None:
        self._reader_gone = True
        _discard_output(self._stream)

    def __getattr__(self, name: str) -> typing.Any:
        return getattr(self._stream, name)


def _os_error_message(error: OSError, args: argparse.Namespace) -> str:
    reason = error.strerror or str(error)
    if error.filename == STDOUT:
        return f"stdout: {reason} (the output could not be written: check where it goes, e.g. its free space)"
    return f"{error.filename or _subject(args)}: {reason} (check the path and its permissions)"


def _subject(args: argparse.Namespace) -> str:
    """What an error without a file of its own is about: the command's input, else the command (never "hwregress",
    which the line already starts with)."""
    for name in ("source", "target", "dir"):
        if getattr(args, name, None):
            return str(getattr(args, name))
    return " ".join(["python -m hwregress", *filter(None, (getattr(args, "command", None),
                                                            getattr(args, "action", None)))])


def _discard_output(stream: typing.TextIO) -> None:
    """Point ``stream``'s descriptor at the null device, so that the flush at exit of what is still buffered cannot
    fail again (the recipe of Python's documentation on SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stream without a descriptor (captured in a test): nothing to do
        pass

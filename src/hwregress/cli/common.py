"""What every subcommand of ``python -m hwregress`` shares: the one-line user error (:class:`CliError`), reading
inputs (a results file checked record by record, a regular file refused otherwise), writing outputs atomically, only
to a regular file or a new path, never over a file the command reads and never where a history folder it reads would
take it for a history file (:func:`command_inputs`), and the argument types."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwregress.store import results as results_module
from hwregress.store.atomic import (
    NotARegularFileError,
    atomic_write_text,
    describe_kind,
    read_regular_file,
    replaceable_target,
)
from hwregress.store.history import HistoryStore
from hwregress.store.journal import dataclass_values
from hwregress.store.results import record_problem

RESULTS_FIX = "give a results.json written by hwregress, or re-run the session that wrote it"
OUTPUT_KIND_FIX = "give a new file or a regular file to replace, e.g. -o report.html"


class CliError(Exception):
    """A user error, printed as ``hwregress: <file>: <what> (<fix>)``; exit status 2."""

    def __init__(self, file: str | os.PathLike[str], what: str, fix: str) -> None:
        what = str(what)
        prefix = f"{file}: "
        while what.startswith(prefix):  # messages from the library already name the file: say it once
            what = what[len(prefix):]
        super().__init__(f"{file}: {what} ({fix})")


def require_regular(path: Path, what: str) -> None:
    """Refuse a missing path, a folder or a device before anything tries to read it."""
    try:
        mode = path.stat().st_mode
    except OSError as error:
        raise CliError(path, f"cannot open: {error.strerror or error}", f"give the path of {what}") from None
    if not stat.S_ISREG(mode):
        raise CliError(path, f"is {describe_kind(mode)}, not a file", f"give the path of {what}")


def load_results(path: Path) -> results_module.SessionResults:
    """A results file, every record of it checked against the types :class:`TestRecord` declares."""
    require_regular(path, "a results.json")
    try:
        session = results_module.load(path)
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as error:
        raise CliError(path, str(error) or type(error).__name__, RESULTS_FIX) from None
    for index, record in enumerate(session.records):
        problem = record_problem(dataclass_values(record))
        if problem is not None:
            raise CliError(path, f"record {index} ({record.test_id}) is malformed: {problem}", RESULTS_FIX)
    return session


def is_results_file(path: Path) -> bool:
    try:
        data = json.loads(read_regular_file(path))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "records" in data and "entries" not in data


@dataclass(frozen=True)
class CommandInputs:
    """What a command reads (:func:`command_inputs`): the files named on its command line and the history folders."""

    files: list[Path]
    histories: list[HistoryStore]

    def all_files(self) -> list[Path]:
        """The files named and every file of each history folder (:meth:`HistoryStore.files`: the history files and
        the package lists; a store's own files, such as a database, belong in that method)."""
        return self.files + [path for store in self.histories for path in store.files()]


def command_inputs(files: Iterable[str | os.PathLike[str]] = (),
                   history_dirs: Iterable[str | os.PathLike[str]] = ()) -> CommandInputs:
    """Everything a command reads, which its output may be none of: the files named on its command line (results,
    journals) and each history folder it reads."""
    return CommandInputs([Path(path) for path in files], [HistoryStore(folder) for folder in history_dirs])


def output_path(output: str, inputs: CommandInputs) -> Path:
    """Where to write: a regular file or a new path that is none of the files of ``inputs`` (:func:`command_inputs`),
    through any link or relative spelling, and not a name a history folder of ``inputs`` would read as a hardware key's
    history (:meth:`HistoryStore.would_read`). Checked before anything is read or rendered.

    Raises:
        CliError: an empty path, a folder, a FIFO, a device or a socket (or a link to one), one of the inputs, or a
            ``<key>.jsonl`` of a history folder read.
    """
    if not output.strip():
        raise CliError("-o", "the output path is empty", "give the HTML file to write, e.g. -o report.html")
    path = Path(output)
    if path.is_dir():
        raise CliError(path, "is a folder", f"give a file inside it, e.g. -o {path / 'report.html'}")
    for source in inputs.all_files():
        if _same_file(path, Path(source)):
            raise CliError(output, f"is the input {source}", "choose another -o: an output never overwrites an input")
    for store in inputs.histories:
        if store.would_read(path):
            raise CliError(output, f"would be read as a hardware key's history of {store.directory}, as every "
                                   "<key>.jsonl there is", "write the page outside the history folder, e.g. -o "
                                                           "dashboard.html")
    try:
        replaceable_target(path)
    except NotARegularFileError as error:
        raise CliError(path, str(error), OUTPUT_KIND_FIX) from None
    return path


def _same_file(first: Path, second: Path) -> bool:
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        return os.path.samefile(first, second)  # hard links
    except OSError:
        return False


def write_output(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`hwregress.store.atomic.atomic_write_text`).

    Raises:
        CliError: a FIFO, device, socket or folder is there by now, or the file cannot be written.
    """
    try:
        atomic_write_text(path, text)
    except NotARegularFileError as error:
        raise CliError(path, str(error), OUTPUT_KIND_FIX) from None
    except OSError as error:
        raise CliError(path, f"cannot be written: {error.strerror or error}",
                       "check the folder exists, is writable and has free space") from None


def report_errors(errors: Sequence[str]) -> int:
    for error in errors:
        print(f"hwregress: {error}", file=sys.stderr)
    return 2 if errors else 0


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def history_store(directory: Path) -> HistoryStore:
    if not directory.is_dir():
        raise CliError(directory, "no such history folder",
                       "give the --history-dir a session wrote (default reports/history)")
    return HistoryStore(directory)


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in [0, 1), e.g. 0.05 for 5%")
    return value

"""Where ``python -m hwregress check`` writes: the ``--json`` file and stdout, each checked before any check runs, so
that an output that cannot be written costs seconds, not the checks' minutes (and the contender's busy loops), and is
one line (:class:`OutputError`) with the usage-error status instead of a traceback after the run.

Before: the ``--json`` path must be a new path or a regular file (never a folder or a device: ``/dev/full``), and its
folder (or the nearest folder above it that exists: the write makes the rest) must take a new file (a probe file is
made there and removed: a read-only mount refuses it, even to root); stdout must take the table's first line, written
and flushed. During the run each write is checked again: a disk that fills, a reader that goes.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

from hwregress.store.atomic import NotARegularFileError, atomic_write_json, describe_kind

JSON_FIX = "give a new file or a regular file to replace, in a folder that takes writes, e.g. --json check.json"
STDOUT_FIX = "point stdout at a file or terminal that takes writes, e.g. > check.txt"


class OutputError(Exception):
    """An output of the command that cannot be written: one line ``<output>: <what> (<fix>)``; exit status 2."""


def json_target(text: str) -> Path:
    """The ``--json`` path ``text`` as a :class:`~pathlib.Path`, once it is known that it can be written.

    A probe file is made and removed in its folder (or the nearest existing folder above it).

    Raises:
        OutputError: an empty path, a folder, a device, FIFO or socket (or a link to one), a file where a folder on the
            way should be, or a folder that refuses a new file (read-only, no permission, full); the message names
            ``--json`` and the path.
    """
    shown = f"--json {text!r}"
    if not text.strip():
        raise OutputError(f"{shown}: the path is empty (give the JSON file to write, e.g. --json check.json)")
    path = Path(text)
    try:
        mode: int | None = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as error:
        raise OutputError(f"{shown}: cannot be examined: {error.strerror or error} ({JSON_FIX})") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"{shown}: is a folder (give a file inside it, e.g. --json {str(path / 'check.json')!r})")
    if mode is not None and not stat.S_ISREG(mode):
        raise OutputError(f"{shown}: is {describe_kind(mode)}, not a file ({JSON_FIX})")
    folder = Path(os.path.realpath(path)).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"{shown}: {folder} is a file, not a folder ({JSON_FIX})")
    try:
        handle, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise OutputError(f"{shown}: cannot be written in {folder}: {error.strerror or error} ({JSON_FIX})") from None
    return path


def first_line(text: str) -> None:
    """Print ``text`` and flush stdout, before any check runs: the check that stdout takes writes.

    Raises:
        OutputError: stdout refused the write (a full disk, ``/dev/full``, a descriptor open read-only, a reader that
            has gone); what is still buffered is discarded, so that the exit does not fail on it again.
    """
    _print(text, "nothing was checked")


def table_line(text: str) -> None:
    """Print one line of the table as the checks go, flushed.

    Raises:
        OutputError: as :func:`first_line`; the checks stop.
    """
    _print(text, "the checks stopped here")


def write_results(text: str, payload: dict[str, object]) -> None:
    """Write ``payload`` as JSON to the ``--json`` path ``text``, atomically
    (:func:`hwregress.store.atomic.atomic_write_json`).

    Raises:
        OutputError: something other than a regular file is there by now, or the file cannot be written (a disk
            that filled); the message names ``--json`` and the path.
        ValueError: a value JSON cannot hold (see :func:`~hwregress.store.atomic.atomic_write_json`).
    """
    shown = f"--json {text!r}"
    try:
        atomic_write_json(text, payload)
    except NotARegularFileError:
        try:
            kind = describe_kind(os.stat(text).st_mode)
        except OSError:
            kind = "no regular file"
        raise OutputError(f"{shown}: is {kind} by now; the checks stopped here ({JSON_FIX})") from None
    except OSError as error:
        raise OutputError(f"{shown}: cannot be written: {error.strerror or error}; the checks stopped here "
                          f"({JSON_FIX})") from None


def _print(text: str, then: str) -> None:
    try:
        print(text, flush=True)
    except OSError as error:
        _discard_stdout()
        raise OutputError(f"stdout: {error.strerror or error} ({then}: {STDOUT_FIX})") from None


def _discard_stdout() -> None:
    """Point stdout's descriptor at the null device, so that the flush at exit of what is still buffered cannot fail
    again (the recipe of Python's documentation on SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stream without a descriptor (captured in a test): nothing to do
        pass

"""The session history: one JSON line per measured test per session, appended to ``<dir>/<hardware-key>.jsonl``.

A nightly job is a time series. The baselines file keeps what a machine *should* do; the history keeps what it
*did*, every session, so a slow drift or the session where a level changed can be found later
(:mod:`hwregress.judge.trends`). A CI runner keeps the folder as a cache or an artifact between runs.

Discipline, as for baselines (:mod:`hwregress.store.baselines`):

- Only ever appended: a line once written is never rewritten. Appends hold ``<file>.lock`` (``filelock``), so
  concurrent sessions on one runner interleave whole lines; each append is one ``write`` of whole lines to a
  file opened with ``O_APPEND`` and is fsynced before the lock is released.
- A crash mid-append can leave a torn last line. The next append starts on a fresh line, and readers skip a
  line that is not a valid row with a warning naming the file and line number; every other line still counts.
- The installed packages are recorded by hash on every row; the list behind each hash is written once to
  ``<dir>/packages/<hash>.json``, so the history can say which packages changed between two sessions.
- Reading streams: one line at a time (at most ``MAX_LINE_BYTES``), each row checked against the types
  :class:`hwregress.store.history_row.HistoryRow` declares as it is read; a bad row is skipped with a warning naming
  file, line and field, and the rest is read. A history "file" that is not a regular file (a FIFO, a link to
  ``/dev/zero``, a folder) is refused by kind before anything reads or writes it.

Row fields: :class:`hwregress.store.history_row.HistoryRow` (``HISTORY_ROW_VERSION`` 1) declares each with its type
and meaning, and ``schemas/history_row.schema.json`` is generated from it. In words: ``session``, ``time`` (UTC, ISO
8601), the test's identity (``test_id``, ``family``, ``model``, ...), the hardware's (``hardware_key``, ``identity``,
``machine_id``), the software's (``hwregress_version``, ``environment``, ``packages`` hash), the per-round samples'
``median``, ``q1``, ``q3``, ``iqr`` and ``n``, the session's ``verdict``, ``ratio``, ``threshold`` and baseline, the
window's ``telemetry`` means, the CPU ``health`` shares the first two causes of a ``diagnosis``, and ``interrupted``
(``true`` on the rows of a session that did not run to its end: interrupted, or killed and its finished records
recovered from its journal (:mod:`hwregress.store.journal`); absent otherwise).
"""

from __future__ import annotations

import datetime as _dt
import errno
import functools
import hashlib
import json
import os
import stat
import typing
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from filelock import FileLock

from hwregress import __version__
from hwregress.store.atomic import (
    NotARegularFileError,
    atomic_write_json,
    describe_kind,
    open_regular_file,
    read_regular_file,
)
from hwregress.store.history_row import HISTORY_ROW_VERSION, HistoryRow, SharedRows, row_from_record, row_problem
from hwregress.store.results import TestRecord
from hwregress.store.times import utc

LOCK_TIMEOUT_S = 120.0
MAX_LINE_BYTES = 1 << 20  # a row is about 2 KB: a longer line is no row, and is skipped without being held whole


@dataclass
class HistoryRead:
    """The rows of one history file in file order, and a warning for each line skipped."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def installed_packages() -> list[str]:
    """``name==version`` of every installed distribution, sorted case-insensitively, duplicates removed."""
    every = (dist.metadata for dist in metadata.distributions())  # each read of dist.metadata (and .version) parses it
    found = {f"{fields['Name']}=={fields['Version']}" for fields in every if fields["Name"]}
    return sorted(found, key=str.lower)


def package_hash(packages: Sequence[str]) -> str:
    """The first 16 hex digits of the SHA-256 of the package list, one ``name==version`` per line."""
    return hashlib.sha256("\n".join(packages).encode("utf-8")).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def _this_process_packages() -> tuple[str, ...]:
    return tuple(installed_packages())


class HistoryStore:
    """The history files under ``directory``, one per hardware key."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path_for(self, hardware_key: str) -> Path:
        """``<directory>/<hardware_key>.jsonl``.

        Raises:
            ValueError: the key would name a file outside the folder (a path separator, or empty).
        """
        if not hardware_key or "/" in hardware_key or "\\" in hardware_key or hardware_key.startswith("."):
            raise ValueError(f"hardware key {hardware_key!r} cannot name a history file; keys are "
                             "like amd-epyc-f26m2-2t")
        return self.directory / f"{hardware_key}.jsonl"

    def hardware_keys(self) -> list[str]:
        """Keys of every ``<key>.jsonl`` present, sorted (hidden files, such as a ``.backup.jsonl``, are not keys).
        A name that is not a regular file (a FIFO, a link to a device, a folder) is a key too, so that reading it
        says what it is instead of leaving it out unsaid."""
        if not self.directory.is_dir():
            return []
        return sorted(path.stem for path in self.directory.glob("*.jsonl") if not path.name.startswith("."))

    def would_read(self, path: str | os.PathLike[str]) -> bool:
        """Whether a file at ``path``, there or not yet, is one :meth:`hardware_keys` would take for a key's history:
        a ``<key>.jsonl`` in the folder, by its name there or at the end of its links."""
        folder, path = os.path.realpath(self.directory), Path(path)
        named_there = Path(os.path.realpath(path.parent)) / path.name
        return any(os.path.dirname(candidate) == folder and candidate.name.endswith(".jsonl")
                   and not candidate.name.startswith(".") for candidate in (named_there, Path(os.path.realpath(path))))

    def files(self) -> list[Path]:
        """Every file this store reads: the history file of each hardware key and each recorded package list (the
        files a command that reads this folder must never write over). Empty when the folder does not exist."""
        package_lists = sorted(path for path in self._packages_folder().glob("*.json") if path.is_file())
        return [self.path_for(key) for key in self.hardware_keys()] + package_lists

    def append_session(self, records: Iterable[TestRecord], session: str, time: str, interrupted: bool = False,
                       machine_id: str | None = None) -> dict[str, int]:
        """Append one row per measured record of this session to its hardware key's file (:func:`row_from_record`,
        this hwregress's version); record the installed packages' list once.

        Args:
            interrupted: the session did not run to its end: its rows are marked.
            machine_id: this machine's id (``meta.machine_id``; None: unknown), on every row, so that ``store import``
                of the history files its sessions under the host their pushes name.

        Returns:
            rows appended per hardware key.

        Raises:
            OSError: the folder or a file cannot be written (nothing half-written stays unreadable: see the
                module doc).
            ValueError: a row JSON cannot hold; nothing more is written from its key on.
            filelock.Timeout: another writer held a file's lock for more than ``LOCK_TIMEOUT_S``.
        """
        packages = _this_process_packages()
        digest = package_hash(packages) if packages else ""
        by_key = _rows_by_key(records, session, time, digest, interrupted, __version__, machine_id)
        if by_key and packages:
            self._remember_packages(digest, packages)
        for key, rows in by_key.items():
            self.append(key, rows)
        return {key: len(rows) for key, rows in by_key.items()}

    def append_recovered(self, records: Iterable[TestRecord], session: str, time: str, interrupted: bool,
                         hwregress_version: str | None) -> tuple[int, int]:
        """Append the rows of the finished records of a session that is gone, from its journal
        (:mod:`hwregress.store.journal`), each unless its file holds a row of that session and test id already, so a
        journal recovered twice is in the history once. Its package list is unknown (``packages`` is "": this
        process's is not the one it ran with); ``hwregress_version`` is the version that wrote the journal (None:
        unknown, left out of the rows).

        Returns:
            (rows its measured records make, rows appended now): the others were there already.

        Raises:
            OSError, ValueError, filelock.Timeout: see :meth:`append_session`.
        """
        by_key = _rows_by_key(records, session, time, "", interrupted, hwregress_version)
        appended = sum(self._append_absent(key, rows, session) for key, rows in by_key.items())
        return sum(map(len, by_key.values())), appended

    def append(self, hardware_key: str, rows: Sequence[dict[str, Any]]) -> Path:
        """Append ``rows`` (JSON objects) as lines to the key's file under its lock. Returns the file.

        Raises:
            ValueError: a row holds NaN, infinity or a value JSON cannot hold; nothing is written.
            OSError, filelock.Timeout: see :meth:`append_session`.
        """
        path = self.path_for(hardware_key)
        payload = b"".join(_encoded(path, rows))
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S):
            _append_lines(path, payload)
        return path

    def _append_absent(self, hardware_key: str, rows: Sequence[HistoryRow], session: str) -> int:
        """:meth:`append` of the ``rows`` (all of ``session``) whose test id no row of ``session`` in the file has,
        read under the same lock as the write, one line at a time. Returns how many were appended."""
        path = self.path_for(hardware_key)
        lines = _encoded(path, rows)  # refuse a row JSON cannot hold before anything is read or written
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S):
            present = {row["test_id"] for row in iter_history(path, []) if row["session"] == session}
            absent = [line for row, line in zip(rows, lines, strict=True) if row["test_id"] not in present]
            if absent:
                _append_lines(path, b"".join(absent))
        return len(absent)

    def read(self, hardware_key: str) -> HistoryRead:
        """Every valid row of the key's file, in file order (an absent file reads as empty).

        Raises:
            OSError: the file exists but cannot be read (permissions; a folder or device in its place).
        """
        return read_history(self.path_for(hardware_key))

    def rows(self, hardware_key: str, warnings: list[str]) -> Iterator[HistoryRow]:
        """:func:`iter_history` of the key's file: its valid rows one at a time, a warning per skipped line."""
        return iter_history(self.path_for(hardware_key), warnings)

    def packages(self, digest: str) -> list[str] | None:
        """The package list recorded under ``digest``; None when it was never recorded or cannot be read."""
        try:
            data = json.loads(read_regular_file(self._package_path(digest)))
        except (OSError, ValueError):
            return None
        return [str(item) for item in data] if isinstance(data, list) else None

    def _packages_folder(self) -> Path:
        return self.directory / "packages"

    def _package_path(self, digest: str) -> Path:
        return self._packages_folder() / f"{digest}.json"

    def _remember_packages(self, digest: str, packages: Sequence[str]) -> None:
        path = self._package_path(digest)
        if not path.exists():
            atomic_write_json(path, list(packages))


def session_history_rows(records: Iterable[TestRecord], session: str, time: str,
                         interrupted: bool = False) -> list[HistoryRow]:
    """The history rows ``records`` of one session make (:func:`row_from_record`; no package list), as
    :meth:`HistoryStore.append_session` would append them: for a session's trends where it writes no history."""
    return [row for rows in _rows_by_key(records, session, time, "", interrupted, __version__).values()
            for row in rows]


def _rows_by_key(records: Iterable[TestRecord], session: str, time: str, packages: str, interrupted: bool,
                 hwregress_version: str | None, machine_id: str | None = None) -> dict[str, list[HistoryRow]]:
    """The history row of each measured record (:func:`row_from_record`), by hardware key."""
    by_key: dict[str, list[HistoryRow]] = {}
    for record in records:
        row = row_from_record(record, session, time, packages, interrupted, hwregress_version, machine_id)
        if row is not None:
            by_key.setdefault(row["hardware_key"], []).append(row)
    return by_key


def _encoded(path: Path, rows: Sequence[Any]) -> list[bytes]:
    """Each row as one JSON line, UTF-8.

    Raises:
        ValueError: a row holds NaN, infinity or a value JSON cannot hold (named with ``path``).
    """
    try:
        return [(json.dumps(row, ensure_ascii=False, allow_nan=False, sort_keys=True) + "\n").encode("utf-8")
                for row in rows]
    except (ValueError, TypeError) as error:  # UnicodeEncodeError (a lone surrogate) is a ValueError
        raise ValueError(f"{path}: a history row cannot be written as JSON ({error}); nothing was appended") from None


def _append_lines(path: Path, payload: bytes) -> None:
    """One ``write`` of whole lines at the end of ``path``, after a newline if a crash left a torn last line.

    Raises:
        NotARegularFileError: ``path`` is a FIFO, a device (a link to ``/dev/zero``), a folder: nothing is written.
            Its kind is checked before opening, as opening a FIFO to write blocks until a reader comes, and on the
            opened file (without blocking), in case it changed in between.
    """
    _refuse_irregular(path)
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), 0o666)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise NotARegularFileError(f"{path}: is {describe_kind(status.st_mode)}, not a regular file")
        if status.st_size and _last_byte(path, status.st_size) != b"\n":
            payload = b"\n" + payload
        written = 0
        while written < len(payload):
            written += os.write(descriptor, payload[written:])
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _refuse_irregular(path: Path) -> None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise NotARegularFileError(f"{path}: is {describe_kind(mode)}, not a regular file")


def _last_byte(path: Path, size: int) -> bytes:
    with path.open("rb") as stream:
        stream.seek(size - 1)
        return stream.read(1)


def read_history(path: str | os.PathLike[str]) -> HistoryRead:
    """The valid rows of a history file, skipping each invalid line with a warning ``<file>:<line>: ...``
    (:func:`iter_history`, all rows kept in a list).

    Raises:
        OSError: the file exists but cannot be read.
    """
    read = HistoryRead()
    read.rows.extend(iter_history(path, read.warnings))
    return read


def iter_history(path: str | os.PathLike[str], warnings: list[str]) -> Iterator[HistoryRow]:
    """The valid rows of a history file one at a time, in file order; for each line that is not a valid row (not
    JSON, another row version, a field of the wrong type, a time that is not ISO 8601, longer than
    ``MAX_LINE_BYTES``) a warning ``<file>:<line>: skipped: <why>`` is appended to ``warnings``. An absent file
    yields nothing. Memory: one line at a time, whatever the file's size.

    Raises (when iterated):
        NotARegularFileError: a FIFO, a device, a folder or a socket in the file's place (refused before reading).
        FileNotFoundError: the file is a symbolic link to nothing.
        OSError: the file cannot be read (permissions, I/O error); the rows before it were yielded.
    """
    source = Path(path)
    shared = SharedRows()
    try:
        stream = open_regular_file(source)
    except FileNotFoundError:
        if source.is_symlink():
            raise FileNotFoundError(errno.ENOENT, f"{source}: is a symbolic link to {os.readlink(source)}, "
                                                  "which does not exist") from None
        return
    with stream:
        for number, line in enumerate(_lines(stream), start=1):
            if line is None:
                warnings.append(f"{source}:{number}: skipped: longer than {MAX_LINE_BYTES} bytes, not a row")
                continue
            if not line.strip():
                continue
            row, problem = _parse_row(line)
            if row is None:
                warnings.append(f"{source}:{number}: skipped: {problem}")
            else:
                yield shared.row(row)


def _lines(stream: Any) -> Iterator[bytes | None]:
    """Each line of a binary stream (its newline kept), or None for one longer than ``MAX_LINE_BYTES`` (read past
    in pieces, never held whole)."""
    while line := stream.readline(MAX_LINE_BYTES + 1):
        if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
            yield line
            continue
        while (rest := stream.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
            pass
        yield None


def unreadable(path: str | os.PathLike[str], error: OSError) -> str:
    """The warning for a history file that could not be read: which file, and why (its kind, or the system's
    reason), and what to do."""
    reason = (error.strerror or str(error)).removeprefix(f"{path}: ")
    if isinstance(error, NotARegularFileError):
        return (f"{path}: history not read: {reason} (a history file is a regular file; move this one out of "
                "the folder)")
    return f"{path}: history not read: {reason} (check the file and its permissions)"


def _parse_row(line: bytes) -> tuple[HistoryRow | None, str]:
    try:
        row = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "not a JSON line (a torn or edited write)"
    if not isinstance(row, dict):
        return None, f"not a JSON object but {type(row).__name__}"
    if type(row.get("v")) is not int or row["v"] != HISTORY_ROW_VERSION:
        return None, f"row version {row.get('v')!r} is not {HISTORY_ROW_VERSION} (written by another hwregress version)"
    problem = row_problem(row)
    if problem is not None:
        return None, problem
    if row["median"] <= 0:
        return None, f"'median' must be a number > 0, found {json.dumps(row['median'])}"
    if parse_time(row["time"]) is None:
        return None, f"'time' must be an ISO 8601 time, found {row['time'][:40]!r}"
    return typing.cast(HistoryRow, row), ""  # row_problem checked the type of every field it declares


def parse_time(text: str) -> _dt.datetime | None:
    """An ISO 8601 time as an aware UTC datetime (a naive time is taken as UTC); None when unreadable."""
    try:
        moment = _dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return utc(moment)

"""Safe file I/O: atomic replacement of text and JSON files, and reads that accept regular files only.

A write goes to a temporary file in the destination's folder, is fsynced, then ``os.replace``-d over the
destination (POSIX ``rename(2)`` is atomic within one file system), and the folder is fsynced, so a reader
sees the old file or the new one, never half of one, and a crash leaves no torn file. The new file keeps the
permission bits of the file it replaces (a new file gets ``0o666 & ~umask``, as ``open()`` would give it,
not ``mkstemp``'s ``0o600``), and a symbolic link is written through to its target: the link stays a link.

A write goes only to a regular file or a new path: a FIFO, a device node, a socket or a folder there (or at the end
of a link) is refused, since the rename would put a regular file in its place (as root, ``-o /dev/null`` would
replace the system's ``/dev/null``).
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO


def safe_file_name(text: str, keep_last: int) -> str:
    """``text`` as one file name: letters, digits, ``-``, ``_`` and ``.`` kept, anything else ``_``, at most its last
    ``keep_last`` characters (a test id's parameters are at its end)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[-keep_last:]


class NotARegularFileError(OSError):
    """A path that names a folder, a device, a FIFO or a socket where a regular file was expected."""


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Replace the file at ``path`` (or the file its symlink points to) with ``text``, atomically.

    Returns the path actually written (the symlink's target when ``path`` is a link).

    Raises:
        NotARegularFileError: something other than a regular file is at ``path`` or its link's target (a FIFO, a
            device node, a socket, a folder); the message names it. Nothing is written.
        ValueError: ``text`` cannot be encoded in ``encoding``; the message names the file. Nothing is written.
        OSError: the folder cannot be created or written (permissions, full disk); no temporary file is left.
    """
    target = replaceable_target(path)
    try:
        payload = text.encode(encoding)
    except UnicodeEncodeError as error:
        raise ValueError(f"{path}: cannot be encoded as {encoding} ({error.reason} at character "
                         f"{error.start}); nothing was written") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_for(target)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(payload)
            stream.flush()
            os.fchmod(stream.fileno(), mode)
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _fsync_folder(target.parent)
    return target


def replaceable_target(path: str | os.PathLike[str]) -> Path:
    """The file a write to ``path`` replaces: ``path`` with every link resolved, which must be a regular file or
    nothing yet (a new file; a link to a missing file makes its target).

    What is at the target is checked, not opened, so a FIFO cannot block and a device is not touched. A kind that
    changes between this check and the rename is not caught: the check guards against a wrong path, not a race.

    Raises:
        NotARegularFileError: a folder, device node, FIFO or socket is there; the message names ``path``, its kind
            and, for a link, the target.
        OSError: the target cannot be examined (a folder on the way cannot be searched).
    """
    target = Path(os.path.realpath(path))
    try:
        mode = target.lstat().st_mode
    except FileNotFoundError:
        return target
    if not stat.S_ISREG(mode):
        through = f" (the link's target {target})" if os.path.islink(path) else ""
        raise NotARegularFileError(f"{path}: is {describe_kind(mode)}{through}, not a regular file or a new path; "
                                   "nothing was written")
    return target


def atomic_write_json(path: str | os.PathLike[str], data: Any, indent: int | None = 1) -> Path:
    """Write ``data`` as JSON (UTF-8, one trailing newline) to ``path`` with :func:`atomic_write_text`.

    NaN and Infinity are refused (RFC 8259 has no such numbers; ``json`` would write tokens other readers
    reject). Returns the path written.

    Raises:
        ValueError: a non-finite float (the message names the file and the key path, e.g.
            ``entries["a/b"].samples[2]``) or a value JSON cannot hold; nothing is written.
        OSError: see :func:`atomic_write_text`.
    """
    try:
        text = json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=False)
    except ValueError as error:
        if "out of range float" not in str(error).lower():
            raise ValueError(f"{path}: {error}; nothing was written") from None
        where = next(_non_finite_paths(data, ""), "a value")
        raise ValueError(f"{path}: {where} is NaN or infinite, which JSON cannot hold; nothing was written "
                         "(store null for a missing figure)") from None
    except TypeError as error:
        raise ValueError(f"{path}: {error}; nothing was written") from None
    return atomic_write_text(path, text + "\n")


def read_regular_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of ``path``, which must be a regular file (a symlink to one is followed).

    Opens without blocking, so a FIFO cannot hang the caller, and checks the opened file, so a link to
    ``/dev/zero`` or a folder is refused instead of read forever.

    Raises:
        FileNotFoundError: nothing at ``path``.
        NotARegularFileError: a folder, device, FIFO or socket.
        OSError: any other read failure (permissions, I/O error).
    """
    with open_regular_file(path) as stream:
        return stream.read()


def open_regular_file(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading in binary (buffered), after checking it is a regular file (a symlink to one
    is followed): for a caller that reads line by line. Opened without blocking and checked on the opened file
    (no race), so a FIFO cannot hang the caller and a link to ``/dev/zero`` is refused.

    Raises:
        FileNotFoundError, NotARegularFileError, OSError: see :func:`read_regular_file`.
    """
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        kind = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(kind):
            raise NotARegularFileError(f"{path}: is {describe_kind(kind)}, not a regular file")
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def describe_kind(mode: int) -> str:
    """``"a folder"``, ``"a character device"``, ... for an ``st_mode``."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


def _mode_for(target: Path) -> int:
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process umask, read from ``/proc`` where it can be (``os.umask`` must set it to read it,
    which races with other threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    current = os.umask(0o022)
    os.umask(current)
    return current


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable (POSIX: the directory entry lives in the folder); a no-op where folders
    cannot be opened (Windows)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _non_finite_paths(value: Any, where: str) -> Iterator[str]:
    """Key paths (``a["b"][3]``) of the NaN and infinite floats inside ``value``."""
    if isinstance(value, float) and not math.isfinite(value):
        yield where or "the value"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite_paths(item, f"{where}[{json.dumps(str(key), ensure_ascii=False)}]")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _non_finite_paths(item, f"{where}[{index}]")

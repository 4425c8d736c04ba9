"""The report templates' compiled code kept across processes: Jinja2's own ``FileSystemBytecodeCache``.

Each pytest session is a new process that renders one page, so the per-process environment
(``hwregress.report._environment``) compiles every template it renders again: ~0.4 s of CPU a session for the
report's nine templates on a 2-core VM, more than rendering them. Jinja2's bytecode cache keeps the compiled code in
its per-user folder in the system's temporary folder (created ``0700`` and checked by Jinja2) and drops an entry
whose template source changed (a checksum of the source). The cache only ever replaces compilation: the page is the
same with or without it.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping

import jinja2
from jinja2.bccache import Bucket, FileSystemBytecodeCache


class _QuietCache(FileSystemBytecodeCache):
    """A cache entry that cannot be read or written is a miss, never a page's failure (a full or read-only temporary
    folder, an entry another process is writing with a Jinja2 older than 3.1.2, which wrote in place)."""

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # any unreadable entry: EOFError, pickle.UnpicklingError, OSError...
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def bytecode_cache(settings: Mapping[str, object], directory: str | None = None) -> FileSystemBytecodeCache | None:
    """The bytecode cache of an environment whose compiled code ``settings`` shape (``trim_blocks``, the autoescaped
    extensions...: plain values, whose ``repr`` is the same in every process), or None where the process may not write
    caches (``PYTHONDONTWRITEBYTECODE``, ``-B``) or Jinja2 finds no safe folder for one. ``directory``: where the
    entries are kept; None, Jinja2's folder of this user in the system's temporary folder.

    Entries are named by Jinja2's version and ``settings`` too: the compiled code depends on both, which Jinja2's
    checksum of the template's source does not see.
    """
    if sys.dont_write_bytecode:
        return None
    shape = hashlib.sha256(repr((jinja2.__version__, sorted(settings.items()))).encode("utf-8")).hexdigest()[:12]
    try:
        return _QuietCache(directory, pattern=f"__hwregress_{shape}_%s.cache")
    except (OSError, RuntimeError):  # Jinja2's folder cannot be made, or is not this user's alone
        return None

"""The baseline store: one baselines file (:mod:`hwregress.store.baseline_file`) per hardware key in a folder,
updated under a file lock and replaced atomically, so concurrent writers (xdist workers) lose no entry and a crash
never leaves half a file. ``--update-baselines=force`` moves a file that cannot be read aside
(:meth:`BaselineStore.move_aside`), never deletes it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from hwregress.store.atomic import atomic_write_json, describe_kind
from hwregress.store.baseline_file import BaselineError, BaselineFile, check_entry, load_file

LOCK_TIMEOUT_S = 120.0


@dataclass
class Listing:
    """What a baselines folder holds: the hardware keys of its regular ``*.json`` files, and one note per
    ``*.json`` name that is not a regular file (a folder, a link to a device), which was skipped."""

    keys: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


class BaselineStore:
    """Baseline files under ``directory``, one per hardware key."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path_for(self, hardware_key: str) -> Path:
        """``<directory>/<hardware_key>.json``."""
        return self.directory / f"{hardware_key}.json"

    def scan(self) -> Listing:
        """The folder's baselines files (regular files only, links followed), sorted, and what was skipped."""
        listing = Listing()
        if not self.directory.is_dir():
            return listing
        for path in sorted(self.directory.glob("*.json")):
            try:
                mode = path.stat().st_mode
            except OSError as error:
                listing.skipped.append(f"{path}: skipped: {error.strerror or error}")
                continue
            if stat.S_ISREG(mode):
                listing.keys.append(path.stem)
            else:
                listing.skipped.append(f"{path}: skipped: {describe_kind(mode)}, not a regular file")
        return listing

    def hardware_keys(self) -> list[str]:
        """Keys of every baselines file present (regular files only), sorted."""
        return self.scan().keys

    def load(self, hardware_key: str) -> BaselineFile | None:
        """The file for ``hardware_key``, None when there is none.

        Raises:
            BaselineError: the file exists but cannot be trusted as a whole (see :func:`load_file`).
        """
        try:
            return load_file(self.path_for(hardware_key))
        except FileNotFoundError:
            return None

    def write_entries(self, hardware_key: str, device_name: str, entries: Mapping[str, dict[str, Any]],
                      replace_unreadable: bool = False) -> Path:
        """Merge ``entries`` into the file of ``hardware_key`` (same keys replaced, bad ones too, others kept).

        Holds ``<file>.lock`` while it re-reads, merges and atomically replaces the file, so concurrent
        writers serialize and none loses another's entries. With ``replace_unreadable`` a file that cannot
        be read as a whole is first moved aside (:meth:`move_aside`) and a new one started.

        Raises:
            BaselineError: an entry of ``entries`` fails :func:`check_entry` (nothing is written), or the
                existing file cannot be trusted and ``replace_unreadable`` is False (it is left untouched).
            ValueError: an entry holds a value JSON cannot store; nothing is written.
            filelock.Timeout: another writer held the lock for more than ``LOCK_TIMEOUT_S``.
        """
        path = self.path_for(hardware_key)
        for key, entry in entries.items():
            problem = check_entry(entry)
            if problem is not None:
                raise BaselineError(f"{path}: refusing to record entry {key!r}: it {problem} (a defect in the "
                                    "code that built the entry)", str(path), key)
        self.directory.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S):
            try:
                current = self.load(hardware_key)
            except BaselineError:
                if not replace_unreadable:
                    raise
                self._move_aside_locked(hardware_key)
                current = None
            current = current or BaselineFile(hardware_key, device_name)
            current.put(entries)
            current.device_name = current.device_name or device_name
            atomic_write_json(path, current.to_json())
        return path

    def move_aside(self, hardware_key: str) -> Path | None:
        """Rename the file of ``hardware_key`` to ``<file>.v<N>.bak`` (N its schema version) or
        ``<file>.unreadable.bak`` when it cannot be read as a whole; a ``.<i>`` is added before ``.bak``
        rather than overwrite an earlier backup. Never deletes anything.

        Returns the backup's path; None when the file is readable or absent (nothing moved).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.path_for(hardware_key)) + ".lock", timeout=LOCK_TIMEOUT_S):
            return self._move_aside_locked(hardware_key)

    def _move_aside_locked(self, hardware_key: str) -> Path | None:
        path = self.path_for(hardware_key)
        try:
            self.load(hardware_key)
            return None
        except BaselineError as error:
            tag = f"v{error.version}" if error.version is not None else "unreadable"
        if not path.exists() and not path.is_symlink():
            return None
        backup, index = path.with_name(f"{path.name}.{tag}.bak"), 0
        while backup.exists() or backup.is_symlink():
            index += 1
            backup = path.with_name(f"{path.name}.{tag}.{index}.bak")
        path.rename(backup)
        return backup

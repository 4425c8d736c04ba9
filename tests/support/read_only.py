"""A folder no process can write, root included (CI runs as root, and root ignores file permissions, so a ``chmod``
cannot make a file unwritable): an empty read-only tmpfs, or a folder's contents seen through a read-only bind mount,
for one test."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def read_only_mount(folder: Path) -> Iterator[Path]:
    """``folder`` (made if missing) with an empty read-only tmpfs mounted on it for the ``with`` block, unmounted after.

    Skips the calling test, with the reason, where the mount cannot be made (not root, no ``CAP_SYS_ADMIN``, no
    ``mount`` command: a container without the capability)."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                              capture_output=True, text=True, timeout=30)
    except OSError as error:
        pytest.skip(f"cannot mount a read-only tmpfs here ({error}): a read-only output needs one")
    if made.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here ({made.stderr.strip() or made.returncode}): a read-only "
                    "output needs root with CAP_SYS_ADMIN")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True, timeout=30, check=False)


@contextmanager
def read_only_view(writable: Path, view: Path) -> Iterator[Path]:
    """``view`` (made if missing): ``writable`` bind-mounted there read-only for the ``with`` block, unmounted after, so
    what is written into ``writable`` is read through ``view``, where nothing can be created or written, by root
    either.

    Skips the calling test, with the reason, where this process may not mount (not root, a container without
    ``CAP_SYS_ADMIN``)."""
    view.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["mount", "--bind", str(writable), str(view)], check=True, capture_output=True, text=True,
                       timeout=30)
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"cannot bind-mount here ({getattr(error, 'stderr', '') or error}): a read-only view needs root "
                    "with CAP_SYS_ADMIN")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True, capture_output=True, text=True,
                       timeout=30)
        yield view
    finally:
        subprocess.run(["umount", str(view)], capture_output=True, timeout=30, check=False)

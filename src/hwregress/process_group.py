"""Ending a child's process group, every process of it, how a process ended, in words, and its log's last lines: the
A/B workers', a distributed job's and the served model's. Torch-free; imports nothing of hwregress (the floor)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

TERM_GRACE_S = 3.0  # between SIGTERM and SIGKILL


def exit_status(returncode: int | None) -> str:
    """``"killed by signal SIGKILL"``, ``"exit code 1"`` or ``"still running"``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def end_process_group(process: subprocess.Popen[bytes], grace_s: float = TERM_GRACE_S) -> None:
    """End every process of the worker's group (the worker leads its own session, so the group id is its pid):
    SIGTERM, ``grace_s`` for the worker to exit, SIGKILL to the group, reap the worker, then wait up to ``grace_s``
    for the group to be gone."""
    if process.poll() is None:
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace_s)
    _signal_group(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + grace_s
    while _signal_group(process.pid, 0) and time.monotonic() < deadline:
        time.sleep(0.02)  # killed members not yet reaped by their new parent


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def log_tail(path: Path, count: int) -> list[str]:
    """The last ``count`` lines of a child's log ``path`` that are not blank; none where it cannot be read."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-count:]

"""Waiting for a process to be gone, as the self-tests of what a session leaves behind need."""

from __future__ import annotations

import time

import psutil


def gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process ``pid`` has ended (or is a zombie its parent has not yet reaped) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False

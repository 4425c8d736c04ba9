"""Processes of the self-tests: a support script started in a process of its own, and waiting for a process to be
gone, as the self-tests of what a session leaves behind need."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil


def start_script(script: Path, *args: str) -> subprocess.Popen:
    """``python SCRIPT ARGS...`` in a process of its own, with this interpreter and its whole import path (the
    project and tests/support), its stdout and stderr piped as text."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


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

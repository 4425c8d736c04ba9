"""The two software stacks of an A/B session: A is the running interpreter with the session's environment, B the
interpreter ``--ab-python`` names (this one by default) with the settings of ``--ab-env`` on top; the packages a stack's
interpreter has, for a process that is not one of our workers (a server); and what differs between the two stacks'
fingerprints, in lines a person reads. Torch-free."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hwregress.store.atomic import describe_kind

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
AB_ENV_EXAMPLE = "e.g. --ab-env OMP_NUM_THREADS=1"


@dataclass(frozen=True)
class Stack:
    """One side of an A/B session.

    Attributes:
        label: ``"A"`` or ``"B"``.
        python: path of the interpreter the stack's worker runs in.
        env: environment settings applied on top of ``os.environ`` for this stack's worker only.
    """

    label: str
    python: str
    env: Mapping[str, str] = field(default_factory=dict)

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` (the session's environment) with this stack's settings on top."""
        return {**base, **self.env}

    def describe(self) -> str:
        """``"B (/venv/bin/python, OMP_NUM_THREADS=1)"``: the label, the interpreter and the settings."""
        settings = "".join(f", {key}={value}" for key, value in self.env.items())
        return f"{self.label} ({self.python}{settings})"


def parse_ab_env(values: list[str]) -> dict[str, str]:
    """Stack B's settings from the ``KEY=VALUE`` values of ``--ab-env``, in the order given; a value may be empty
    (``PYTHONPATH=``) and may hold ``=`` itself (``KEY=a=b``).

    Raises:
        ValueError: a value without ``=``, with an empty key or a key that is no environment name
            (``[A-Za-z_][A-Za-z0-9_]*``), or a key given twice; the message names the value, --ab-env and the fix.
    """
    settings: dict[str, str] = {}
    for value in values:
        key, separator, setting = value.partition("=")
        if not separator:
            raise ValueError(f"--ab-env {value!r} has no '=': give KEY=VALUE ({AB_ENV_EXAMPLE})")
        if not key:
            raise ValueError(f"--ab-env {value!r} has an empty name before '=': give KEY=VALUE ({AB_ENV_EXAMPLE})")
        if not ENV_NAME.fullmatch(key):
            raise ValueError(f"--ab-env {value!r}: {key!r} is not an environment variable name; use letters, digits "
                             f"and '_', not starting with a digit ({AB_ENV_EXAMPLE})")
        if key in settings:
            raise ValueError(f"--ab-env {value!r}: {key} is given twice (first as {key}={settings[key]}); give each "
                             "setting once")
        settings[key] = setting
    return settings


def check_interpreter(python: str, source: str) -> str:
    """``python`` if it is an executable regular file (after links).

    Raises:
        ValueError: it does not exist, is a folder or another non-file, or is not executable; the message names
            the path, ``source`` (e.g. ``"--ab-python"``) and the fix.
    """
    fix = "give the path of a Python interpreter, e.g. /path/to/venv/bin/python"
    try:
        mode = os.stat(python).st_mode
    except OSError as error:
        raise ValueError(f"{source} {python!r}: {error.strerror or error}; {fix}") from None
    kind = describe_kind(mode)
    if kind != "a regular file":
        raise ValueError(f"{source} {python!r} is {kind}, not an interpreter; {fix}")
    if not os.access(python, os.X_OK):
        raise ValueError(f"{source} {python!r} is not executable; chmod +x it, or {fix}")
    return python


def stacks_for(ab_python: str | None, ab_env: list[str], ab_python_a: str | None = None) -> tuple[Stack, Stack]:
    """Stacks A and B: A is ``ab_python_a`` (default ``sys.executable``) with no settings of its own; B is
    ``ab_python`` (default ``sys.executable``) with the settings of ``ab_env`` (``--ab-env`` values,
    :func:`parse_ab_env`). A bisection names both (``--ab-python-a``), so that both stacks' workers start the same way,
    each through its own interpreter or wrapper.

    Raises:
        ValueError: see :func:`parse_ab_env` and :func:`check_interpreter` (``--ab-python``, ``--ab-python-a``).
    """
    settings = parse_ab_env(ab_env)
    python = sys.executable if ab_python is None else check_interpreter(ab_python, "--ab-python")
    python_a = sys.executable if ab_python_a is None else check_interpreter(ab_python_a, "--ab-python-a")
    return Stack("A", python_a), Stack("B", python, settings)


def fingerprint_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Lines for what differs between stack A's worker fingerprint ``a`` and stack B's ``b`` (``hello`` answers:
    see :func:`hwregress.ab.worker.fingerprint`): ``"torch 2.13.0 -> 2.11.0"`` for each field, in A's order then
    B's new ones, ``"env OMP_NUM_THREADS: unset -> 1"`` for each reported environment variable. Empty when the
    stacks look alike."""
    lines = []
    for key in dict.fromkeys([*a, *b]):
        if key != "env" and a.get(key) != b.get(key):
            lines.append(f"{key} {_shown(a.get(key), 'none')} -> {_shown(b.get(key), 'none')}")
    env_a, env_b = a.get("env") or {}, b.get("env") or {}
    for key in dict.fromkeys([*env_a, *env_b]):
        if env_a.get(key) != env_b.get(key):
            lines.append(f"env {key}: {_shown(env_a.get(key), 'unset')} -> {_shown(env_b.get(key), 'unset')}")
    return lines


def _shown(value: Any, missing: str) -> str:
    if value is None:
        return missing
    return '""' if value == "" else str(value)


PACKAGE_FINGERPRINT = """
import importlib.metadata, json, os, platform, sys
def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
packages, keys = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({"python": platform.python_version(), "python_executable": sys.executable,
                  **{name: version(name) for name in packages}, "env": {key: os.environ.get(key) for key in keys}}))
"""
FINGERPRINT_TIMEOUT_S = 60.0


def package_fingerprint(stack: Stack, packages: Iterable[str], env_keys: Iterable[str],
                        base: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What ``stack`` runs where its process is not a worker of ours (a served model's server): its interpreter's
    Python version and path, the installed version of each of ``packages`` (None: not installed), and under ``env``
    the value of each of ``env_keys`` in its environment (``base``, default ``os.environ``, with the stack's settings
    on top). Read by the stack's own interpreter, without importing the packages (``importlib.metadata``); the keys
    are those of :func:`hwregress.ab.worker.fingerprint` where both have them, so :func:`fingerprint_difference`
    compares them alike.

    Returns:
        the fingerprint; ``{"error": why}`` where the interpreter could not say (the server it starts will fail with
        its own log).
    """
    command = [stack.python, "-c", PACKAGE_FINGERPRINT, json.dumps(list(packages)), json.dumps(list(env_keys))]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=FINGERPRINT_TIMEOUT_S,
                              env=stack.environment(os.environ if base is None else base))
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"error": f"{stack.describe()} could not report its packages: {error}"}
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-1:])
        return {"error": f"{stack.describe()} could not report its packages (exit {done.returncode}): {tail}"}
    try:  # the last line: a sitecustomize of the stack's may print before the script runs
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"{stack.describe()} reported its packages as {done.stdout.strip()[-200:]!r}, not JSON"}

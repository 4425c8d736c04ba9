"""Interpreter wrappers: an executable ``/bin/sh`` script that sets (and unsets) environment settings and execs a
Python, the stack of a bisection over environment steps (``--env-steps``) or over commits without ``--setup`` (the
worktree on ``PYTHONPATH``).

A wrapper sets or unsets every key its ladder varies: a probe's A/B session runs under the reference stack, and stack
B's workers inherit that environment (:mod:`hwregress.ab.stacks`), so a key that a wrapper left alone would carry the
reference's value into the candidate.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def write_wrapper(path: Path, python: str, sets: Mapping[str, str], unsets: Iterable[str] = ()) -> Path:
    """Write the executable wrapper ``path``: ``unset`` each of ``unsets``, ``export`` each of ``sets``, then
    ``exec python "$@"``; returns ``path``.

    Raises:
        ValueError: a key that is not a shell variable name.
    """
    lines = ["#!/bin/sh"]
    for key in [*unsets, *sets]:
        if not KEY.fullmatch(key):
            raise ValueError(f"{key!r} is not an environment variable name")
    lines += [f"unset {key}" for key in unsets if key not in sets]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in sets.items()]
    lines.append(f'exec {shlex.quote(python)} "$@"')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path

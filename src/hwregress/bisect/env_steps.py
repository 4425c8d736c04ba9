"""The steps of a bisection over environment settings (``python -m hwregress bisect --env-steps FILE``): one line per
step, the first the known good, the last the known bad, each a list of ``KEY=VALUE`` settings (shell words: quote a
value with spaces), ``-`` for a step with none; blank lines and lines starting with ``#`` are skipped.

Each step becomes an interpreter wrapper (:mod:`hwregress.bisect.wrappers`) that exports its settings and unsets every
key another step sets, then execs the running interpreter: a driver flag, a thread count, an allocator setting, an
oneDNN ISA, bisected like a ladder of stacks.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from hwregress.bisect.usage import BisectUsageError
from hwregress.bisect.wrappers import KEY, write_wrapper

NO_SETTINGS = "-"


@dataclass(frozen=True)
class EnvStep:
    """One step: its settings, in the file's order, and the line it came from."""

    settings: dict[str, str]
    line: int

    @property
    def label(self) -> str:
        """``OMP_NUM_THREADS=1 MALLOC=jemalloc`` (shell words), or ``(no settings)``."""
        return " ".join(f"{key}={shlex.quote(value)}" for key, value in self.settings.items()) or "(no settings)"


def parse_env_steps(text: str, source: str) -> list[EnvStep]:
    """The steps of an ``--env-steps`` file's ``text`` (module doc); ``source`` names it in errors.

    Raises:
        BisectUsageError: a word that is not ``KEY=VALUE``, a key set twice on one line, an unbalanced quote, two
            steps with the same settings, or fewer than two steps; names the file and the line.
    """
    steps: list[EnvStep] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        steps.append(EnvStep(_settings(line, f"{source}:{number}"), number))
    if len(steps) < 2:
        raise BisectUsageError(source, f"holds {len(steps)} step(s)",
                               "give one line of KEY=VALUE settings per step, the good first and the bad last, at "
                               "least 2")
    seen: dict[tuple[tuple[str, str], ...], int] = {}
    for step in steps:
        key = tuple(sorted(step.settings.items()))
        if key in seen:
            raise BisectUsageError(f"{source}:{step.line}", f"repeats the settings of line {seen[key]}",
                                   "give each step once, in order")
        seen[key] = step.line
    return steps


def _settings(line: str, where: str) -> dict[str, str]:
    try:
        words = shlex.split(line, comments=True)
    except ValueError as error:
        raise BisectUsageError(where, f"{line.strip()!r}: {error}", "close the quote") from None
    if words == [NO_SETTINGS]:
        return {}
    settings: dict[str, str] = {}
    for word in words:
        key, equals, value = word.partition("=")
        if not equals or not KEY.fullmatch(key):
            raise BisectUsageError(where, f"{word!r} is not a KEY=VALUE setting",
                                   f"write each setting as KEY=VALUE, or {NO_SETTINGS} alone for a step with none")
        if key in settings:
            raise BisectUsageError(where, f"{key} is set twice", "set each key once per step")
        settings[key] = value
    return settings


def write_step_wrappers(steps: list[EnvStep], folder: Path, python: str = sys.executable) -> list[str]:
    """One wrapper per step in ``folder`` (``step-00`` ...): its settings exported, every other step's keys unset;
    returns their paths."""
    every_key = list(dict.fromkeys(key for step in steps for key in step.settings))
    return [str(write_wrapper(folder / f"step-{index:02d}", python, step.settings,
                              unsets=[key for key in every_key if key not in step.settings]))
            for index, step in enumerate(steps)]

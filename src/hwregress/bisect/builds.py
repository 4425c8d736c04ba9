"""The stack of each probed commit: ``--setup CMD`` run in the commit's worktree, or, without it, the running
interpreter with the worktree on ``PYTHONPATH``; built once per commit and kept for the bisection.

``CMD`` runs under ``/bin/sh`` in the worktree, with ``{worktree}`` replaced by the checked-out folder, ``{stack}`` by
an empty folder for the commit's stack and ``{python}`` by ``{stack}/bin/python``, the path where ``CMD`` must leave
the stack's interpreter (each shell-quoted). A venv fits it as is (``python -m venv {stack} && {python} -m pip install
-e {worktree}``), and so does an executable wrapper written there. Its output goes to ``build-<sha>.log`` in the
work folder. A setup that fails, or leaves no executable at ``{python}``, skips the commit (as ``git bisect skip``),
with the log's last lines as the reason; the failure is kept too, so the commit is never built twice.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from hwregress.bisect.search import CandidateSkipped
from hwregress.bisect.wrappers import write_wrapper
from hwregress.process_group import log_tail

TAIL_LINES = 20


def setup_command(template: str, worktree: Path, stack: Path) -> str:
    """``template`` with ``{worktree}``, ``{stack}`` and ``{python}`` replaced by those paths, shell-quoted (module
    doc); other braces are left as they are."""
    values = {"worktree": worktree, "stack": stack, "python": stack / "bin" / "python"}
    for name, path in values.items():
        template = template.replace("{" + name + "}", shlex.quote(str(path)))
    return template


class CommitStacks:
    """The interpreter of each commit's stack, built on first use in ``folder/<sha12>`` (module doc).

    Args:
        folder: where the stacks are built (the bisection's temporary folder).
        log_folder: where each build's log is written.
        setup: the ``--setup`` command, or None: a wrapper putting the worktree on ``PYTHONPATH`` before the one
            this process was started with, exec'ing this interpreter.
    """

    def __init__(self, folder: Path, log_folder: Path, setup: str | None) -> None:
        self.folder, self.log_folder, self.setup = folder, log_folder, setup
        self._built: dict[str, str | CandidateSkipped] = {}

    def python_of(self, sha: str, worktree: Path) -> str:
        """The stack interpreter of ``sha`` checked out in ``worktree``, built once.

        Raises:
            CandidateSkipped: its setup failed or left no interpreter (again on every later call).
        """
        if sha not in self._built:
            try:
                self._built[sha] = self._build(sha, worktree)
            except CandidateSkipped as skipped:
                self._built[sha] = skipped
        built = self._built[sha]
        if isinstance(built, CandidateSkipped):
            raise built
        return built

    def _build(self, sha: str, worktree: Path) -> str:
        stack = self.folder / sha[:12]
        python = stack / "bin" / "python"
        if self.setup is None:
            path = os.pathsep.join(p for p in (str(worktree), os.environ.get("PYTHONPATH", "")) if p)
            return str(write_wrapper(python, sys.executable, {"PYTHONPATH": path}))
        (stack / "bin").mkdir(parents=True, exist_ok=True)
        log = self.log_folder / f"build-{sha[:12]}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        command = setup_command(self.setup, worktree, stack)
        with log.open("w") as out:
            out.write(f"$ {command}\n")
            out.flush()
            done = subprocess.run(command, shell=True, cwd=worktree, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, check=False)
        tail = "\n".join(log_tail(log, TAIL_LINES))
        if done.returncode != 0:
            raise CandidateSkipped(f"its setup failed (exit {done.returncode}); {log} ends:\n{tail}")
        if not (python.is_file() and os.access(python, os.X_OK)):
            raise CandidateSkipped(f"its setup left no executable at {python} (the {{python}} of --setup); "
                                   f"{log} ends:\n{tail}")
        return str(python)

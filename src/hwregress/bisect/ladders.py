"""The ordered candidates of a bisection, each with the interpreter of its stack: interpreters as given (``--stacks``),
commits of a repository (``--repo --good --bad [--setup]``) or environment steps (``--env-steps``).

A :class:`Ladder` names its candidates (``labels`` for the output, ``ids`` for the JSON: the path, the full sha, the
settings) and builds a candidate's interpreter on first use (``python_of``); its temporary folders (worktrees, stacks,
wrappers) are registered on the caller's :class:`contextlib.ExitStack`, so they are removed however the bisection
ends. Both endpoints are built before the search: an endpoint that cannot be built is a usage error, not a skip.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hwregress.bisect.builds import CommitStacks
from hwregress.bisect.commits import Commit, Worktrees, first_parent_line, git, require_clean, resolve
from hwregress.bisect.env_steps import parse_env_steps, write_step_wrappers
from hwregress.bisect.search import CandidateSkipped
from hwregress.bisect.usage import BisectUsageError


@dataclass(frozen=True)
class Ladder:
    """The candidates in order (the first known good, the last known bad).

    Attributes:
        kind: ``stacks``, ``commits`` or ``env-steps``.
        labels: each candidate as the output names it.
        ids: each candidate as the JSON names it (a path, a full sha, a step's settings).
        python_of: the interpreter of candidate ``index``'s stack; raises :class:`CandidateSkipped` where it cannot be
            built.
    """

    kind: str
    labels: list[str]
    ids: list[str]
    python_of: Callable[[int], str]


def stacks_ladder(stacks: list[str]) -> Ladder:
    """A ladder of interpreters, as given."""
    return Ladder("stacks", list(stacks), list(stacks), lambda index: stacks[index])


def commits_ladder(repo: Path, good: str, bad: str, setup: str | None, log_folder: Path,
                   cleanup: contextlib.ExitStack) -> Ladder:
    """The first-parent line from ``good`` to ``bad`` in ``repo`` (:mod:`hwregress.bisect.commits`), each commit's
    stack built by ``setup`` (:mod:`hwregress.bisect.builds`), the endpoints built at once.

    Raises:
        BisectUsageError: a revision that names no commit, a checkout with uncommitted changes, a good commit the bad
            one does not descend from, or an endpoint that cannot be built.
    """
    good_sha, bad_sha = resolve(repo, good, "--good"), resolve(repo, bad, "--bad")
    require_clean(repo)
    commits = first_parent_line(repo, good_sha, bad_sha)
    worktrees = cleanup.enter_context(Worktrees(repo))
    stacks = CommitStacks(worktrees.folder / "stacks", log_folder, setup)
    ladder = Ladder("commits", [c.label for c in commits], [c.sha for c in commits],
                    lambda index: _commit_python(commits[index], worktrees, stacks))
    _build_endpoints(ladder, (0, "--good", good), (len(commits) - 1, "--bad", bad))
    return ladder


def _commit_python(commit: Commit, worktrees: Worktrees, stacks: CommitStacks) -> str:
    try:
        worktree = worktrees.checkout(commit.sha)
    except subprocess.CalledProcessError as error:
        raise CandidateSkipped(f"git could not check it out: {(error.stderr or '').strip()}") from None
    return stacks.python_of(commit.sha, worktree)


def env_steps_ladder(path: Path, cleanup: contextlib.ExitStack) -> Ladder:
    """The steps of an ``--env-steps`` file (:mod:`hwregress.bisect.env_steps`), each a wrapper of the running
    interpreter in a temporary folder.

    Raises:
        BisectUsageError: the file cannot be read, or a line is not a step.
    """
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise BisectUsageError("--env-steps", f"{str(path)!r} cannot be read: {error}",
                               "give a text file of one KEY=VALUE line per step") from None
    steps = parse_env_steps(text, str(path))
    folder = Path(tempfile.mkdtemp(prefix="hwregress-bisect-env-"))
    cleanup.callback(shutil.rmtree, folder, True)
    wrappers = write_step_wrappers(steps, folder)
    labels = [f"step {index} ({step.label})" for index, step in enumerate(steps)]
    return Ladder("env-steps", labels, [step.label for step in steps], lambda index: wrappers[index])


def _build_endpoints(ladder: Ladder, *endpoints: tuple[int, str, str]) -> None:
    """Build each of ``endpoints`` (index, option, value) now: one that cannot be built is a usage error."""
    for index, option, value in endpoints:
        try:
            ladder.python_of(index)
        except CandidateSkipped as why:
            raise BisectUsageError(option, f"{value!r} ({ladder.labels[index]}) cannot be built: {why}",
                                   "give an endpoint that builds, or fix --setup") from None


def step_pair(repo: Path, against: str, setup: str | None, log_folder: Path, cleanup: contextlib.ExitStack,
              bad: str | None = None) -> Ladder:
    """The stacks of a ``bisect-step``: the commit ``against`` names (index 0, checked out in a worktree of a
    temporary folder), the user's checkout as it is (index 1: the commit ``git bisect`` checked out, built there,
    ``{worktree}`` being the checkout itself) and, where ``bad`` is given, that commit (index 2, for the second
    opinion).

    Raises:
        BisectUsageError: ``against`` or ``bad`` names no commit or cannot be built, or the checkout has uncommitted
            changes.
    """
    endpoints = [_commit(repo, resolve(repo, rev, option))
                 for rev, option in ((against, "--against"), (bad, "--bad")) if rev is not None]
    require_clean(repo)
    head = _commit(repo, git(repo, "rev-parse", "HEAD"))
    worktrees = cleanup.enter_context(Worktrees(repo))
    stacks = CommitStacks(worktrees.folder / "stacks", log_folder, setup)
    checkout = CommitStacks(worktrees.folder / "checkout", log_folder, setup)
    commits = [endpoints[0], head, *endpoints[1:]]

    def python_of(index: int) -> str:
        if index == 1:
            return checkout.python_of(head.sha, repo)
        return _commit_python(commits[index], worktrees, stacks)

    labels = [c.label if i != 1 else f"{c.label} (the checkout)" for i, c in enumerate(commits)]
    ladder = Ladder("commits", labels, [c.sha for c in commits], python_of)
    # the checkout that does not build is skipped (exit 125); an endpoint that does not is a usage error
    _build_endpoints(ladder, (0, "--against", against), *([(2, "--bad", str(bad))] if bad is not None else []))
    return ladder


def _commit(repo: Path, sha: str) -> Commit:
    """The commit ``sha`` with its subject line."""
    return Commit(sha, git(repo, "log", "-1", "--format=%s", sha))

"""The commits of a bisection over a git repository (``python -m hwregress bisect --repo --good --bad``) and the
worktrees they are checked out in.

The candidates are the first-parent line from the good commit to the bad one, ``git rev-list --first-parent
--ancestry-path good..bad`` oldest first, the good commit before them: on a history with merges, a merge is one
candidate (what it brought in, as a whole), as Chromium's Pinpoint bisects the main line. Each probed commit is checked
out with ``git worktree add --detach`` in a temporary folder of its own, never in the user's checkout; the worktrees
and their folder are removed when the bisection ends (:class:`Worktrees` is a context manager: a Ctrl-C, a SIGTERM
turned into an exception, or an error all remove them). Worktrees that a killed bisection left behind (their folder
is gone, or their owner's process is) are pruned when the next one starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hwregress.bisect.usage import BisectUsageError

WORKTREES_PREFIX = "hwregress-bisect-"
OWNER_FILE = "owner.pid"  # in the worktrees' folder: the bisection's process id


@dataclass(frozen=True)
class Commit:
    """One candidate: its full sha and its subject line."""

    sha: str
    subject: str

    @property
    def label(self) -> str:
        """``1a2b3c4d5e6f commit 07: a note``: the short sha and the subject, as the output names it."""
        return f"{self.sha[:12]} {self.subject}"


def git(repo: Path, *args: str) -> str:
    """``git -C repo args...``'s standard output, stripped.

    Raises:
        subprocess.CalledProcessError: git failed (its stderr on the exception).
        FileNotFoundError: git is not installed.
    """
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def repository_root(path: Path, option: str) -> Path:
    """The top folder of the git checkout that holds ``path``.

    Raises:
        BisectUsageError: ``path`` is no folder of a git checkout, or git is not installed.
    """
    try:
        return Path(git(path, "rev-parse", "--show-toplevel"))
    except FileNotFoundError:
        raise BisectUsageError(option, "git is not installed", "install git") from None
    except (subprocess.CalledProcessError, NotADirectoryError):
        raise BisectUsageError(option, f"{str(path)!r} is not a git checkout",
                               "give the folder of the repository to bisect") from None


def resolve(repo: Path, revision: str, option: str) -> str:
    """The full sha of the commit ``revision`` names in ``repo``.

    Raises:
        BisectUsageError: ``revision`` names no commit of ``repo``.
    """
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision}^{{commit}}")
    except subprocess.CalledProcessError:
        raise BisectUsageError(option, f"{revision!r} names no commit of {repo}",
                               "give a commit, a branch or a tag of that repository (git log --oneline)") from None


def require_clean(repo: Path) -> None:
    """Refuse a checkout with changes to tracked files: the bisection probes commits, so uncommitted work would not
    be what it measures, and a user who meant it should commit it first.

    Raises:
        BisectUsageError: names the changed files (the first five).
    """
    changed = git(repo, "diff", "--name-only", "HEAD").splitlines()
    if changed:
        names = ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else "")
        raise BisectUsageError("--repo", f"{repo} has uncommitted changes ({names})",
                               "commit or stash them: the bisection probes commits, not the working tree")


def first_parent_line(repo: Path, good: str, bad: str) -> list[Commit]:
    """The candidates: ``good``, then the first-parent line from it to ``bad`` (module doc), oldest first.

    Raises:
        BisectUsageError: ``good`` is not an ancestor of ``bad`` on that line, or they are the same commit.
    """
    if good == bad:
        raise BisectUsageError("--good/--bad", f"both name {good[:12]}", "give a good commit older than the bad one")
    line = git(repo, "rev-list", "--first-parent", "--ancestry-path", "--reverse", f"{good}..{bad}").split()
    if not line or line[-1] != bad or git(repo, "rev-parse", f"{line[0]}^1") != good:
        raise BisectUsageError("--good", f"{good[:12]} is not on the first-parent line of {bad[:12]}",
                               "give a good commit that the bad one descends from (git merge-base --is-ancestor)")
    shas = [good, *line]
    subjects = [git(repo, "log", "-1", "--format=%s", sha) for sha in shas]
    return [Commit(sha, subject) for sha, subject in zip(shas, subjects, strict=True)]


class Worktrees:
    """The worktrees of one bisection, each commit checked out once, all in one temporary folder; a context manager
    that removes them (module doc)."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        prune_abandoned(repo)
        self.folder = Path(tempfile.mkdtemp(prefix=WORKTREES_PREFIX))
        (self.folder / OWNER_FILE).write_text(f"{os.getpid()}\n")
        self._added: dict[str, Path] = {}

    def checkout(self, sha: str) -> Path:
        """The folder where ``sha`` is checked out (added on first use).

        Raises:
            subprocess.CalledProcessError: git could not add the worktree.
        """
        if sha not in self._added:
            folder = self.folder / sha[:12]
            git(self.repo, "worktree", "add", "--detach", "--quiet", str(folder), sha)
            self._added[sha] = folder
        return self._added[sha]

    def close(self) -> None:
        """Remove every worktree and the folder; idempotent."""
        for folder in self._added.values():
            _remove_worktree(self.repo, folder)
        self._added.clear()
        shutil.rmtree(self.folder, ignore_errors=True)
        _prune(self.repo)

    def __enter__(self) -> Worktrees:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prune_abandoned(repo: Path) -> None:
    """Remove the worktrees of ``repo`` that an earlier bisection left behind: in one of our temporary folders whose
    owner process is gone (a bisection killed by SIGKILL cannot clean up after itself)."""
    for line in git(repo, "worktree", "list", "--porcelain").splitlines():
        if not line.startswith("worktree "):
            continue
        folder = Path(line.removeprefix("worktree "))
        if folder.parent.name.startswith(WORKTREES_PREFIX) and not _owner_alive(folder.parent):
            _remove_worktree(repo, folder)
            shutil.rmtree(folder.parent, ignore_errors=True)
    _prune(repo)


def _remove_worktree(repo: Path, folder: Path) -> None:
    """``git worktree remove --force``; a failure is left to the prune that follows (the folder may be gone)."""
    subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(folder)], capture_output=True,
                   check=False)


def _prune(repo: Path) -> None:
    subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True, check=False)


def _owner_alive(folder: Path) -> bool:
    try:
        pid = int((folder / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

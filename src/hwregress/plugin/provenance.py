"""Where a session's code came from and which CI build ran it (``results.json``'s ``meta.provenance``), and which
machine it ran on (``meta.machine_id``), so that the store (:mod:`hwregress.store.session_rows`) can say which
commit, branch and build each session measured, and know a host by more than its hostname.

The CI's own variables first (GitHub Actions, GitLab CI, Jenkins, Buildkite: each sets the commit and branch it
checked out, where ``git`` in a detached checkout knows no branch), then ``git`` in the rootdir; anything unknown is
None. Never raises: a session without git or CI still runs and records.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

# (commit variable, branch variable) of each CI, in the order they are tried
_CI_GIT = (("GITHUB_SHA", "GITHUB_HEAD_REF"), ("GITHUB_SHA", "GITHUB_REF_NAME"),
           ("CI_COMMIT_SHA", "CI_COMMIT_REF_NAME"), ("GIT_COMMIT", "GIT_BRANCH"),
           ("BUILDKITE_COMMIT", "BUILDKITE_BRANCH"))
GIT_TIMEOUT_S = 5.0
# systemd's machine-id(5), then D-Bus's older copy of it
MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))


def session_provenance(rootdir: Path, environ: Mapping[str, str]) -> dict[str, str | None]:
    """``{"git_sha", "git_branch", "ci_build_url"}`` of a session run in ``rootdir`` with ``environ``: the CI's
    variables (:data:`_CI_GIT`) first, then ``git rev-parse`` in ``rootdir``; None where neither knows."""
    sha = branch = None
    for sha_var, branch_var in _CI_GIT:
        sha = sha or environ.get(sha_var) or None
        branch = branch or environ.get(branch_var) or None
    sha = sha or _git(rootdir, "rev-parse", "HEAD")
    branch = branch or _git(rootdir, "rev-parse", "--abbrev-ref", "HEAD")
    return {"git_sha": sha, "git_branch": None if branch == "HEAD" else branch,  # "HEAD": a detached checkout
            "ci_build_url": ci_build_url(environ)}


def ci_build_url(environ: Mapping[str, str]) -> str | None:
    """The URL of the CI build running this session: GitHub Actions' run, GitLab's job, Jenkins' or Buildkite's
    build; None outside CI."""
    if environ.get("GITHUB_RUN_ID") and environ.get("GITHUB_REPOSITORY"):
        server = environ.get("GITHUB_SERVER_URL", "https://github.com")
        return f"{server}/{environ['GITHUB_REPOSITORY']}/actions/runs/{environ['GITHUB_RUN_ID']}"
    for variable in ("CI_JOB_URL", "BUILD_URL", "BUILDKITE_BUILD_URL"):
        if environ.get(variable):
            return environ[variable]
    return None


def machine_id(files: tuple[Path, ...] = MACHINE_ID_FILES) -> str | None:
    """This machine's id (machine-id(5): 32 hex digits, stable across reboots, unlike a CI runner's hostname), None
    where no file holds one (macOS, Windows, a container without it)."""
    for path in files:
        try:
            text = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) == 32 and all(c in "0123456789abcdef" for c in text):
            return text
    return None


def _git(rootdir: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=rootdir, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError):  # no git, a hung filesystem
        return None
    out = done.stdout.strip()
    return out if done.returncode == 0 and out else None

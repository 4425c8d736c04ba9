"""A bisection over commits and environment steps, on real git repositories (scripts/commit_ladder.py's ladder):
the candidates (the first-parent line), usage errors naming what is wrong (a bad REV, uncommitted changes, a good
commit the bad one does not descend from, an endpoint that does not build), worktrees that never touch the user's
checkout and are gone at the end, stacks built once per commit, a setup that fails skipping its commit, and the
environment steps' wrappers (hwregress.bisect.commits, .builds, .ladders, .env_steps, .wrappers)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hwregress.bisect.builds import CommitStacks, setup_command
from hwregress.bisect.commits import Worktrees, first_parent_line, git, prune_abandoned, resolve
from hwregress.bisect.env_steps import parse_env_steps, write_step_wrappers
from hwregress.bisect.ladders import commits_ladder, env_steps_ladder
from hwregress.bisect.search import CandidateSkipped
from hwregress.bisect.usage import BisectUsageError
from hwregress.cli import main
from scripts.commit_ladder import SETUP, make_ladder


@pytest.fixture
def ladder(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = tmp_path / "ladder"
    return repo, make_ladder(repo, count=6, culprit=4, broken=(2,))


@pytest.fixture(autouse=True)
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Temporary folders of the bisection (worktrees, stacks) under tmp_path, where a test can see what is left."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr("tempfile.tempdir", None)
    return folder


def _worktrees(repo: Path) -> list[str]:
    return [line for line in git(repo, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def test_the_candidates_are_the_first_parent_line_from_good_to_bad_oldest_first(ladder):
    repo, shas = ladder
    commits = first_parent_line(repo, shas[1], shas[5])
    assert [c.sha for c in commits] == shas[1:]
    assert commits[3].subject == "commit 04: more blocks" and commits[3].label.startswith(shas[4][:12])


def test_a_merge_is_one_candidate_of_the_first_parent_line(ladder):
    repo, shas = ladder
    git(repo, "checkout", "-q", "-b", "side", shas[5])
    (repo / "side.txt").write_text("side\n")
    git(repo, "add", "side.txt")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "side work")
    git(repo, "checkout", "-q", "main")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@e", "merge", "-q", "--no-ff", "-m", "merge side", "side")
    commits = first_parent_line(repo, shas[4], git(repo, "rev-parse", "HEAD"))
    assert [c.subject for c in commits] == ["commit 04: more blocks", "commit 05: a note", "merge side"]


@pytest.mark.parametrize(("good", "bad", "fault"), [
    ("no-such-rev", "main", "--good: 'no-such-rev' names no commit"),
    ("main~5", "nope", "--bad: 'nope' names no commit"),
    ("main", "main~5", "is not on the first-parent line"),
    ("main", "main", "both name")])
def test_revisions_that_cannot_be_bisected_are_a_usage_error_naming_them(ladder, good, bad, fault, tmp_path):
    repo, _ = ladder
    with pytest.raises(BisectUsageError, match=fault), contextlib.ExitStack() as cleanup:
        commits_ladder(repo, good, bad, None, tmp_path / "logs", cleanup)


def test_uncommitted_changes_are_a_usage_error_naming_the_files(ladder, tmp_path):
    repo, _ = ladder
    (repo / "ladder_model" / "__init__.py").write_text("BLOCKS = 1\n")
    with pytest.raises(BisectUsageError, match=r"uncommitted changes \(ladder_model/__init__.py\)"):
        with contextlib.ExitStack() as cleanup:
            commits_ladder(repo, "main~5", "main", None, tmp_path / "logs", cleanup)


def test_the_command_line_names_a_bad_rev_a_missing_good_and_a_folder_that_is_no_repository(ladder, capsys, tmp_path):
    repo, _ = ladder
    assert main(["bisect", "--repo", str(repo), "--good", "v9", "--bad", "main"]) == 2
    assert "--good: 'v9' names no commit" in capsys.readouterr().err
    assert main(["bisect", "--repo", str(repo)]) == 2
    assert "--good: is missing" in capsys.readouterr().err
    assert main(["bisect", "--repo", str(tmp_path), "--good", "a"]) == 2
    assert "is not a git checkout" in capsys.readouterr().err
    assert main(["bisect", "--stacks", f"{sys.executable},{sys.executable}x", "--good", "a"]) == 2
    assert "--good: is for a bisection over commits" in capsys.readouterr().err
    work = ["--work-dir", str(tmp_path / "work"), "--store", "none"]
    assert main(["bisect", "--repo", str(repo), "--good", "main~5", "--setup", " ", *work]) == 2
    assert "--setup: is empty" in capsys.readouterr().err
    assert main(["bisect", "--repo", str(repo), "--good", "main~5", "--setup", "no-such-builder {python}", *work]) == 2
    assert re.search(r"(?s)--good: 'main~5' \(.*\) cannot be built: its setup failed \(exit 127\).*no-such-builder",
                     capsys.readouterr().err)


def test_worktrees_leave_the_users_checkout_alone_and_are_gone_at_the_end(ladder, private_tmp):
    repo, shas = ladder
    head, status = git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain")
    with Worktrees(repo) as worktrees:
        folder = worktrees.checkout(shas[1])
        assert (folder / "ladder_model" / "__init__.py").read_text().count("NOTE = 1")
        assert worktrees.checkout(shas[1]) == folder and len(_worktrees(repo)) == 2
    assert git(repo, "rev-parse", "HEAD") == head and git(repo, "status", "--porcelain") == status
    assert len(_worktrees(repo)) == 1 and not any(private_tmp.iterdir())


def test_worktrees_are_removed_when_the_bisection_stops_on_an_exception(ladder, private_tmp):
    repo, shas = ladder
    with pytest.raises(KeyboardInterrupt), Worktrees(repo) as worktrees:
        worktrees.checkout(shas[2])
        raise KeyboardInterrupt
    assert len(_worktrees(repo)) == 1 and not any(private_tmp.iterdir())


def test_worktrees_a_killed_bisection_left_are_pruned_by_the_next_one(ladder, private_tmp):
    repo, shas = ladder
    worktrees = Worktrees(repo)
    worktrees.checkout(shas[3])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (worktrees.folder / "owner.pid").write_text(f"{dead.pid}\n")  # its owner gone, as after a SIGKILL
    assert len(_worktrees(repo)) == 2
    prune_abandoned(repo)
    assert len(_worktrees(repo)) == 1 and not worktrees.folder.exists()


def test_a_stack_is_built_once_per_commit_with_its_placeholders_replaced(ladder, tmp_path):
    repo, shas = ladder
    count = tmp_path / "builds"
    setup = (f"echo {{worktree}} >> {count} && printf '#!/bin/sh\\nexec {sys.executable} \"$@\"\\n' > {{python}} "
             "&& chmod +x {python}")
    stacks = CommitStacks(tmp_path / "stacks", tmp_path / "logs", setup)
    with Worktrees(repo) as worktrees:
        first = stacks.python_of(shas[1], worktrees.checkout(shas[1]))
        assert stacks.python_of(shas[1], worktrees.checkout(shas[1])) == first
        stacks.python_of(shas[3], worktrees.checkout(shas[3]))
        assert count.read_text().split() == [str(worktrees.checkout(shas[1])), str(worktrees.checkout(shas[3]))]
    assert first == str(tmp_path / "stacks" / shas[1][:12] / "bin" / "python")
    assert subprocess.run([first, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout.strip() == "42"
    assert setup_command("{stack} {python} {worktree} {other}", Path("/w t"), Path("/s")) == (
        "/s /s/bin/python '/w t' {other}")


def test_a_commit_whose_setup_fails_is_skipped_with_the_logs_tail_once(ladder, tmp_path, monkeypatch):
    repo, shas = ladder
    monkeypatch.setenv("LADDER_PYTHON", sys.executable)
    stacks = CommitStacks(tmp_path / "stacks", tmp_path / "logs", SETUP)
    with Worktrees(repo) as worktrees:
        assert Path(stacks.python_of(shas[1], worktrees.checkout(shas[1]))).is_file()
        with pytest.raises(CandidateSkipped, match=r"its setup failed \(exit 1\); .*build-"):
            stacks.python_of(shas[2], worktrees.checkout(shas[2]))  # commit 02 has the BROKEN file
        log = tmp_path / "logs" / f"build-{shas[2][:12]}.log"
        log.unlink()
        with pytest.raises(CandidateSkipped, match="its setup failed"):  # the failure kept: not built again
            stacks.python_of(shas[2], worktrees.checkout(shas[2]))
        assert not log.exists()


def test_a_setup_that_leaves_no_interpreter_skips_the_commit_naming_the_path(ladder, tmp_path):
    repo, shas = ladder
    stacks = CommitStacks(tmp_path / "stacks", tmp_path / "logs", "echo built")
    with Worktrees(repo) as worktrees, pytest.raises(CandidateSkipped, match=r"left no executable at .*bin/python"):
        stacks.python_of(shas[1], worktrees.checkout(shas[1]))


def test_an_endpoint_that_does_not_build_is_a_usage_error_not_a_skip(ladder, tmp_path, monkeypatch):
    repo, _ = ladder
    monkeypatch.setenv("LADDER_PYTHON", sys.executable)
    with pytest.raises(BisectUsageError, match=r"--bad: 'main~3' \(.* commit 02.*\) cannot be built"):
        with contextlib.ExitStack() as cleanup:
            commits_ladder(repo, "main~5", "main~3", SETUP, tmp_path / "logs", cleanup)


def test_without_setup_a_commits_stack_runs_this_interpreter_with_the_worktree_first_on_pythonpath(ladder, tmp_path,
                                                                                                    monkeypatch):
    repo, shas = ladder
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    with contextlib.ExitStack() as cleanup:
        found = commits_ladder(repo, "main~5", "main", None, tmp_path / "logs", cleanup)
        blocks = [subprocess.run([found.python_of(i), "-c", "import ladder_model, sys; print(ladder_model.BLOCKS, "
                                  "sys.path[1])"], capture_output=True, text=True, env={**os.environ},
                                 check=True).stdout.split() for i in (0, 5)]
    assert [b[0] for b in blocks] == ["20", "24"] and blocks[0][1].endswith(shas[0][:12])
    assert found.ids == shas and found.kind == "commits"


def test_env_steps_are_lines_of_settings_each_a_wrapper_that_unsets_the_others_keys(tmp_path):
    text = "# good first\n-\nOMP_NUM_THREADS=2\n\nOMP_NUM_THREADS=1 'MALLOC_CONF=a b'\n"
    steps = parse_env_steps(text, "steps.txt")
    assert [s.settings for s in steps] == [{}, {"OMP_NUM_THREADS": "2"}, {"OMP_NUM_THREADS": "1", "MALLOC_CONF": "a b"}]
    assert [s.line for s in steps] == [2, 3, 5] and steps[0].label == "(no settings)"
    wrappers = write_step_wrappers(steps, tmp_path, python=sys.executable)
    probe = "import os; print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('MALLOC_CONF'))"
    env = {**os.environ, "OMP_NUM_THREADS": "9", "MALLOC_CONF": "inherited"}
    seen = [subprocess.run([w, "-c", probe], capture_output=True, text=True, env=env, check=True).stdout.strip()
            for w in wrappers]
    assert seen == ["None None", "2 None", "1 a b"]


@pytest.mark.parametrize(("text", "fault"), [
    ("A=1\n", "holds 1 step"), ("A=1\nnot-a-setting\n", r"steps.txt:2: 'not-a-setting' is not a KEY=VALUE"),
    ("A=1\nA=2 A=3\n", "steps.txt:2: A is set twice"), ("A=1\nB='x\n", "steps.txt:2: .*close the quote"),
    ("A=1\nB=2\nA=1\n", "steps.txt:3: repeats the settings of line 1"), ("A=1\n1X=2\n", "is not a KEY=VALUE")])
def test_env_steps_that_are_not_steps_are_a_usage_error_naming_the_line(text, fault):
    with pytest.raises(BisectUsageError, match=fault):
        parse_env_steps(text, "steps.txt")


def test_env_steps_wrappers_are_removed_at_the_end(tmp_path, private_tmp):
    steps = tmp_path / "steps.txt"
    steps.write_text("-\nOMP_NUM_THREADS=1\n")
    with contextlib.ExitStack() as cleanup:
        found = env_steps_ladder(steps, cleanup)
        assert Path(found.python_of(1)).is_file() and found.labels[1] == "step 1 (OMP_NUM_THREADS=1)"
    assert not any(private_tmp.iterdir())
    with pytest.raises(BisectUsageError, match="cannot be read"), contextlib.ExitStack() as cleanup:
        env_steps_ladder(tmp_path / "missing.txt", cleanup)


def test_resolve_names_the_full_sha_of_a_branch_a_tag_or_a_short_sha(ladder):
    repo, shas = ladder
    git(repo, "tag", "v1", shas[1])
    assert resolve(repo, "v1", "--good") == shas[1] == resolve(repo, shas[1][:8], "--good")
    assert resolve(repo, "main", "--bad") == shas[-1]

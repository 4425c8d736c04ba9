"""Which commit, branch and CI build a session ran: the CI's variables first, then git in the rootdir."""

from __future__ import annotations

import subprocess

from hwregress.plugin.provenance import ci_build_url, machine_id, session_provenance


def _repo(path, branch="nightly"):
    run = lambda *args: subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q", "-b", branch)
    (path / "f").write_text("x")
    run("add", "f")
    run("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "one")
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True).stdout.strip()


def test_git_in_the_rootdir_when_no_ci_says(tmp_path):
    sha = _repo(tmp_path)
    assert session_provenance(tmp_path, {}) == {"git_sha": sha, "git_branch": "nightly", "ci_build_url": None}


def test_a_detached_checkout_has_no_branch_and_a_folder_without_git_nothing(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    sha = _repo(repo)
    subprocess.run(["git", "checkout", "-q", "--detach"], cwd=repo, check=True)
    assert session_provenance(repo, {})["git_branch"] is None
    assert session_provenance(repo, {})["git_sha"] == sha
    bare = tmp_path / "bare"
    bare.mkdir()
    assert session_provenance(bare, {}) == {"git_sha": None, "git_branch": None, "ci_build_url": None}


def test_the_ci_variables_win_over_git(tmp_path):
    _repo(tmp_path)
    github = {"GITHUB_SHA": "abc123", "GITHUB_REF_NAME": "main", "GITHUB_HEAD_REF": "", "GITHUB_RUN_ID": "42",
              "GITHUB_REPOSITORY": "lab/suite", "GITHUB_SERVER_URL": "https://github.example"}
    assert session_provenance(tmp_path, github) == {"git_sha": "abc123", "git_branch": "main",
                                                    "ci_build_url": "https://github.example/lab/suite/actions/runs/42"}
    gitlab = {"CI_COMMIT_SHA": "def456", "CI_COMMIT_REF_NAME": "mr-7", "CI_JOB_URL": "https://gitlab.example/j/9"}
    assert session_provenance(tmp_path, gitlab) == {"git_sha": "def456", "git_branch": "mr-7",
                                                    "ci_build_url": "https://gitlab.example/j/9"}


def test_the_build_url_of_each_ci_and_none_outside():
    assert ci_build_url({"BUILD_URL": "https://jenkins/job/1/"}) == "https://jenkins/job/1/"
    assert ci_build_url({"BUILDKITE_BUILD_URL": "https://buildkite.com/o/p/builds/3"}).endswith("/builds/3")
    assert ci_build_url({"GITHUB_RUN_ID": "1"}) is None  # without the repository there is no URL to make
    assert ci_build_url({}) is None


def test_the_machine_id_is_read_from_the_first_file_that_holds_one(tmp_path):
    empty, bad, good = tmp_path / "empty", tmp_path / "bad", tmp_path / "good"
    empty.write_text("\n")
    bad.write_text("not-an-id\n")
    good.write_text("3d1219c7c4c5404aaa1f6d2a48adfda4\n")
    assert machine_id((tmp_path / "missing", empty, bad, good)) == "3d1219c7c4c5404aaa1f6d2a48adfda4"
    assert machine_id((tmp_path / "missing", bad)) is None

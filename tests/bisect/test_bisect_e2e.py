"""A bisection over commits with real A/B sessions (python -m hwregress bisect --repo, bisect-step) on a ladder of
scripts/commit_ladder.py: a probe that cannot decide within its budget ends the bisection undecided (exit 3, nothing
guessed); Ctrl-C ends the running A/B session, its workers and keeper, and removes the worktrees (exit
130); a bisection killed outright leaves no process behind (its keeper ends the session) and its worktrees are pruned
by the next; bisect-step's exits as git bisect run reads them.

The sessions are short: one look of 2 pairs (one process pair) cannot decide, so the undecided exits do not hang on
the machine's noise; the interrupted probes are stopped within seconds of their workers starting.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest
from support.processes import gone

from hwregress.bisect.commits import Worktrees, git
from hwregress.bisect.ladders import commits_ladder
from hwregress.bisect.sides import Side
from hwregress.bisect.stacks import ProbeSettings, StackProbes
from hwregress.cli import main
from hwregress.cli.bisect import probe_devices
from hwregress.cli.bisect_step import STEP_EXIT
from hwregress.store.database import open_store
from scripts.commit_ladder import SELECTION, SETUP, make_ladder

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER_SEEN_S = 120.0


@pytest.fixture
def ladder(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = tmp_path / "ladder"
    return repo, make_ladder(repo, count=4, culprit=2, slowdown=0.5, broken=(1,))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The bisection's environment: its temporary folders under tmp_path/tmp, where a test sees what is left."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    return {**os.environ, "TMPDIR": str(folder), "LADDER_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}


def _bisect(repo: Path, tmp_path: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "hwregress", "bisect", "--repo", str(repo), "--good", "main~3", "--bad", "main",
            "--work-dir", str(tmp_path / "work"), "--store", _store_url(tmp_path), *options, "--", *SELECTION]


def _store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.sqlite'}"


def _kept(tmp_path: Path) -> list[dict]:
    """The bisections the test's store keeps, each as its document."""
    store = open_store(_store_url(tmp_path), reading=True)
    try:
        return [store.bisection(row["id"]) for row in store.bisections()]
    finally:
        store.close()


def _left_behind(tmp_path: Path) -> list[str]:
    """The processes still running whose command line or environment names tmp_path (sessions, keepers, workers)."""
    left = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
                continue
            text = " ".join(process.info["cmdline"] or []) + " ".join(process.environ().values())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if str(tmp_path) in text:
            left.append(f"{process.pid}: {' '.join(process.info['cmdline'] or [])[:120]}")
    return left


def _ours(tmp_path: Path) -> list[Path]:
    """The bisection's temporary folders left in tmp_path/tmp (a session's own caches may stay)."""
    return list((tmp_path / "tmp").glob("hwregress-bisect-*"))


def _wait_for_workers(bisection: subprocess.Popen[str]) -> list[int]:
    """The pids of the bisection's descendants once two A/B workers run among them."""
    deadline = time.monotonic() + WORKER_SEEN_S
    while time.monotonic() < deadline and bisection.poll() is None:
        descendants = psutil.Process(bisection.pid).children(recursive=True)
        workers = [p for p in descendants if "runpy" in " ".join(_cmdline(p))]
        if len(workers) >= 2:
            return [p.pid for p in descendants]
        time.sleep(0.2)
    output = bisection.communicate(timeout=30)[0] if bisection.poll() is not None else "(still running)"
    raise AssertionError(f"no two A/B workers within {WORKER_SEEN_S:.0f} s; the bisection said:\n{output}")


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def test_a_probe_undecided_at_its_budget_ends_the_bisection_undecided_exit_3(ladder, env, tmp_path):
    repo, shas = ladder
    report = tmp_path / "bisect.json"
    done = subprocess.run(_bisect(repo, tmp_path, "--looks", "2", "--json", str(report)), cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    document = json.loads(report.read_text())
    assert document["status"] == "undecided" and document["first_bad"] is None
    assert document["probes"][0]["candidate"] == shas[-1] and document["probes"][0]["verdict"] == "unstable"
    assert document["probes"][0]["pairs"] == 2 and document["kind"] == "commits"
    assert any(line.startswith("undecided") for line in done.stdout.splitlines())
    (kept,) = _kept(tmp_path)
    assert kept["status"] == "undecided" and kept["exit_code"] == 3 and kept["id"] == document["id"]
    assert [p["verdict"] for p in kept["probes"]] == ["unstable"] and kept["candidates"] == shas
    assert (tmp_path / "work" / "bisect.html").is_file() and json.loads((tmp_path / "work" / "bisect.json").read_text())
    assert len(git(repo, "worktree", "list").splitlines()) == 1 and not _ours(tmp_path)


@pytest.mark.nightly
def test_ctrl_c_mid_probe_ends_the_session_and_its_workers_and_removes_the_worktrees(ladder, env, tmp_path):
    repo, _ = ladder
    bisection = subprocess.Popen(_bisect(repo, tmp_path, "--looks", "40"), cwd=REPO_ROOT, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 preexec_fn=_sigint_at_its_default)
    try:
        running = _wait_for_workers(bisection)
        bisection.send_signal(signal.SIGINT)  # SIGTERM takes the same path (sigterm_as_interrupt)
        output = bisection.communicate(timeout=60)[0]
    finally:
        bisection.kill()
    assert bisection.returncode == 130, output
    assert "interrupted" in output
    (kept,) = _kept(tmp_path)
    assert kept["status"] == "running" and kept["probes"] == []  # kept as it stood: no probe had ended
    assert all(gone(pid, within_s=20) for pid in running), _left_behind(tmp_path)
    assert _left_behind(tmp_path) == []
    assert len(git(repo, "worktree", "list").splitlines()) == 1 and not _ours(tmp_path)
    assert git(repo, "status", "--porcelain") == ""


def _sigint_at_its_default() -> None:
    """In the bisection's process before it starts Python, which then raises KeyboardInterrupt on SIGINT. A shell
    without job control starts a background command with SIGINT ignored, and Python keeps an ignored SIGINT: this
    suite started as ``pytest ... &`` from a script would otherwise send Ctrl-C to a bisection deaf to it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.nightly
def test_a_bisection_killed_outright_leaves_no_process_and_its_worktrees_go_with_the_next(ladder, env, tmp_path):
    repo, _ = ladder
    bisection = subprocess.Popen(_bisect(repo, tmp_path, "--looks", "40"), cwd=REPO_ROOT, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        running = _wait_for_workers(bisection)
    finally:
        bisection.kill()  # SIGKILL: nothing of the bisection itself runs any more
    bisection.wait()
    assert all(gone(pid, within_s=30) for pid in running), _left_behind(tmp_path)
    assert len(git(repo, "worktree", "list").splitlines()) > 1  # nothing could remove them
    os.environ["TMPDIR"], previous = env["TMPDIR"], os.environ.get("TMPDIR")
    try:
        with Worktrees(repo):
            pass
    finally:
        os.environ.pop("TMPDIR") if previous is None else os.environ.update(TMPDIR=previous)
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    assert not _ours(tmp_path)


def _step(repo: Path, tmp_path: Path, env: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    """bisect-step as git bisect run runs it: in the checkout, the selection's test file by its absolute path."""
    selection = [str(REPO_ROOT / SELECTION[0]), *SELECTION[1:]]
    command = [sys.executable, "-m", "hwregress", "bisect-step", "--work-dir", str(tmp_path / "work"), *options, "--",
               *selection]
    return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_bisect_step_skips_a_checkout_that_does_not_build_and_stops_git_bisect_on_bad_input(ladder, env, tmp_path):
    repo, shas = ladder
    git(repo, "checkout", "-q", shas[1])  # commit 01 does not build with the ladder's setup
    done = _step(repo, tmp_path, env, "--against", shas[0], "--setup", SETUP)
    assert done.returncode == 125 and done.stdout.splitlines()[-1] == "skip (exit 125)", done.stdout + done.stderr
    assert "skip: its setup failed (exit 1)" in done.stdout
    assert _step(repo, tmp_path, env, "--against", "nope").returncode == 128  # above 127: git bisect run stops
    (repo / "ladder_model" / "hw.py").write_text("changed\n")
    dirty = _step(repo, tmp_path, env, "--against", shas[0])
    assert dirty.returncode == 128 and "uncommitted changes (ladder_model/hw.py)" in dirty.stderr
    assert _step(repo, tmp_path, env).returncode == 128  # --against missing: argparse's error, still 128
    assert len(git(repo, "worktree", "list").splitlines()) == 1 and not _ours(tmp_path)


def test_bisect_step_asks_the_bad_commit_where_the_good_one_leaves_it_undecided_and_exits_125_if_still(ladder, env,
                                                                                                     tmp_path):
    repo, shas = ladder
    git(repo, "checkout", "-q", shas[2])
    report = tmp_path / "step.json"
    done = _step(repo, tmp_path, env, "--against", shas[0], "--bad", shas[3], "--looks", "2", "--json", str(report))
    assert done.returncode == 125, done.stdout + done.stderr
    document = json.loads(report.read_text())
    assert document["checkout"] == shas[2] and document["against"] == shas[0] and document["bad"] == shas[3]
    against_good, against_bad = document["probes"]  # undecided against good: the second opinion ran
    assert (against_good["reference"], against_bad["reference"]) == (shas[0], shas[3])
    assert against_good["verdict"] == against_bad["verdict"] == "unstable" and document["side"] == "undecided"
    assert against_good["pairs"] == 2
    # the checkout runs 37 blocks to the good commit's 20 (B/A about 0.65): one process pair cannot decide, but its
    # AB and BA pairs together show that the two stacks ran their own code (when the workers imported the checkout's
    # modules from the working folder, B/A was about 1); one pair alone swings widely on a loaded machine
    results = json.loads((Path(against_good["details"]["report_dir"]) / "results.json").read_text())
    (pairs,) = [record["ab"]["pairs"] for record in results["records"] if record.get("ab")]
    assert math.exp(statistics.fmean(math.log(pair["b"] / pair["a"]) for pair in pairs)) < 0.9, pairs
    assert STEP_EXIT == {Side.GOOD: 0, Side.BAD: 1, Side.UNDECIDED: 125}
    assert len(git(repo, "worktree", "list").splitlines()) == 1 and not _ours(tmp_path)


def test_a_round_runs_its_probes_at_once_each_pinned_to_a_device_of_its_own(ladder, env, tmp_path, monkeypatch):
    repo, _ = ladder
    for key in ("TMPDIR", "LADDER_PYTHON"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.chdir(REPO_ROOT)
    settings = ProbeSettings(SELECTION, 0.05, (2,), tmp_path / "work", timeout_s=240)
    with contextlib.ExitStack() as cleanup:
        found = commits_ladder(repo, "main~3", "main", None, tmp_path / "work", cleanup)
        probes = StackProbes(found.python_of, settings, devices=["7", "8"])
        outcomes = probes.run_round([(2, 0), (3, 0)])
    assert [o.verdict for o in outcomes] == ["unstable", "unstable"], outcomes  # one process pair: undecided
    logs = sorted((tmp_path / "work").glob("probe-*.log"))
    assert [log.read_text().split()[1] for log in logs] == ["CUDA_VISIBLE_DEVICES=7", "CUDA_VISIBLE_DEVICES=8"]
    spans = [json.loads((Path(o.details["report_dir"]) / "results.json").read_text())["meta"] for o in outcomes]
    starts = [datetime.fromisoformat(m["started_at"]) for m in spans]
    ends = [datetime.fromisoformat(m["finished_at"]) for m in spans]
    assert max(starts) < min(ends)  # the two sessions overlapped: run at once
    with pytest.raises(ValueError, match="3 probes at once need as many devices, have 2"):
        probes.run_round([(1, 0), (2, 0), (3, 0)])


def test_probes_at_once_need_a_device_each(capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main(["bisect", "--stacks", f"{sys.executable},{sys.executable}", "-n", "2"]) == 2
    assert "-n: 2 probes at once need 2 GPUs, 0 found (none)" in capsys.readouterr().err
    assert probe_devices(2, "3,5,6") == ["3", "5"] and probe_devices(1, None) == []

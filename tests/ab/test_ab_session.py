"""One A/B test (hwregress.ab.session.run_ab) on real worker processes of this interpreter and a tiny CPU model whose
forward sleeps for a stack's setting (tests/support/ab_workloads.py): an A/A test passes, a B three times slower is a
regression naming its setting, a worker killed mid-session is WorkerDied and leaves no process; bad plans are refused
with the value. The tests of the engine's logic run their workers forked from the self-tests' zygote (the ``python``
fixture); the killed worker's test runs fresh interpreters, as the plugin starts them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time

import pytest
from support.project import SUPPORT_DIR

from hwregress.ab.order import balanced_order
from hwregress.ab.protocol import Case
from hwregress.ab.session import ABResult, PairPlan, run_ab
from hwregress.ab.stacks import Stack
from hwregress.ab.workers import WorkerDied, started_pair
from hwregress.plugin.families.ab_window import summary_line
from hwregress.store.verdicts import Verdict

pytestmark = pytest.mark.slow

SLEEP_ENV = "HWREGRESS_AB_TEST_SLEEP_S"  # tests/support/ab_workloads.py's: seconds each forward of ab_sleepy sleeps
FAIL_ENV = "HWREGRESS_AB_TEST_FAIL_CALL"  # and the forward call of ab_sleepy that raises
TIMEOUT_S = 300.0  # generous: each worker starts an interpreter and imports torch on a loaded 2-core machine
SLEEPY = Case("ab_sleepy", "train", 2, warmup_steps=1)
FRESH = Stack("A", sys.executable)  # stack A as the plugin makes it: a fresh interpreter per worker


@pytest.fixture(autouse=True)
def workload_path(monkeypatch):
    """Workers find tests/support/ab_workloads.py on their PYTHONPATH; no sleep unless a test sets one; one torch
    thread in both stacks, so that a busy shared machine's other jobs move a window's time little beside its sleep."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SUPPORT_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv(SLEEP_ENV, raising=False)


def group_gone(pgid: int) -> bool:
    """Whether no process of the group ``pgid`` is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def python(zygote) -> str:
    """An interpreter whose workers fork from the self-tests' zygote (support/zygote.py): the tests of the engine's
    logic need two processes per pair, not their imports' seconds (32 workers an A/A test)."""
    return zygote.python


def starter(a: Stack, b: Stack, created: list | None = None):
    """Fresh pairs of workers of stacks ``a`` and ``b`` (each appended to ``created`` where given)."""

    @contextlib.contextmanager
    def start():
        with started_pair((a, b), "cpu", TIMEOUT_S, ["ab_workloads"]) as workers:
            if created is not None:
                created.append(workers)
            yield workers

    return start


def run(python: str, plan: PairPlan, case: Case = SLEEPY, b_settings: dict[str, str] | None = None) -> ABResult:
    """One A/B test of ``case`` between stack A and a stack B with ``b_settings``, both on ``python``."""
    return run_ab(case, starter(Stack("A", python), Stack("B", python, b_settings or {})), plan)


def test_an_a_a_test_passes_in_the_balanced_order_with_alike_fingerprints(monkeypatch, python):
    # 50 ms of sleep per step in both stacks: each window's time is mostly the sleep (10 ms left the tiny model's
    # step to a loaded machine: A/A ratios from 0.5 to 3), so A/A log-ratios lie well within +-log(1.5) and the 8
    # process pairs' bounds (their extremes at alpha/2) show no 50% difference either way.
    monkeypatch.setenv(SLEEP_ENV, "0.05")
    plan = PairPlan(steps=2, seed=7, threshold=0.5, looks=(4, 16))
    result = run(python, plan)
    assert result.verdict is not Verdict.REGRESSION
    assert result.verdict is Verdict.PASS, result.to_dict()
    assert result.looks == [4, 16]  # 2 process pairs cannot bound the ratio at alpha/2 = 0.005: no pass there
    assert [pair.order for pair in result.pairs] == balanced_order(16, 7)
    assert [pair.index for pair in result.pairs] == list(range(16)) and result.dropped == []
    assert [pair.process for pair in result.pairs] == [index // 2 for index in range(16)]
    assert result.processes == 8 and result.units == 8 and result.pairs_per_process == 2
    assert all(pair.a > 0 and pair.b > 0 for pair in result.pairs)
    assert 0.5 < result.comparison.ratio < 1.5 and result.comparison.pairs == 8
    assert result.alpha == 0.005 and result.reach.alpha == 0.005
    assert result.fingerprints["A"]["python_executable"] == result.fingerprints["B"]["python_executable"]
    assert result.fingerprints["A"]["torch"] and result.difference == []
    saved = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert saved["verdict"] == "pass" and saved["comparison"]["verdict"] == "pass"
    assert [pair["order"] for pair in saved["pairs"]] == balanced_order(16, 7)


def test_a_b_three_times_slower_is_a_regression_naming_its_setting(monkeypatch, python):
    monkeypatch.setenv(SLEEP_ENV, "0.02")
    plan = PairPlan(steps=2, seed=3, threshold=0.05, looks=(8, 16))
    result = run(python, plan, b_settings={SLEEP_ENV: "0.06"})
    assert result.verdict is Verdict.REGRESSION, result.to_dict()
    assert result.comparison.ratio < 0.5
    assert result.looks == [8]  # a gross drop on 4 process pairs decides the first look
    assert f"env {SLEEP_ENV}: 0.02 -> 0.06" in result.difference
    assert all(pair.b < pair.a for pair in result.pairs)


def test_a_failed_window_drops_its_process_pair_with_the_error_and_the_test_goes_on(monkeypatch, tmp_path, python):
    # B's forward call 5 raises in the first process to reach it: call 1 is the warmup, each window runs 3 (one
    # untimed step, 2 timed), so B's second window of process pair 0 fails; both pairs of process pair 0 are dropped,
    # 7 of 8 process pairs kept.
    once = tmp_path / "fail-once"
    once.touch()
    monkeypatch.setenv(SLEEP_ENV, "0.05")
    plan = PairPlan(steps=2, seed=7, threshold=0.5, looks=(16,))
    result = run(python, plan, b_settings={FAIL_ENV: "5", "HWREGRESS_AB_TEST_FAIL_ONCE": str(once)})
    failed = result.pairs[1]
    assert failed.b is None and failed.a is not None and "forward call 5 failed (injected" in failed.b_error
    assert len(result.pairs) == 16 and all(pair.complete for pair in result.pairs if pair.index != 1)
    assert [pair.index for pair in result.dropped] == [0, 1]
    assert all("process pair 0" in pair.dropped and "stack B's window of pair 1 failed" in pair.dropped
               for pair in result.dropped)
    assert result.units == 7 and result.comparison.pairs == 7 and result.verdict is Verdict.PASS, result.to_dict()
    assert f"env {FAIL_ENV}: unset -> 5" in result.difference


def test_a_worker_killed_mid_test_is_worker_died_naming_it_and_no_worker_is_left(monkeypatch):
    monkeypatch.setenv(SLEEP_ENV, "0.2")  # each window takes about 0.6 s: the kill lands before the test can end
    plan = PairPlan(steps=2, seed=0, threshold=0.05, looks=(4, 8))
    created: list = []

    def kill_b_after_its_second_window() -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not created and time.monotonic() < deadline:
            time.sleep(0.02)
        worker_b = created[0][1]
        while worker_b.stderr_tail().count("window of") < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(worker_b.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_b_after_its_second_window)
    killer.start()
    try:
        with pytest.raises(WorkerDied) as raised:
            run_ab(SLEEPY, starter(FRESH, Stack("B", sys.executable), created), plan)
    finally:
        killer.join()
    assert raised.value.label == "B" and raised.value.signal == signal.SIGKILL
    assert f"worker B ({sys.executable}) died during window" in str(raised.value)
    assert "window of 2 steps" in raised.value.stderr_tail
    assert len(created) == 1 and all(group_gone(worker.pid) for worker in created[0])


@pytest.mark.parametrize(("fields", "named"), [
    ({"steps": 0}, "steps 0"),
    ({"steps": 2.5}, "steps 2.5"),
    ({"looks": ()}, "looks ()"),
    ({"looks": (3, 6)}, "look 3 of (3, 6) is not an even pair count"),
    ({"looks": (0,)}, "look 0 of (0,) is not an even pair count"),
    ({"looks": (10, 10)}, "look 10 of (10, 10) does not come after 10"),
    ({"looks": (20, 10)}, "look 10 of (20, 10) does not come after 20"),
    ({"threshold": 1.0}, "threshold 1.0"),
    ({"seed": -1}, "seed -1: the pairs' order is seeded with abs(seed)"),
    ({"alpha": 0.5}, "alpha 0.5"),
    ({"max_threshold": 0.0}, "max_threshold 0.0"),
    ({"pairs_per_process": 3}, "pairs_per_process 3 is not an even count"),
    ({"pairs_per_process": 4, "looks": (4, 6)}, "look 6 of (4, 6) is not a multiple of pairs_per_process 4"),
], ids=["no-steps", "float-steps", "no-looks", "odd-look", "zero-look", "repeated-look", "decreasing-looks",
        "threshold", "negative-seed", "alpha", "max-threshold", "odd-per-process", "look-not-a-multiple"])
def test_a_bad_plan_is_refused_naming_the_value(fields, named):
    with pytest.raises(ValueError, match="A/B plan") as raised:
        PairPlan(**{"steps": 2, "seed": 0, "threshold": 0.05, **fields})
    assert named in str(raised.value)


def test_a_plan_keeps_its_looks_as_a_tuple_and_spends_alpha_over_them():
    plan = PairPlan(steps=1, seed=0, threshold=0.05, looks=[10, 20, 40])  # type: ignore[arg-type]
    assert plan.looks == (10, 20, 40) and plan.alpha_at(2) == pytest.approx(0.01 / 3)
    assert PairPlan(steps=1, seed=0, threshold=0.05).looks == (20, 40)


def test_two_models_that_do_not_fit_together_are_rebuilt_one_at_a_time_and_the_cost_is_counted(tmp_path, monkeypatch,
                                                                                               python):
    # ab_exclusive's build runs out of memory while the other live worker's model is on the "device" (a folder)
    monkeypatch.setenv("HWREGRESS_AB_TEST_SLOT_DIR", str(tmp_path))
    case = Case("ab_exclusive", "infer", 2, warmup_steps=1)
    result = run(python, PairPlan(steps=2, seed=0, threshold=0.9, looks=(4,)), case)
    assert result.memory == "reload" and result.reload_s > 0
    assert all(pair.complete for pair in result.pairs) and result.dropped == []  # never both on the device
    assert result.to_dict()["memory"] == "reload"


def test_the_process_pairs_alternate_which_stack_builds_and_warms_up_its_model_first(tmp_path, monkeypatch, python):
    # the stack prepared second read 3-5% faster in A/A bisection steps on the 2-core VM (docs/data/bisect_commits_*)
    order = tmp_path / "order.txt"
    monkeypatch.setenv("HWREGRESS_AB_TEST_ORDER_FILE", str(order))
    run(python, PairPlan(steps=1, seed=0, threshold=0.9, looks=(6,)), Case("ab_ordered", "infer", 2, warmup_steps=1),
        {"HWREGRESS_AB_TEST_STACK": "B"})
    assert order.read_text().split() == ["A", "B", "B", "A", "A", "B"]


def test_two_models_that_fit_together_both_stay_loaded(python):
    result = run(python, PairPlan(steps=2, seed=0, threshold=0.9, looks=(2,)),
                 Case("ab_tiny", "infer", 2, warmup_steps=1))
    assert result.memory == "both" and result.reload_s == 0 and result.processes == 1


def test_the_reach_of_too_few_process_pairs_says_process_pairs(python):
    result = run(python, PairPlan(steps=2, seed=0, threshold=0.9, looks=(4,)),
                 Case("ab_tiny", "infer", 2, warmup_steps=1))
    assert result.units == 2 and result.reach.mds is None
    assert result.reach.why_none.startswith("2 process pairs cannot reach p < 0.01"), result.reach.why_none
    assert "no MDS: 2 process pairs cannot reach" in summary_line(result, len(result.pairs))

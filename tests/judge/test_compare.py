"""Verdicts of one test against its baseline entry."""

from __future__ import annotations

import dataclasses

import pytest
from support.judging import conclude_onto

from hwregress.judge.compare import Measured, judge
from hwregress.judge.tolerances import Tolerances

ENV = {"torch": "2.13.0", "cuda": None, "cudnn": None, "driver": None, "python": "3.11.7"}
BASE = {"samples": [100.0, 101, 99, 100.5, 99.5, 100, 100.2, 99.8], "peak_memory_bytes": 1000 * 2**20,
        "accuracy": 0.97, "environment": ENV, "history": [100.0, 100.2, 99.9]}  # three steady sessions


def measured(scale=1.0, peak=1000 * 2**20, accuracy=None, env=ENV, stable=True, speedup=None):
    return Measured("t[cpu]", [x * scale for x in BASE["samples"]], "samples/s", stable, env, peak, accuracy, speedup)


def test_no_baseline_is_new():
    judgement = judge(measured(), None, Tolerances())
    assert judgement.verdict == "new" and not judgement.failures and "--update-baselines" in judgement.notes[0]


def test_same_numbers_pass():
    judgement = judge(measured(), BASE, Tolerances())
    assert judgement.verdict == "pass" and not judgement.failures
    assert judgement.figures.ratio == 1.0


def test_slowdown_is_regression_with_numbers():
    judgement = judge(measured(0.8), BASE, Tolerances())
    assert judgement.verdict == "regression"
    (message,) = judgement.failures
    assert ("t[cpu]: throughput regressed" in message and "ratio 0.800 < 0.950" in message
            and "tolerance 5.0%" in message)


def test_speedup_is_improvement_not_failure():
    judgement = judge(measured(1.3), BASE, Tolerances())
    assert judgement.verdict == "improvement" and not judgement.failures


def test_memory_ceiling():
    tolerances = Tolerances(sampled_memory=0.10, memory_slack_bytes=0)
    assert not judge(measured(peak=1100 * 2**20), BASE, tolerances).failures
    judgement = judge(measured(peak=1101 * 2**20), BASE, tolerances)
    assert (judgement.verdict == "regression"
            and "peak memory 1101.0 MiB exceeds the ceiling 1100.0 MiB" in judgement.failures[0])


def test_an_exact_peak_is_held_to_the_memory_tolerance_and_a_sampled_one_to_the_sampled_tolerance():
    exact = dataclasses.replace(measured(peak=1200 * 2**20), exact_memory=True)
    assert "exceeds the ceiling 1100.0 MiB" in judge(exact, BASE, Tolerances()).failures[0]
    assert not judge(measured(peak=1200 * 2**20), BASE, Tolerances(memory_slack_bytes=0)).failures  # within 25%


def test_a_quiet_cpu_session_whose_rss_peak_took_its_other_level_passes_and_twice_the_memory_fails():
    # alexnet train bs8 on the 2-core VM, unchanged code: baseline 772.1 MiB, a quiet session's peak 920.5 MiB
    # failed the ceiling of 772.1 x 1.1 + 64 = 913.3 MiB
    baseline = {**BASE, "peak_memory_bytes": int(772.1 * 2**20)}
    assert not judge(measured(peak=int(920.5 * 2**20)), baseline, Tolerances()).failures
    doubled = judge(measured(peak=int(2 * 772.1 * 2**20)), baseline, Tolerances())
    assert doubled.verdict == "regression" and "x (1 + 25%) + 64 MiB slack" in doubled.failures[0]


def test_accuracy_margin():
    assert not judge(measured(accuracy=0.955), BASE, Tolerances(accuracy_margin=0.02)).failures
    assert "accuracy 0.9400 < baseline 0.9700" in judge(measured(accuracy=0.94), BASE, Tolerances()).failures[0]


def test_environment_change_is_flagged_and_strict_env_fails():
    other = dict(ENV, torch="2.14.0")
    judgement = judge(measured(env=other), BASE, Tolerances())
    assert judgement.verdict == "env-changed" and not judgement.failures
    assert judgement.figures.env_changes == ("torch 2.13.0 -> 2.14.0",)
    assert "--strict-env" in judge(measured(env=other), BASE, Tolerances(), strict_env=True).failures[0]


def test_regression_wins_over_env_change():
    assert judge(measured(0.5, env=dict(ENV, driver="590")), BASE, Tolerances()).verdict == "regression"


def test_noisy_window_is_unstable():
    assert judge(measured(stable=False), BASE, Tolerances()).verdict == "unstable"


def test_speedup_against_baseline():
    base = dict(BASE, speedup=20.0)
    assert not judge(measured(speedup=19.5), base, Tolerances()).failures
    assert "speedup 15.00x < baseline 20.00x" in judge(measured(speedup=15.0), base, Tolerances()).failures[0]


def test_session_never_records_a_failed_extra_check(tmp_path):
    from hwregress.judge.session import BenchSession, Policy
    from hwregress.store.baselines import BaselineStore
    from hwregress.store.results import TestRecord

    store = BaselineStore(tmp_path)
    session = BenchSession(store, Policy(update_mode="all"))
    record = TestRecord("t[cuda:0]", hardware_key="gpu", accuracy=0.5, environment=ENV)
    failures = conclude_onto(session, record, "parity/x", ["t[cuda:0]: accuracy differs from the CPU's"])
    assert failures == ["t[cuda:0]: accuracy differs from the CPU's"]
    assert record.verdict == "regression" and record.baseline_action == "kept-regression"
    assert store.load("gpu") is None  # a failing test never becomes the baseline
    conclude_onto(session, TestRecord("t[cuda:0]", hardware_key="gpu", accuracy=0.5, environment=ENV), "parity/x")
    record2 = TestRecord("t[cuda:0]", hardware_key="gpu", accuracy=0.1, environment=ENV)
    conclude_onto(BenchSession(store, Policy(update_mode="all")), record2, "parity/x", ["still differs"])
    assert record2.baseline_action == "kept-regression"
    assert store.load("gpu").entries["parity/x"]["accuracy"] == 0.5


def test_a_baseline_of_fewer_than_three_sessions_judges_only_beyond_the_cap():
    young = {key: value for key, value in BASE.items() if key != "history"}
    moderate = judge(measured(0.8), young, Tolerances(max_threshold=0.25))
    assert moderate.verdict == "pass" and moderate.figures.threshold == 0.25
    assert any("provisional threshold: the baseline holds 1 session(s)" in note for note in moderate.notes)
    assert judge(measured(0.5), young, Tolerances(max_threshold=0.25)).verdict == "regression"
    assert judge(measured(0.8), dict(young, history=[100.0, 100.3]), Tolerances()).verdict == "pass"


# -- compile time: only a compile of the same cache state is compared -----------------------------------------
def compiled(compile_s=2.0, cache="cold"):
    return Measured("t[cpu]", BASE["samples"], "samples/s", True, ENV, compile_s=compile_s, compile_cache=cache)


def test_a_cold_compile_is_compared_with_a_cold_baseline_compile():
    judgement = judge(compiled(3.0), dict(BASE, compile_s=2.0, compile_cache="cold"), Tolerances())
    comparison = judgement.figures.compile_vs_baseline
    assert (comparison.compared, comparison.cache, comparison.baseline_compile_s, comparison.ratio) == (
        True, "cold", 2.0, 1.5)
    assert judgement.verdict == "pass" and not judgement.failures  # compile time is shown, never a failure


@pytest.mark.parametrize(("cache", "baseline_cache", "said"), [
    ("cold", "warm", "with a cold cache, the baseline's with a warm one"),
    ("warm", "cold", "with a warm cache, the baseline's with a cold one"),
    ("cold", None, "with a cold cache, the baseline's with an unknown one"),  # recorded before cache states
])
def test_a_warm_and_a_cold_compile_are_never_compared(cache, baseline_cache, said):
    base = dict(BASE, compile_s=0.1, **({"compile_cache": baseline_cache} if baseline_cache else {}))
    judgement = judge(compiled(25.0, cache), base, Tolerances())
    comparison = judgement.figures.compile_vs_baseline
    assert comparison.compared is False and comparison.ratio is None
    assert comparison.cache == cache and comparison.baseline_cache == baseline_cache
    assert said in comparison.reason and "not compared" in comparison.reason
    assert any(comparison.reason in note for note in judgement.notes)
    assert judgement.verdict == "pass" and not judgement.failures


def test_nothing_to_compare_without_two_compile_times():
    assert judge(compiled(), BASE, Tolerances()).figures.compile_vs_baseline is None
    uncompiled = judge(measured(), dict(BASE, compile_s=2.0, compile_cache="cold"), Tolerances())
    assert uncompiled.figures.compile_vs_baseline is None


def test_a_session_records_a_refused_compile_comparison_and_stores_the_cache_state(tmp_path):
    from hwregress.judge.session import BenchSession, Policy
    from hwregress.store.baselines import BaselineStore
    from hwregress.store.figures import CompileFigures
    from hwregress.store.results import TestRecord

    store = BaselineStore(tmp_path)
    store.write_entries("cpu", "cpu", {"throughput/x": dict(BASE, compile_s=0.1, compile_cache="warm")})
    record = TestRecord("t[cpu]", hardware_key="cpu", samples=BASE["samples"], environment=ENV,
                        compile=CompileFigures(compile_s=25.0, cache="cold"))
    assert conclude_onto(BenchSession(store, Policy(update_mode="all")), record, "throughput/x") == []
    assert record.compile is not None and record.compile.vs_baseline is not None
    assert record.compile.vs_baseline.compared is False
    assert "compile time not compared: this session compiled with a cold cache" in record.message
    entry = store.load("cpu").entries["throughput/x"]
    assert (entry["compile_s"], entry["compile_cache"], entry["compile_history"]) == (25.0, "cold", [25.0])

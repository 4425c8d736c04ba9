"""Judging a record as the plugin does (compare + session): hardware identity, the capped threshold, an unstable
but gross slowdown, impossible figures, the diagnosis of a regression, and what a recorded entry keeps."""

from __future__ import annotations

import json

import pytest
from support.judging import conclude_onto

from hwregress.judge.compare import Measured, judge
from hwregress.judge.session import BenchSession, Policy
from hwregress.judge.tolerances import Tolerances
from hwregress.store.baselines import BaselineStore
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict

STEADY = [100.0, 101, 99, 100.5, 99.5, 100, 100.2, 99.8, 100.1, 99.9]
IDENTITY = {"cpu_vendor": "AuthenticAMD", "cpu_brand": "AMD EPYC", "cpu_family": 26, "cpu_model": 2,
            "torch_threads": 2, "cpu_avx512f": True}


def _measured(samples, identity=IDENTITY, stable=True):
    return Measured("t[cpu]", samples, "samples/s", stable, {}, identity=identity)


def test_other_identity_under_the_same_key_is_not_judged():
    entry = {"samples": [s * 2 for s in STEADY], "identity": {**IDENTITY, "cpu_family": 25, "cpu_model": 1}}
    judgement = judge(_measured(STEADY), entry, Tolerances())
    assert judgement.verdict == Verdict.OTHER_HARDWARE and not judgement.failures
    assert judgement.figures.identity_changes == ("cpu_family: 25 -> 26", "cpu_model: 1 -> 2",)
    assert judgement.figures.ratio is None and "--update-baselines" in judgement.notes[0]


def test_accept_identity_judges_anyway_and_says_so():
    entry = {"samples": [s * 2 for s in STEADY], "identity": {**IDENTITY, "cpu_family": 25}}
    judgement = judge(_measured(STEADY), entry, Tolerances(), accept_identity=True)
    assert judgement.verdict == Verdict.REGRESSION
    assert any("--accept-identity" in note for note in judgement.notes)


def test_an_old_entry_without_identity_is_judged():
    assert judge(_measured(STEADY), {"samples": STEADY}, Tolerances()).verdict == Verdict.PASS


def test_noisy_baseline_cannot_lift_the_threshold_past_the_cap():
    noisy = [40.0, 160, 60, 140, 80, 120, 100, 100, 70, 130]  # IQR/median ~ 60%
    judgement = judge(_measured([s * 0.5 for s in STEADY]), {"samples": noisy}, Tolerances(max_threshold=0.25))
    assert judgement.figures.threshold == pytest.approx(0.25)
    assert judgement.figures.wanted_threshold > 0.25
    assert judgement.verdict == Verdict.REGRESSION  # a 2x slowdown is never green
    assert any("noise-limited" in note for note in judgement.notes)


def test_unstable_window_does_not_hide_a_gross_slowdown():
    slow_and_noisy = [50.0, 30, 55, 45, 60, 35, 52, 48, 41, 58]
    judgement = judge(_measured(slow_and_noisy, stable=False), {"samples": STEADY}, Tolerances())
    assert judgement.verdict == Verdict.REGRESSION


def _record(samples, **fields) -> TestRecord:
    record = TestRecord("bench_tests/t.py::t[cpu]", hardware_key="amd-epyc-f26m2-2t", device="cpu",
                        device_name="AMD EPYC", model="tiny", mode="train", batch_size=4, dtype="fp32",
                        samples=list(samples), throughput=sorted(samples)[len(samples) // 2], **fields)
    record.identity, record.device_facts = dict(IDENTITY), {}
    return record


def test_an_impossible_figure_is_invalid_fails_and_is_never_recorded(tmp_path):
    session = BenchSession(BaselineStore(tmp_path), Policy(update_mode="force"))
    record = _record(STEADY, achieved_tflops=2000.0, mfu=None)
    record.device, record.device_name = "cuda:0", "NVIDIA H100 80GB HBM3"
    failures = conclude_onto(session, record, "throughput/tiny/train/bs4/fp32")
    assert record.verdict == Verdict.INVALID and failures
    assert "2000" in failures[0] and "impossible figure" in failures[0]
    assert not list(tmp_path.glob("*.json"))


def _powered(mean_power_w: float) -> TestRecord:
    """A CUDA record whose window drew ``mean_power_w`` on average under NVML's enforced limit of 700 W."""
    record = _record(STEADY, health={"power_limit_enforced_w": 700.0, "power_limit_default_w": 700.0},
                     telemetry={"metrics": {"power_w": {"mean": mean_power_w}}, "duration_s": 2.0})
    record.device, record.device_name = "cuda:0", "NVIDIA H100 80GB HBM3"
    return record


def test_mean_power_above_the_enforced_limit_s_slack_is_invalid(tmp_path):
    # the limit comes from the record's health (NVML's enforced power limit); 1.1 x 700 W = 770 W
    session = BenchSession(BaselineStore(tmp_path), Policy(update_mode="force"))
    record = _powered(800.0)
    failures = conclude_onto(session, record, "throughput/tiny/train/bs4/fp32")
    assert record.verdict == Verdict.INVALID
    assert "mean power 800 W exceeds 1.1 x the enforced limit 700 W" in failures[0]
    assert not list(tmp_path.glob("*.json"))


def test_mean_power_within_the_enforced_limit_s_slack_is_judged(tmp_path):
    session = BenchSession(BaselineStore(tmp_path), Policy(update_mode="force"))
    record = _powered(760.0)  # above the limit by less than the 10% its averaging allows
    assert conclude_onto(session, record, "throughput/tiny/train/bs4/fp32") == []
    assert record.verdict == Verdict.NEW


def test_a_regression_under_contention_is_diagnosed_as_contention_first(tmp_path):
    session = BenchSession(BaselineStore(tmp_path), Policy(update_mode="all"))
    conclude_onto(session, _record(STEADY), "throughput/tiny/train/bs4/fp32")
    judged = BenchSession(BaselineStore(tmp_path), Policy())
    slow = _record([s / 2 for s in STEADY], health={"other_cpu_fraction": 0.93, "logical_cores": 2})
    failures = conclude_onto(judged, slow, "throughput/tiny/train/bs4/fp32")
    assert slow.verdict == Verdict.REGRESSION and failures
    assert slow.diagnosis and slow.diagnosis[0].startswith("CPU contention: other processes used 93%")


def test_a_recorded_entry_keeps_the_evidence_for_a_later_diagnosis(tmp_path):
    session = BenchSession(BaselineStore(tmp_path), Policy(update_mode="all"))
    ceiling = _record([0.2] * 10, family="ceiling", measures_roof=True, unit="TFLOP/s")
    ceiling.model = "gemm"
    conclude_onto(session, ceiling, "ceiling/gemm/roof/bs1024/fp32")
    record = _record(STEADY, health={"other_cpu_fraction": 0.01},
                     telemetry={"metrics": {"cpu_freq_mhz": {"mean": 2600.0}}, "throttle_reasons": []},
                     top_cpu_ops=[{"name": "aten::mkldnn_convolution", "total_ms": 12.0, "calls": 3, "share": 0.5}])
    record.details["profile_steps"] = 3
    conclude_onto(session, record, "throughput/tiny/train/bs4/fp32")
    (path,) = tmp_path.glob("*.json")
    entry = json.loads(path.read_text())["entries"]["throughput/tiny/train/bs4/fp32"]
    assert entry["identity"] == IDENTITY
    assert entry["telemetry_means"] == {"cpu_freq_mhz": 2600.0}
    assert entry["top_ops"] == [{"name": "aten::mkldnn_convolution", "total_ms": 12.0}] and entry["top_ops_steps"] == 3
    assert "ceilings" not in entry  # the file's ceiling entries are the baseline's roofs
    assert entry["health"] == {"other_cpu_fraction": 0.01}


def test_a_slower_roof_in_this_session_is_named_against_the_files_pooled_ceiling(tmp_path):
    recorder = BenchSession(BaselineStore(tmp_path), Policy(update_mode="all"))
    for session_roof in (0.20, 0.21, 0.19):
        gemm = _record([session_roof] * 10, family="ceiling", measures_roof=True, unit="TFLOP/s")
        gemm.model = "gemm"
        conclude_onto(recorder, gemm, "ceiling/gemm/roof/bs1024/fp32")
        conclude_onto(recorder, _record(STEADY), "throughput/tiny/train/bs4/fp32")
        recorder = BenchSession(BaselineStore(tmp_path), Policy(update_mode="all"))
    judged = BenchSession(BaselineStore(tmp_path), Policy())
    slow_roof = _record([0.1] * 10, family="ceiling", measures_roof=True, unit="TFLOP/s")
    slow_roof.model = "gemm"
    conclude_onto(judged, slow_roof, "ceiling/gemm/roof/bs1024/fp32")
    slow = _record([s / 2 for s in STEADY])
    conclude_onto(judged, slow, "throughput/tiny/train/bs4/fp32")
    assert slow.verdict == Verdict.REGRESSION
    assert any(line.startswith("the machine itself is 50% slower: gemm_fp32_tflops 0.1 now vs 0.2")
               for line in slow.diagnosis)

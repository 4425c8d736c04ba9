"""The tier estimate (hwregress.plugin.tier_estimate) against measured sessions: one model per family on an H200
and the default CPU tier on the development VM (tests/data/tier_durations), within stated factors, and a check that
fails when the tier runs slower or an assumption is wrong; the fixtures' extraction (scripts/tier_durations.py); each
family's cost rule beside its measurement; and the default GPU tier's matrix and cuts (one llama_1b batch per serving
mode, output parity's CPU reference once per model and session, models drawn on the device)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections import Counter

import pytest
import torch
from fakes import cuda as fake_cuda
from support.project import REPO
from torch import nn

from hwregress import workloads
from hwregress.measure import parity
from hwregress.measure.timing import TimingPlan
from hwregress.plugin import matrix, tier_assumptions, tier_durations, tier_estimate, tiers
from hwregress.plugin.families import registry
from hwregress.plugin.matrix import Selection
from hwregress.store.atomic import atomic_write_json
from hwregress.store.results import SessionResults, TestRecord

FIXTURES = sorted((REPO / "tests" / "data" / "tier_durations").glob("*.json"))
# Per session the estimate stays within 1.25x of the measured wall time less extended rounds: the five sessions
# measured read 0.92-1.11, and unchanged sessions of one selection differ by up to 8.5% among themselves (H200
# sessions 2-4: 64.8, 60.2, 59.7 s); the budget check carries the same factor. Per family 1.5x, or 2 s where a family
# is that close: the families measured read 0.75-1.36 (the roofs' 1.29-1.36 on a warmed machine whose device started
# in 1.5 s, not the 4.9 of a fresh one), but for the one-test digits family, whose 0.56 s (x0.59) miss is under the
# slack; 2 s is a third of a percent of the 600-s budget, and a family of the budget's size misses by far more.
SESSION_FACTOR = 1.25
FAMILY_FACTOR = 1.5
FAMILY_SLACK_S = 2.0


def compared(measured: tier_durations.MeasuredSession,
             assumptions: tier_assumptions.Assumptions | None = None) -> list[tier_durations.Comparison]:
    assumptions = assumptions or tier_assumptions.for_hardware(measured.hardware_key)
    return tier_durations.compare(tier_estimate.estimate(measured.cases(), assumptions,
                                                         visits=measured.visits_setting), measured)


def misses(rows: list[tier_durations.Comparison]) -> list[str]:
    return (tier_durations.outside([r for r in rows if r.family == "session"], SESSION_FACTOR)
            + tier_durations.outside([r for r in rows if r.family != "session"], FAMILY_FACTOR, FAMILY_SLACK_S))


def slower(measured: tier_durations.MeasuredSession, factor: float,
           family: str | None = None) -> tier_durations.MeasuredSession:
    """The same session with every test (of ``family``, or all) ``factor`` times as long, and its clock longer by as
    much."""
    tests = [dataclasses.replace(t, duration_s=t.duration_s * factor,
                                 window_s=t.window_s * factor if t.window_s else t.window_s)
             if family in (None, t.family) else t for t in measured.tests]
    added = sum(new.duration_s - old.duration_s for new, old in zip(tests, measured.tests, strict=True))
    return dataclasses.replace(measured, session_s=measured.session_s + added, tests=tests)


def test_the_fixtures_are_the_h200_sessions_and_the_cpu_tiers():
    keys = Counter(tier_durations.load(path).hardware_key for path in FIXTURES)
    assert keys == {"nvidia-h200": 4, "amd-epyc-f26m2-2t": 1, "intel-r-xeon-r-processor-2-50ghz-f6m85-2t": 3}
    tiers_measured = {tier_durations.load(path).selection.get("tier", "default") for path in FIXTURES}
    assert tiers_measured == {"quick", "default", "full"}


@pytest.mark.parametrize("path", FIXTURES, ids=[path.stem for path in FIXTURES])
def test_the_estimate_is_within_its_factors_of_a_measured_session(path):
    rows = compared(tier_durations.load(path))
    assert misses(rows) == [], tier_durations.comparison_table(rows)


@pytest.mark.parametrize("path", FIXTURES, ids=[path.stem for path in FIXTURES])
def test_the_families_run_in_the_order_the_estimate_charges_them(path):
    measured = tier_durations.load(path)
    ran = list(dict.fromkeys(test.family for test in measured.tests))
    assert ran == [family for family in tier_estimate.RUN_ORDER if family in ran]
    assert list(measured.cases()) == ran


def test_the_check_fails_when_the_tier_runs_twice_as_long():
    measured = tier_durations.load(REPO / "tests/data/tier_durations/h200-s3-update.json")
    rows = compared(slower(measured, 2.0))
    assert [line.split(":")[0] for line in misses(rows)] == ["session", "ceiling", "throughput"]


def test_the_check_fails_when_one_family_runs_twice_as_long():
    measured = tier_durations.load(REPO / "tests/data/tier_durations/h200-s1-family.json")
    rows = compared(slower(measured, 2.0, family="throughput"))
    assert [line.split(":")[0] for line in misses(rows)] == ["session", "throughput"]


def test_the_check_fails_when_the_process_launch_is_halved():
    measured = tier_durations.load(REPO / "tests/data/tier_durations/h200-s1-family.json")
    halved = dataclasses.replace(tier_assumptions.H200_SXM, process_launch_s=4.0)
    assert [line.split(":")[0] for line in misses(compared(measured, halved))] == ["scaling"]


def test_the_previous_constants_fail_the_check():
    # the estimate before it was checked: a 1.16 TFLOP/s host (0.29 x 8 cores x 0.5), 10 s of CPU digits, 25 s of
    # session, no cuDNN search, no profiler cost per operator, 0.5 s a first call and a profiler, 0.3 s a test
    before = dataclasses.replace(tier_assumptions.H200_SXM, host_cpu_tflops=1.16, digits_cpu_s=10.0, session_s=25.0,
                                 cudnn_search_steps=0.0, profile_op_us={}, first_call_s=0.5, profiler_s=0.5,
                                 per_test_s=0.3, ceiling_setup_s=1.0, device_init_s={}, library_import_s={})
    measured = tier_durations.load(REPO / "tests/data/tier_durations/h200-s1-family.json")
    assert misses(compared(measured, before)) != []


def test_default_gpu_matrix_has_one_llama_1b_batch_per_serving_mode(monkeypatch):
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties()})  # one H100
    cases = registry.cases(Selection(["cuda:0"]), "throughput")
    batches = Counter(case["mode"] for case in cases if case["workload"] == "llama_1b")
    assert batches["prefill"] == 1 and batches["decode"] == 1
    asked = registry.cases(Selection(["cuda:0"], models=["llama_1b"], batch_sizes=[1, 8], modes=["decode"]),
                           "throughput")
    assert [case["batch_size"] for case in asked] == [1, 8]  # --batch-sizes still asks for more


def test_default_cpu_matrix_is_unchanged():
    cases = registry.cases(Selection(["cpu"], dtypes=["fp32"]), "throughput")
    assert [matrix.case_id(case) for case in cases] == [
        "cpu-resnet18-train-bs8-fp32", "cpu-resnet18-infer-bs1-fp32", "cpu-resnet18-infer-bs8-fp32",
        "cpu-mobilenet_v3_small-train-bs8-fp32", "cpu-mobilenet_v3_small-infer-bs1-fp32",
        "cpu-mobilenet_v3_small-infer-bs8-fp32", "cpu-alexnet-train-bs8-fp32", "cpu-alexnet-infer-bs1-fp32",
        "cpu-alexnet-infer-bs8-fp32", "cpu-bert_base-infer-ctx128-bs1-fp32", "cpu-gpt2-decode-ctx128-bs1-fp32"]


# The tiers' budgets on one GPU (issue 39): the estimate, times the factor it keeps against a measured session, within
# the minutes the tier promises, recording (--update-baselines: every window at --rounds) and judged (first look)
GPU_BUDGETS_S = {"quick": 180.0, "default": tier_estimate.BUDGET_S}


@pytest.mark.parametrize("tier", sorted(GPU_BUDGETS_S))
@pytest.mark.parametrize("machine", [tier_assumptions.H100_SXM, tier_assumptions.H200_SXM], ids=["h100", "h200"])
@pytest.mark.parametrize("judged", [False, True], ids=["recording", "judged"])
def test_estimate_of_each_gpu_tier_is_within_its_budget(tier, machine, judged):
    cases = tier_estimate.tier_cases(tier)
    plan = TimingPlan(rounds=TimingPlan().judged_rounds) if judged else None
    estimate = tier_estimate.estimate(cases, machine, plan=plan)
    assert estimate.tests == sum(len(family) for family in cases.values())
    assert estimate.total_s * SESSION_FACTOR <= GPU_BUDGETS_S[tier], tier_estimate.table(estimate)


def test_the_budget_check_fails_for_the_default_gpu_tier_of_before_the_tiers():
    # the GPU default before the tiers: the zoo and the transformers, every mode at the declared or device batches
    models = [*workloads.ZOO, "bert_base", "roberta_base", "deit_small", "gpt2", "llama_1b"]
    before_tiers = tiers.Tier("before", "", {"cuda": dict.fromkeys(models)})
    cases = tier_estimate.selection_cases(Selection(["cuda:0"], tier=before_tiers), [f.name for f in registry.BUILT_IN])
    before = tier_estimate.estimate(cases, tier_assumptions.H200_SXM, visits=1)  # no visits before issue 39
    assert before.tests == 113 and round(before.total_s) == 908
    assert before.total_s * SESSION_FACTOR > tier_estimate.BUDGET_S


def test_the_cuts_brought_the_default_gpu_tier_down():
    cases = tier_estimate.default_gpu_cases()
    now = tier_estimate.estimate(cases)
    # built on the CPU, with a CPU reference per test (the code before the cuts), it took longer
    before = tier_estimate.estimate(cases, dataclasses.replace(tier_assumptions.H100_SXM, builds_on_device=False,
                                                               shared_parity_reference=False))
    assert before.total_s > now.total_s + 100


def test_estimate_charges_a_cpu_reference_once_per_model():
    parity_cases = [{"device": "cuda:0", "workload": "resnet50", "dtype": d} for d in ("fp32", "bf16", "fp16")]
    shared = tier_estimate.estimate({"output-parity": parity_cases})
    alone = tier_estimate.estimate({"output-parity": parity_cases[:1]})
    per_test = tier_estimate.estimate({"output-parity": parity_cases},
                                      tier_assumptions.Assumptions(shared_parity_reference=False))
    assert shared.total_s < per_test.total_s
    assert shared.rows["output-parity"].fixed_s < 3 * alone.rows["output-parity"].fixed_s


class _Counted(nn.Module):
    """A tiny image classifier counting its CPU forward passes (the reference's)."""

    forwards = 0

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 16), nn.ReLU(), nn.Linear(16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu" and x.dtype == torch.float32 and not torch.is_autocast_enabled("cpu"):
            type(self).forwards += 1
        return self.body(x)


@pytest.fixture
def counted_workload():
    builds = []

    def build() -> nn.Module:
        builds.append(1)
        return _Counted()

    _Counted.forwards = 0
    workloads.register(workloads.Workload("counted_tiny", build, input_shape=(3, 8, 8), num_classes=10), replace=True)
    yield builds


def test_output_parity_builds_and_runs_the_cpu_reference_once_per_model_in_a_session(hw_project, counted_workload):
    # in-process (the counters live here) under another module name than this suite's tests/measure/test_parity.py
    shutil.copy(REPO / "bench_tests" / "test_parity.py", hw_project.path / "bench_tests" / "test_parity_once.py")
    result = hw_project.run("-k", "test_output_parity", "--models", "counted_tiny", "--dtypes", "fp32,bf16",
                            "--update-baselines", inprocess=True)
    result.assert_outcomes(passed=2)
    assert len(counted_workload) == 1  # one seeded build for both dtypes (the CPU test's copy is a deepcopy)
    assert _Counted.forwards == 2  # the reference's fp32 pass once, and the fp32 test's own pass on the CPU


def test_cpu_references_keep_one_model_and_rebuild_for_another(counted_workload):
    references = parity.CpuReferences()
    workload = workloads.get("counted_tiny")
    first = references.get(workload)
    assert references.get(workload) is first and len(counted_workload) == 1
    references.get(workload, seed=1)
    assert len(counted_workload) == 2
    assert parity.output_parity(workload, "cpu", "bf16", seed=1, references=references).ok
    assert len(counted_workload) == 2


def test_models_are_built_with_the_device_as_default():
    seen = []

    def build() -> nn.Module:
        seen.append(torch.empty(0).device.type)
        return nn.Linear(4, 4)

    model = workloads.build_on(workloads.Workload("on_device", build), "meta")
    assert seen == ["meta"] and next(model.parameters()).device.type == "meta"
    assert next(workloads.build_on(workloads.Workload("on_cpu", build), "cpu").parameters()).device.type == "cpu"


def test_device_copy_refuses_a_build_of_another_architecture():
    sizes = iter([4, 5])
    workload = workloads.Workload("shifting", lambda: nn.Linear(4, next(sizes)), input_shape=(4,), num_classes=4)
    reference = parity.CpuReference(workload, 0, workload.build(), torch.zeros(1, 4), torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"shifting.*CPU reference"):
        parity.device_copy(reference, "meta")


def test_the_default_tier_is_the_built_in_families_whatever_else_is_registered(monkeypatch):
    class Echo:  # a project's own family registered in this process: no cost model, not in the default tier
        name, marker, marker_help, requires, sub_records, view = "echo", "echo", "echo", frozenset(), (), None

        def cases(self, selection):
            return [{"device": device} for device in selection.devices]

        def measure(self, bench, **params):
            raise AssertionError("not measured here")

    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))
    registry.register(Echo())
    assert sorted(tier_estimate.default_gpu_cases()) == sorted(family.name for family in registry.BUILT_IN)
    # asked for, a family without a cost rule is named, not left out of the sum
    with pytest.raises(ValueError, match=r"family 'echo' .* has no estimated_cost"):
        tier_estimate.estimate({"echo": [{"device": "cuda:0"}]})
    assert tier_estimate.estimate({"echo": []}).tests == 0


def test_each_built_in_family_but_the_opt_in_spark_says_what_its_tests_cost():
    # the estimator holds no rule of its own: a family's cost is a method beside its measure
    assert [f.name for f in registry.BUILT_IN if not hasattr(f, "estimated_cost")] == ["spark"]
    source = (REPO / "src/hwregress/plugin/tier_estimate.py").read_text(encoding="utf-8")
    assert not any(f'"{f.name}"' in source.split("RUN_ORDER = ")[0] for f in registry.BUILT_IN)


def test_a_case_the_estimate_cannot_cost_is_named():
    case = {"device": "cuda:0", "workload": "resnet50", "mode": "train", "context": None, "compiler": "inductor",
            "memory_format": "contiguous", "batch_size": 32, "dtype": "fp32"}
    with pytest.raises(ValueError, match=r"cuda:0-resnet50-train.*inductor.*compilation"):
        tier_estimate.estimate({"throughput": [case]})


def test_a_spawned_job_pays_its_own_search_and_imports():
    # the scaling test's rank is a process of its own: cuDNN's search and the device's start are not shared
    case = {"device": "cuda:0", "workload": "resnet50", "mode": "train", "world_size": 1, "batch_size": 128,
            "dtype": "fp32"}
    window = {**case, "context": None, "compiler": "eager", "memory_format": "contiguous"}
    del window["world_size"]
    both = tier_estimate.estimate({"scaling": [case], "throughput": [window]})
    alone = tier_estimate.estimate({"throughput": [window]})
    assert both.rows["throughput"].fixed_s == pytest.approx(alone.rows["throughput"].fixed_s)
    search = 73 * 3 * 8.178e9 * 128 / (0.4 * 67e12)
    assert both.rows["scaling"].fixed_s > tier_assumptions.H100_SXM.process_launch_s + search


def results_file(tmp_path, records, duration_s=12.5):
    meta = {"session": "vm-1-20261126T000000Z", "started_at": "2026-11-26T00:00:00+00:00", "duration_s": duration_s,
            "args": ["-m", "gpu", "--models=resnet50", "-q"],
            "hardware": [{"device": "cpu", "name": "Some CPU", "facts": {"logical_cores": 16}}]}
    path = tmp_path / "results.json"
    atomic_write_json(path, SessionResults(meta, records).to_json())
    return path


def run_script(*args):
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    return subprocess.run([sys.executable, str(REPO / "scripts" / "tier_durations.py"), *args], capture_output=True,
                          text=True, env=env, check=False, timeout=120)


def record(test_id, family, **fields):
    return TestRecord(test_id, family=family, hardware_key="nvidia-h200", device="cuda:0", device_name="NVIDIA H200",
                      environment={"torch": "2.11.0+cu130", "cudnn": "91900"}, **fields)


def test_the_durations_script_keeps_each_test_and_where_it_was_measured(tmp_path):
    window = record("t.py::test_throughput[cuda:0-resnet50-infer-bs1-fp32]", "throughput", model="resnet50",
                    mode="infer", batch_size=1, dtype="fp32", duration_s=4.0, rounds=20,
                    details={"extended_rounds": 10}, health={"window_s": 2.0})
    roof = record("t.py::test_ceiling[cuda:0-p2p-fp32]", "ceiling", model="p2p", mode="roof", duration_s=0.001)
    out = tmp_path / "fixture.json"
    done = run_script(str(results_file(tmp_path, [window, roof])), "-o", str(out), "--note", "H200, 4.8 TB/s")
    assert done.returncode == 0, done.stderr
    fixture = json.loads(out.read_text(encoding="utf-8"))
    assert fixture["measured"]["command"] == "pytest -m gpu --models=resnet50 -q"
    assert fixture["measured"]["software"] == {"torch": "2.11.0+cu130", "cudnn": "91900"}
    assert fixture["measured"]["note"] == "H200, 4.8 TB/s"
    assert fixture["measured"]["host"] == "Some CPU, 16 logical cores"
    assert fixture["selection"] == {"devices": ["cuda:0"], "models": ["resnet50"],
                                    "families": ["ceiling", "throughput"], "tier": "default", "visits": 1}
    measured = tier_durations.load(out)
    assert measured.session_s == 12.5 and measured.extension_s == pytest.approx(1.0)  # 10 of 20 rounds of 2 s
    assert measured.family_s() == {"ceiling": pytest.approx(0.001), "throughput": pytest.approx(3.0)}


def test_the_durations_script_refuses_a_record_that_was_not_timed(tmp_path):
    untimed = record("t.py::test_throughput[cuda:0-resnet50-infer-bs1-fp32]", "throughput", duration_s=None)
    results = results_file(tmp_path, [untimed])
    done = run_script(str(results), "-o", str(tmp_path / "fixture.json"))
    assert done.returncode == 2 and not (tmp_path / "fixture.json").exists()
    assert done.stderr.strip() == (f"error: {results.name}: record {untimed.test_id} lacks its family, device or "
                                   "duration_s; extract results.json files of hwregress 0.1 sessions whose records "
                                   "time their tests")


def test_a_fixture_that_is_not_one_is_named(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"version": 1, "measured": {}}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken.json: not a tier durations fixture .*KeyError.*re-extract"):
        tier_durations.load(path)


def test_a_selection_that_does_not_rebuild_the_tests_is_refused():
    measured = tier_durations.load(REPO / "tests/data/tier_durations/h200-s3-update.json")
    narrowed = dataclasses.replace(measured, selection={**measured.selection, "models": ["resnet50"]})
    with pytest.raises(ValueError, match=r"does not rebuild the measured tests: not rebuilt \['cuda:0-gpt2"):
        narrowed.cases()

"""The default GPU tier within 10 minutes on one H100: its matrix (one llama_1b batch per serving mode), output
parity's CPU reference computed once per model and session, models drawn on the device, and the estimate of the
tier's fixed costs (hwregress.plugin.tier_estimate) under its documented assumptions."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest
import torch
from fakes import cuda as fake_cuda
from torch import nn

from conftest import REPO
from hwregress import workloads
from hwregress.measure import parity
from hwregress.plugin import matrix, tier_estimate
from hwregress.plugin.families import registry
from hwregress.plugin.matrix import Selection


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


def test_estimate_of_default_gpu_tier_is_within_ten_minutes():
    cases = tier_estimate.default_gpu_cases()
    estimate = tier_estimate.estimate(cases)
    assert estimate.tests == sum(len(family) for family in cases.values())
    assert estimate.total_s < tier_estimate.BUDGET_S, tier_estimate.table(estimate)
    # the cuts are what brings it there: built on the CPU, with a CPU reference per test, it would not fit
    before = tier_estimate.estimate(cases, tier_estimate.Assumptions(builds_on_device=False,
                                                                      shared_parity_reference=False))
    assert before.total_s > tier_estimate.BUDGET_S


def test_estimate_charges_a_cpu_reference_once_per_model():
    parity_cases = [{"device": "cuda:0", "workload": "resnet50", "dtype": d} for d in ("fp32", "bf16", "fp16")]
    shared = tier_estimate.estimate({"output-parity": parity_cases})
    alone = tier_estimate.estimate({"output-parity": parity_cases[:1]})
    per_test = tier_estimate.estimate({"output-parity": parity_cases},
                                      tier_estimate.Assumptions(shared_parity_reference=False))
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
    # in-process (the counters live here) under another module name than this suite's tests/test_parity.py
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
    assert list(tier_estimate.default_gpu_cases()) == [family.name for family in registry.BUILT_IN]

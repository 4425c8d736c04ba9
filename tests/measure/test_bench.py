"""One benchmark end to end on the CPU, through the library API (deterministic timer)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from hwregress import workloads
from hwregress.measure.out_of_memory import OutOfMemory, is_out_of_memory
from hwregress.measure.record import window_figures
from hwregress.measure.timing import TimingPlan
from hwregress.measure.window import RunOptions, build_step, run_model
from hwregress.store.assembly import put_measured
from hwregress.store.results import TestRecord

TINY = workloads.Workload("tiny-bench", lambda: nn.Sequential(nn.Flatten(), nn.Linear(48, 10)), (3, 4, 4), 10)


class FixedTimer:
    def time_round(self, run_steps, steps):
        run_steps()
        return steps * 0.002


def test_run_model_measures_everything():
    options = RunOptions(TimingPlan(warmup_steps=2, rounds=5, min_round_s=0.01), telemetry_interval_s=0.005,
                         profile_steps=2)
    measurement = run_model(TINY, "cpu", "train", 8, "fp32", FixedTimer(), options)
    assert measurement.throughput_samples == pytest.approx([8 / 0.002] * 5)
    assert measurement.timing.steps_per_round == 5
    # forward (2 x 48 x 10) + weight gradient (same); the input needs no gradient, so 2x forward
    assert measurement.flops_per_sample == pytest.approx(2 * (2 * 48 * 10))
    assert measurement.peak_memory_bytes is not None
    assert measurement.profile is not None and measurement.profile.top_cpu_ops


def test_int8_bytes_count_one_byte_weights_and_fp32_activations():
    """CPU int8: 1-byte weights, fp32 bias and activations (the base dtype the record names)."""
    options = RunOptions(TimingPlan(warmup_steps=1, rounds=3, min_round_s=0.001), telemetry_interval_s=0.005,
                         profile_steps=1)
    measurement = run_model(TINY, "cpu", "infer", 8, "int8", FixedTimer(), options)
    weights, activations = 48 * 10 * 1 + 10 * 4, 2 * (48 + 10) * 4  # per sample: Flatten and Linear outputs
    assert measurement.bytes_per_sample == pytest.approx(weights / 8 + activations)
    assert measurement.flops_per_sample == pytest.approx(2 * 48 * 10)  # quantized::linear_dynamic counted
    assert measurement.quantized_layers == 1 and measurement.quantized_base_dtype == "fp32"
    record = TestRecord(test_id="t", dtype="int8")
    put_measured(record, window_figures(record, measurement))
    assert record.details["quantized_base_dtype"] == "fp32"
    assert record.details["quantization"] == "int8-dynamic-per-tensor"  # the algorithm, not only the dtype
    assert record.arithmetic_intensity == pytest.approx(2 * 48 * 10 / (weights / 8 + activations))


def test_train_step_updates_weights_and_infer_does_not():
    model = TINY.build()
    inputs, labels = workloads.make_batch(TINY, 4, "cpu")
    before = [p.detach().clone() for p in model.parameters()]
    build_step(TINY, model, "infer", inputs, labels, "cpu", "fp32")()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    build_step(TINY, model, "train", inputs, labels, "cpu", "fp32")()
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_out_of_memory_is_reported_with_batch_and_device():
    def build():
        class Boom(nn.Module):
            def forward(self, x):
                raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 GB")
        return Boom()

    workload = workloads.Workload("boom", build, (3, 4, 4), 10)
    with pytest.raises(OutOfMemory, match="out of memory at batch 512 on cpu"):
        run_model(workload, "cpu", "infer", 512, "fp32", FixedTimer(), RunOptions(profile_steps=0))
    assert is_out_of_memory(MemoryError())
    assert not is_out_of_memory(RuntimeError("shape mismatch"))


def test_a_compiled_run_pays_the_compilers_set_up_untimed_once_then_compiles_cold(monkeypatch):
    from hwregress.measure import compilation

    monkeypatch.setattr(compilation, "_PRIMED", set())
    monkeypatch.setattr(compilation, "compile_model", lambda model, backend: torch.compile(model, backend="eager"))
    options = RunOptions(TimingPlan(warmup_steps=1, rounds=5, min_round_s=0.01), telemetry_interval_s=0.005,
                         profile_steps=0, compiler="inductor")
    first = run_model(TINY, "cpu", "infer", 8, "fp32", FixedTimer(), options).compile
    second = run_model(TINY, "cpu", "infer", 8, "fp32", FixedTimer(), options).compile
    assert first.setup_s is not None and second.setup_s is None  # the first test alone paid it, outside compile_s
    assert first.cache_state == second.cache_state == "cold" and first.recompiles == second.recompiles == 1


class _FirstCallWorkspace(nn.Module):
    """A linear layer whose first forward also fills and frees a 256 MiB buffer, as cuDNN's algorithm search
    allocates its candidates' workspaces on the first call per input shape under ``cudnn.benchmark``."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Sequential(nn.Flatten(), nn.Linear(48, 10))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 1:
            torch.empty(256 * 2**20, dtype=torch.uint8).fill_(1)  # touched, then freed: a one-time transient
        return self.linear(x)


def test_peak_memory_is_the_steady_states_not_the_first_calls_autotuning():
    """Measured on an H100: the first test of a process to see a shape read cuDNN's search workspaces as its own
    (resnet50 training bs32: 7.3 GiB first in its process, 2.8 GiB after a test that had run the same shapes), a
    false memory regression whenever the order of the tests changed. The peak is taken after the warmup."""
    workload = workloads.Workload("first-call-workspace", _FirstCallWorkspace, (3, 4, 4), 10)
    options = RunOptions(TimingPlan(warmup_steps=2, rounds=3, min_round_s=0.001), telemetry_interval_s=0.05,
                         profile_steps=0)
    measurement = run_model(workload, "cpu", "infer", 8, "fp32", FixedTimer(), options)
    assert measurement.peak_memory_bytes is not None
    assert measurement.peak_memory_bytes < 96 * 2**20, measurement.peak_memory_bytes


def test_settled_cuda_meter_keeps_what_is_held_and_the_later_transients(monkeypatch):
    """The fake allocator's counters follow torch.cuda's: ``reset_peak_memory_stats`` sets the peak to what is
    allocated now."""
    from hwregress.measure.memory import PeakMemoryMeter
    from hwregress.measure.timing import measure

    allocated = {"now": 100 * 2**20, "peak": 100 * 2**20}
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda device=None: allocated.update(peak=allocated["now"]))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: allocated["peak"])
    calls = []

    def step() -> None:
        workspace = 2048 * 2**20 if not calls else 50 * 2**20  # the first call's search, then a step's activations
        allocated["peak"] = max(allocated["peak"], allocated["now"] + workspace)
        calls.append(1)

    with PeakMemoryMeter("cuda:0") as meter:
        allocated["now"] += 300 * 2**20  # weights and optimizer state, held to the end
        allocated["peak"] = max(allocated["peak"], allocated["now"])
        measure(step, FixedTimer(), TimingPlan(warmup_steps=2, rounds=3, min_round_s=0.001), window=meter.steady())
    assert meter.peak_bytes == (300 + 50) * 2**20


def test_an_int8_record_on_a_gpu_with_a_published_int8_peak_has_an_mfu():
    options = RunOptions(TimingPlan(warmup_steps=1, rounds=3, min_round_s=0.001), telemetry_interval_s=0.005,
                         profile_steps=1)
    measurement = run_model(TINY, "cpu", "infer", 8, "int8", FixedTimer(), options)
    record = TestRecord(test_id="t", dtype="int8", device_name="NVIDIA H100 80GB HBM3")
    put_measured(record, window_figures(record, measurement))
    assert record.achieved_tflops and record.mfu == pytest.approx(record.achieved_tflops / 1979.0)


def test_frozen_imports_leave_a_collection_only_what_was_made_after_them():
    """In a fresh interpreter with torch imported: everything alive is frozen, so a gc.collect() before a window
    traverses only newer objects; garbage made before the freeze is collected first, never frozen."""
    code = """
import gc, sys, weakref, torch
from hwregress.measure.memory import freeze_imported_objects
class Cycle:
    pass
garbage = Cycle(); garbage.me = garbage; gone = weakref.ref(garbage); del garbage
alive = len(gc.get_objects())
freeze_imported_objects()
assert gc.get_freeze_count() > 0.9 * alive > 100_000, (gc.get_freeze_count(), alive)
assert gone() is None  # the cycle was collected before the freeze
assert len(gc.get_objects()) < 1_000, len(gc.get_objects())
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

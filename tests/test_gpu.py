"""GPU-only self-tests that can fail: CUDA-event timing against the launch time a host clock sees, the
allocator's exact peak, the NVML handle's identity, TF32 flags inside backward on CUDA, NVML power and
energy. Skipped without CUDA (their CPU twins, through fakes, are in test_gpu_truth.py)."""

from __future__ import annotations

import copy
import time
from typing import ClassVar

import pytest
import torch
from torch import nn

from hwregress import workloads
from hwregress.hardware.nvml import NvmlDevice, nvml_uuid
from hwregress.hardware.roofline import NAME_RULES
from hwregress.hardware.telemetry import TelemetrySampler
from hwregress.measure import window as bench
from hwregress.measure.memory import PeakMemoryMeter
from hwregress.measure.precision.numerics import tf32_flags
from hwregress.measure.timing import CudaEventTimer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
N = 8192
FP32_PEAK_MAX = max(rule.peak.tflops["fp32"] for rule in NAME_RULES if rule.peak is not None)


def test_event_timer_times_the_kernels_not_their_launch():
    a = torch.randn(N, N, device="cuda:0")
    with tf32_flags("fp32"):
        torch.mm(a, a)  # cuBLAS handle and workspace outside the measurement
        torch.cuda.synchronize()
        launch: dict[str, float] = {}

        def run_steps() -> None:
            started = time.perf_counter()
            for _ in range(10):
                torch.mm(a, a)
            launch["s"] = time.perf_counter() - started  # no sync: all a host-side timer would see

        seconds = CudaEventTimer("cuda:0").time_round(run_steps, 10)
    assert seconds > 10 * launch["s"], (seconds, launch["s"])
    achieved_tflops = 10 * 2 * N**3 / seconds / 1e12
    assert achieved_tflops < 2 * FP32_PEAK_MAX, achieved_tflops  # strict fp32 cannot beat any fp32 peak 2x


def test_allocator_peak_is_exact():
    keep = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda:0")  # held from before: not this window's
    torch.cuda.synchronize()
    with PeakMemoryMeter("cuda:0") as meter:
        block = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda:0")
        del block
    assert meter.peak_bytes == 256 * 2**20
    del keep


def test_nvml_handle_is_the_gpu_under_test():
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        nvml = NvmlDevice(f"cuda:{index}")
        try:
            bus_id = nvml.nvml.nvmlDeviceGetPciInfo(nvml.handle).busId
            uuid = nvml.nvml.nvmlDeviceGetUUID(nvml.handle)
        finally:
            nvml.close()
        bus_id = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        domain, bus, device = bus_id.split(".")[0].split(":")
        assert ((int(domain, 16), int(bus, 16), int(device, 16))
                == (props.pci_domain_id, props.pci_bus_id, props.pci_device_id))
        assert uuid == nvml_uuid(props)


class _RecordFlags(torch.autograd.Function):
    seen: ClassVar[list[tuple[bool, bool]]] = []

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        _RecordFlags.seen.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
        return grad


class _Recorder(nn.Module):
    def forward(self, x):
        return _RecordFlags.apply(x)


CONV = workloads.Workload("conv-probe",
                          lambda: nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), _Recorder(), nn.Flatten(),
                                                              nn.Linear(64 * 32 * 32, 10)), (64, 32, 32), 10)


@pytest.mark.parametrize("dtype", ["fp32", "tf32"])
def test_tf32_flags_hold_inside_backward_on_cuda(dtype):
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True  # torch's defaults
    try:
        torch.manual_seed(0)
        model = CONV.build().to("cuda:0")
        reference = copy.deepcopy(model).double()
        inputs, labels = workloads.make_batch(CONV, 32, "cuda:0")
        _RecordFlags.seen = []
        bench.build_step(CONV, model, "train", inputs, labels, "cuda:0", dtype)()
        torch.cuda.synchronize()
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    assert _RecordFlags.seen == [(dtype == "tf32", dtype == "tf32")]
    if dtype == "fp32":  # the conv weight gradient in strict fp32, not TF32's 10-bit mantissa (~1e-3)
        CONV.loss(reference(inputs.double()), labels).backward()
        got, want = model[0].weight.grad.double(), reference[0].weight.grad
        assert float((got - want).norm() / want.norm()) < 1e-4


def test_nvml_telemetry_reads_power_and_energy():
    a = torch.randn(N, N, device="cuda:0")
    with TelemetrySampler("cuda:0", interval_s=0.02) as sampler:
        for _ in range(50):
            a @ a
        torch.cuda.synchronize()
    summary = sampler.summary()
    assert summary["gpu_available"], summary["gpu_unavailable_reason"]
    assert summary["gpu_lookup"].startswith("pci bus id")
    assert 20 < summary["metrics"]["power_w"]["max"] < 2000  # W, not NVML's mW
    mean_power_energy = summary["metrics"]["power_w"]["mean"] * summary["duration_s"]
    assert summary["energy_j"] and 0.25 * mean_power_energy < summary["energy_j"] < 4 * mean_power_energy

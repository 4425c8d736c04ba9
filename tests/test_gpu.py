"""GPU-only self-tests: CUDA-event timing, allocator peak, NVML telemetry. Skipped without CUDA."""

from __future__ import annotations

import pytest
import torch

from hwregress.memory import PeakMemoryMeter
from hwregress.telemetry import TelemetrySampler
from hwregress.timing import CudaEventTimer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_cuda_event_timer_measures_device_time_not_launch_time():
    a = torch.randn(4096, 4096, device="cuda")
    seconds = CudaEventTimer("cuda:0").time_round(lambda: [a @ a for _ in range(20)], 20)
    assert seconds * 1e12 / 20 > 0  # finite, positive
    assert seconds > 20 * 2 * 4096**3 / 2e15  # slower than 2 PFLOP/s: kernels were timed, not enqueued


def test_allocator_peak_is_exact():
    with PeakMemoryMeter("cuda:0") as meter:
        block = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
        del block
    assert meter.peak_bytes >= 256 * 2**20


def test_nvml_telemetry_reads_power_and_energy():
    a = torch.randn(8192, 8192, device="cuda")
    with TelemetrySampler("cuda:0", interval_s=0.02) as sampler:
        for _ in range(50):
            a @ a
        torch.cuda.synchronize()
    summary = sampler.summary()
    assert summary["gpu_available"], summary["gpu_unavailable_reason"]
    assert summary["metrics"]["power_w"]["max"] > 50
    assert summary["energy_j"] and summary["energy_j"] > 0

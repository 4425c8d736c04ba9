"""Telemetry without a GPU, throttle decoding, and NVML errors that degrade one metric only."""

from __future__ import annotations

import time

from hwregress.hardware.nvml import NvmlDevice as _Nvml
from hwregress.hardware.telemetry import TelemetrySampler, decode_reasons


def test_cpu_window_samples_host_metrics_and_says_why_no_gpu():
    with TelemetrySampler("cpu", interval_s=0.01) as sampler:
        time.sleep(0.15)
    summary = sampler.summary()
    assert summary["readings"] >= 5
    assert {"cpu_util_pct", "rss_bytes"} <= set(summary["metrics"])
    assert summary["gpu_available"] is False and "not an NVIDIA GPU" in summary["gpu_unavailable_reason"]
    assert summary["energy_j"] is None and summary["throttle_reasons"] == []


def test_without_nvml_the_reason_is_kept():
    sampler = TelemetrySampler("cuda:0", interval_s=0.01)
    sampler._open_nvml()
    if not sampler.gpu_available:
        assert sampler.gpu_unavailable_reason.startswith("NVML unavailable")


def test_decode_reasons():
    assert decode_reasons(0x1 | 0x4 | 0x40) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert decode_reasons(0x10000) == ["0x10000"]


class FlakyNvml(_Nvml):
    """An NVML whose power query fails mid-run (GPU lost, call not supported)."""

    def __init__(self) -> None:  # no real NVML
        self.errors = {}
        self.calls = 0

    def health(self, our_pids=None):
        return {"gpu_other_processes": []}

    def sample(self):
        power = self.query("power", self._power)
        return {"power_w": power, "gpu_util_pct": self.query("utilization", lambda: 97),
                "clock_event_reasons": self.query("clocks_event", lambda: 0x1 | 0x4)}

    def _power(self):
        self.calls += 1
        if self.calls > 2:
            raise RuntimeError("NVMLError_GpuIsLost")
        return 300.0

    def energy_mj(self):
        return self.query("energy", lambda: (_ for _ in ()).throw(RuntimeError("NVMLError_NotSupported")))

    def close(self):
        pass


def test_nvml_errors_degrade_one_metric_and_energy_falls_back_to_power():
    sampler = TelemetrySampler("cpu", interval_s=0.01)
    sampler._nvml = FlakyNvml()
    with sampler:
        time.sleep(0.15)
    summary = sampler.summary()
    assert "power" in summary["errors"] and "GpuIsLost" in summary["errors"]["power"]
    assert summary["metrics"]["gpu_util_pct"]["mean"] == 97
    assert summary["throttle_reasons"] == ["sw_power_cap"]
    assert summary["energy_source"] == "integrated power" and summary["energy_j"] > 0

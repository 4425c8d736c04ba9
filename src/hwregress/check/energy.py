"""NVML's total-energy counter against its mean power times the window's length.

The report's energy per sample comes from the total-energy counter (mJ) where the GPU has one; its power readings
are averages over 1 s on Ampere and newer (:data:`hwregress.hardware.facts.POWER_AVERAGING_S`). Over a window many
times that long, under a steady GEMM load, the counter's joules and the sampled mean power times the window's
seconds must agree; a counter that disagrees (another GPU's, or mW taken for W) would make every J/sample wrong.
"""

from __future__ import annotations

import time

import torch

from hwregress.check.result import CheckResult, judged, skipped
from hwregress.hardware.facts import device_kind
from hwregress.hardware.telemetry import TelemetrySampler

NAME = "energy"
WINDOW_S = 6.0  # six of NVML's 1-s power averages
AGREEMENT = 0.15  # the power average lags the load by up to its averaging time at both ends
N = 8192
COMPARED = (f"NVML's total-energy counter over a {WINDOW_S:.0f} s GEMM load against the mean sampled power times "
            "the window")


def check(device: str) -> CheckResult:
    """Run the energy check on ``device`` (see the module doc); skipped off CUDA or without the counter."""
    if device_kind(device) != "cuda":
        return skipped(NAME, device, COMPARED, "not a CUDA device: no NVML energy counter")
    a = torch.randn(N, N, device=device, dtype=torch.bfloat16)
    torch.mm(a, a)
    torch.cuda.synchronize(device)
    with TelemetrySampler(device, interval_s=0.05) as sampler:
        started = time.perf_counter()
        while time.perf_counter() - started < WINDOW_S:
            for _ in range(20):
                torch.mm(a, a)
            torch.cuda.synchronize(device)
    summary = sampler.summary()
    if not summary.get("gpu_available"):
        return skipped(NAME, device, COMPARED, f"no GPU telemetry: {summary.get('gpu_unavailable_reason')}")
    energy_j = summary.get("energy_j")
    power = (summary.get("metrics") or {}).get("power_w") or {}
    if energy_j is None or summary.get("energy_source") != "total-energy counter" or not power.get("mean"):
        return skipped(NAME, device, COMPARED, "this GPU reports no total-energy counter or no power readings")
    expected_j = power["mean"] * summary["duration_s"]
    ratio = energy_j / expected_j
    return judged(NAME, device, abs(ratio - 1) <= AGREEMENT, COMPARED,
                  {"energy_j": round(energy_j, 1), "mean_power_w": round(power["mean"], 1),
                   "window_s": round(summary["duration_s"], 2), "power_x_time_j": round(expected_j, 1),
                   "ratio": round(ratio, 3)},
                  "the energy counter or the power readings are not this GPU's, or a unit is off (NVML gives mW and "
                  "mJ): hwregress.hardware.telemetry")

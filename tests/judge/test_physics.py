"""Physics checks: each impossible number gives a sentence with the numbers; possible ones give none."""

from __future__ import annotations

import pytest

from hwregress.judge.physics import physics_violations

CASES = [
    # (fields, expected substrings; empty: no violation)
    ({"achieved_tflops": 800.0, "published_peak_tflops": 989.0}, []),
    ({"achieved_tflops": 1200.0, "published_peak_tflops": 989.0},
     ["achieved 1200 TFLOP/s exceeds the published peak 989 TFLOP/s"]),
    ({"achieved_tflops": 850.0, "measured_gemm_tflops": 780.0}, []),  # within 1.1x the measured roof
    ({"achieved_tflops": 900.0, "measured_gemm_tflops": 780.0},
     ["achieved 900 TFLOP/s exceeds 1.1 x this session's measured GEMM roof 780 TFLOP/s"]),
    ({"achieved_tflops": 900.0, "published_peak_tflops": 989.0, "measured_gemm_tflops": 500.0}, []),  # published wins
    ({"bandwidth_gbs": 4000.0, "peak_bandwidth_gbs": 3350.0},
     ["bandwidth 4000 GB/s exceeds the published peak 3350 GB/s"]),
    ({"bandwidth_gbs": 3500.0, "measured_bandwidth_gbs": 3000.0},
     ["bandwidth 3500 GB/s exceeds 1.1 x this session's measured copy roof 3000 GB/s"]),
    ({"mfu": 0.45}, []),
    ({"mfu": 1.3}, ["MFU 1.300 > 1"]),
    ({"energy_j": 0.0, "mean_power_w": 300.0}, ["energy 0 J over the window while the mean power was 300 W"]),
    ({"energy_j": -5.0, "mean_power_w": 300.0}, ["energy -5 J"]),
    ({"energy_j": 0.0, "mean_power_w": 0.0}, []),  # no power, no energy: consistent
    ({"energy_j": 3000.0, "mean_power_w": 300.0, "duration_s": 10.0}, []),
    ({"energy_j": 100.0, "mean_power_w": 300.0, "duration_s": 10.0},
     ["energy 100 J disagrees with mean power 300 W x 10 s = 3000 J by more than 2x"]),
    ({"mean_power_w": 900.0, "power_limit_w": 700.0}, ["mean power 900 W exceeds 1.1 x the enforced limit 700 W"]),
    ({"mean_power_w": 690.0, "power_limit_w": 700.0}, []),
    ({}, []),
]


@pytest.mark.parametrize(("fields", "expected"), CASES)
def test_physics_violations(fields, expected):
    found = physics_violations(**fields)
    assert len(found) == len(expected), found
    for sentence, part in zip(found, expected, strict=True):
        assert part in sentence


def test_several_violations_are_all_reported():
    found = physics_violations(achieved_tflops=2000.0, published_peak_tflops=989.0, mfu=2.02,
                               energy_j=-1.0, mean_power_w=500.0)
    assert len(found) == 3


# NVML's power reading on Ampere (except GA100) and newer is an average over 1 s (NVML API Reference,
# nvmlDeviceGetPowerUsage): a window shorter than that is never judged by E = P t, a longer one with a tolerance
# widened by the share of the readings that fell before the window.
AVERAGED_CASES = [
    # a 0.3 s window at 700 W after idle: the counter says 210 J, the lagging 1 s averages say 220 W mean
    ({"energy_j": 210.0, "mean_power_w": 220.0, "duration_s": 0.3, "power_averaging_s": 1.0}, []),
    ({"energy_j": 210.0, "mean_power_w": 220.0, "duration_s": 0.3, "power_averaging_s": 0.0},
     ["energy 210 J disagrees with mean power 220 W x 0.3 s = 66 J by more than 2x"]),
    # 2 s window: tolerance 2 x (1 + 1/2) = 3x
    ({"energy_j": 1200.0, "mean_power_w": 250.0, "duration_s": 2.0, "power_averaging_s": 1.0}, []),
    ({"energy_j": 2000.0, "mean_power_w": 250.0, "duration_s": 2.0, "power_averaging_s": 1.0},
     ["energy 2000 J disagrees with mean power 250 W x 2 s = 500 J by more than 3x (2x widened by the 1 s "
      "power averaging over a 2 s window)"]),
    # a long window keeps nearly the plain rule, and a counter read on another device is still caught
    ({"energy_j": 100.0, "mean_power_w": 300.0, "duration_s": 10.0, "power_averaging_s": 1.0},
     ["energy 100 J disagrees with mean power 300 W x 10 s = 3000 J by more than 2.2x"]),
    ({"energy_j": 0.0, "mean_power_w": 300.0, "duration_s": 0.3, "power_averaging_s": 1.0}, ["energy 0 J"]),
]


@pytest.mark.parametrize(("fields", "expected"), AVERAGED_CASES)
def test_energy_against_averaged_power_widens_by_window_length(fields, expected):
    found = physics_violations(**fields)
    assert len(found) == len(expected), found
    for sentence, part in zip(found, expected, strict=True):
        assert part in sentence

"""Provisional expectations for a hardware key never seen, from the published peaks and the roofline
(:mod:`hwregress.judge.prediction`)."""

from __future__ import annotations

import pytest

from hwregress.judge.prediction import (
    MIN_BAND,
    NoPrediction,
    ProvisionalExpectation,
    judge_provisional,
    nearest_known_key,
    provisional_expectation,
)
from hwregress.store.verdicts import Verdict

H100 = "nvidia-h100-80gb-hbm3"  # H100 SXM: bf16 989.4 TFLOP/s, 3.35 TB/s; ridge 295 FLOP/byte
H200 = "nvidia-h200"  # H200 SXM: bf16 989.4 TFLOP/s, 4.8 TB/s; ridge 206 FLOP/byte
A100 = "nvidia-a100-sxm4-80gb"  # bf16 312 TFLOP/s, 2.039 TB/s
L4 = "nvidia-l4"


def expect(intensity: float | None = None, roof: str | None = None, known: str = H100, new: str = H200,
           dtype: str = "bf16") -> ProvisionalExpectation:
    result = provisional_expectation("t", 1000.0, known, new, dtype, intensity=intensity, roof=roof)
    assert isinstance(result, ProvisionalExpectation), result
    return result


def test_a_bandwidth_bound_test_scales_by_the_bandwidth_ratio():
    expectation = expect(intensity=50.0)
    assert expectation.bound == "bandwidth"
    assert expectation.ratio == pytest.approx(4.8 / 3.35)
    assert expectation.predicted == pytest.approx(1000.0 * 4.8 / 3.35)
    assert expectation.band == MIN_BAND == 0.12
    assert expectation.low == pytest.approx(expectation.predicted * 0.88)


def test_a_compute_bound_test_scales_by_the_compute_ratio():
    assert expect(intensity=1000.0).ratio == pytest.approx(1.0)  # H100 and H200 SXM share their tensor cores
    on_h100 = expect(intensity=2000.0, known=A100, new=H100)
    assert on_h100.bound == "compute" and on_h100.ratio == pytest.approx(989.4 / 312.0)


def test_a_test_between_the_two_ridge_points_takes_the_roofline_ratio():
    expectation = expect(intensity=250.0)  # bandwidth-bound on the H100 (ridge 295), compute-bound on the H200 (206)
    assert expectation.bound == "mixed"
    assert expectation.ratio == pytest.approx(989.4 / (250.0 * 3.35))


def test_ceilings_scale_by_their_own_roof_and_bus_roofs_get_no_prediction():
    assert expect(roof="copy_gbs").ratio == pytest.approx(4.8 / 3.35)
    assert expect(roof="gemm_fp32_tflops", known=A100, new=H100).ratio == pytest.approx(67.0 / 19.5)
    result = provisional_expectation("t", 55.0, H100, H200, "fp32", roof="h2d_gbs")
    assert isinstance(result, NoPrediction) and "host" in result.reason


def test_a_test_without_intensity_or_a_key_without_peaks_gets_no_prediction_with_the_reason():
    assert "arithmetic intensity" in provisional_expectation("t", 1.0, H100, H200, "bf16").reason
    assert "nvidia-h100" in provisional_expectation("t", 1.0, H100, "nvidia-h100", "bf16", intensity=1.0).reason
    assert "fp8" in provisional_expectation("t", 1.0, A100, H100, "fp8", intensity=1e4).reason


def test_below_the_band_says_below_prediction_and_the_verdict_stays_new():
    expectation = expect(intensity=50.0)
    low = judge_provisional(expectation.predicted * 0.85, expectation)
    assert low.verdict is Verdict.NEW and low.below_prediction
    assert "below prediction" in low.message and H100 in low.message and "12%" in low.message
    within = judge_provisional(expectation.predicted * 0.9, expectation)
    assert within.verdict is Verdict.NEW and not within.below_prediction


def test_a_band_narrower_than_habitats_error_is_refused():
    with pytest.raises(ValueError, match=r"band 0.05.*0.12"):
        provisional_expectation("t", 1.0, H100, H200, "bf16", intensity=1.0, band=0.05)


def test_the_nearest_known_key_is_the_same_architecture_first_then_the_closest_peak():
    assert nearest_known_key(H200, [A100, L4, H100, "amd-epyc-f26m2-2t"]) == H100
    assert nearest_known_key("nvidia-a10", [H100, L4]) == L4  # no Ampere known: bf16 121 is closest to 125
    assert nearest_known_key("nvidia-a10", [H100, L4, A100]) == A100  # Ampere first, though L4's peak is closer
    assert nearest_known_key(H200, ["amd-epyc-f26m2-2t"]) is None
    assert nearest_known_key("nvidia-h100", [H100]) is None  # the form factor is unknown: no peaks to scale by

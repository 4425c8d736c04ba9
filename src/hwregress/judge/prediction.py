"""Provisional expectations for a hardware key never seen: a known key's figure scaled by the published peaks.

A test bound by compute on both machines scales by the ratio of their dense peaks for its dtype, one bound by memory
bandwidth by the ratio of their DRAM bandwidths; one between the two ridge points (bandwidth-bound on one machine,
compute-bound on the other) by the ratio of the roofline's attainable rates, ``min(peak, I x bandwidth)``, which
gives either pure ratio where both machines agree (Williams, Waterman & Patterson, "Roofline", CACM 2009;
:func:`hwregress.hardware.roofline.attainable_tflops`). The peaks are the datasheet figures of
:data:`hwregress.hardware.roofline.NAME_RULES` (the ``published-peaks`` check's table), looked up by the hardware key's
words as for a device name (``nvidia-h100-80gb-hbm3`` is the H100 SXM).

The band is at least +-12%: Habitat (Yu et al., "Habitat: A Runtime-Based Computational Performance Predictor for
Deep Neural Network Training", USENIX ATC 2021) reports an 11.8% mean error predicting training iterations across
GPUs, with per-kernel wave scaling and MLPs, a finer predictor than two peak ratios. A figure under the band reads
"below prediction", and the test's verdict stays ``new``: a prediction is no baseline (the key gets its own after three
healthy sessions).

The nearest known key: among the known keys with published peaks, the same GPU architecture first (a key's
generation, :data:`ARCHITECTURES`: the scaling of like with like is the smaller extrapolation), then the closest dense
bf16 peak (fp16 where a GPU has no bf16: V100, T4) by |log ratio|, then the closest bandwidth, then the key's name.
The page: docs/fleet-verdicts.md, 'A hardware key never seen'.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from hwregress.hardware.roofline import NAME_RULES, Peak, attainable_tflops, name_tokens, published_peak, ridge_point
from hwregress.store.verdicts import Verdict

MIN_BAND = 0.12  # Habitat's 11.8% mean cross-GPU error, rounded up
# NAME_RULES' product token -> NVIDIA architecture (the whitepapers': Volta, Turing, Ampere, Ada Lovelace, Hopper)
ARCHITECTURES = {"v100": "Volta", "v100s": "Volta", "t4": "Turing", "a100": "Ampere", "a10": "Ampere",
                 "l4": "Ada Lovelace", "h100": "Hopper", "h200": "Hopper", "gh200": "Hopper"}


@dataclass(frozen=True)
class ProvisionalExpectation:
    """What a test should read on a new hardware key, scaled from a known key.

    Attributes:
        test_id: the test.
        new_key: the hardware key never seen.
        known_key: the key whose figure is scaled.
        known_value: the known key's figure (e.g. its fleet value), the test's unit.
        bound: ``compute``, ``bandwidth``, or ``mixed`` (between the two machines' ridge points).
        ratio: predicted / known value.
        predicted: the expectation on the new key (the test's unit).
        band: the relative band around it (fraction, at least :data:`MIN_BAND`).
        source: the two peaks' datasheets.
    """

    test_id: str
    new_key: str
    known_key: str
    known_value: float
    bound: str
    ratio: float
    predicted: float
    band: float
    source: str

    @property
    def low(self) -> float:
        """The band's lower edge."""
        return self.predicted * (1 - self.band)

    @property
    def high(self) -> float:
        """The band's upper edge."""
        return self.predicted * (1 + self.band)


@dataclass(frozen=True)
class NoPrediction:
    """Why a test gets no expectation on the new key (``reason``: one sentence)."""

    test_id: str
    reason: str


@dataclass(frozen=True)
class ProvisionalVerdict:
    """A new key's figure against its expectation: the verdict stays ``new``; ``below_prediction`` under the band."""

    test_id: str
    verdict: Verdict
    below_prediction: bool
    ratio: float
    message: str


def architecture(key: str) -> str | None:
    """The GPU architecture of a hardware key (``"nvidia-h200"`` -> ``"Hopper"``), None if its product is unknown."""
    tokens = name_tokens(key)
    rule = next((r for r in NAME_RULES if r.matches(tokens)), None)
    return ARCHITECTURES.get(rule.model) if rule else None


def nearest_known_key(new_key: str, known_keys: Iterable[str]) -> str | None:
    """The known key to scale from (module doc); None when ``new_key`` or every known key lacks published peaks."""
    new = published_peak(new_key)
    if new is None:
        return None
    candidates = [(key, peak) for key in sorted(set(known_keys)) if (peak := published_peak(key)) is not None]
    if not candidates:
        return None
    arch = architecture(new_key)

    def distance(candidate: tuple[str, Peak]) -> tuple[bool, float, float, str]:
        key, peak = candidate
        return (arch is None or architecture(key) != arch, abs(math.log(_headline(peak) / _headline(new))),
                abs(math.log(peak.memory_tb_s / new.memory_tb_s)), key)

    return min(candidates, key=distance)[0]


def provisional_expectation(test_id: str, known_value: float, known_key: str, new_key: str, dtype: str,
                            intensity: float | None = None, roof: str | None = None,
                            band: float = MIN_BAND) -> ProvisionalExpectation | NoPrediction:
    """The expectation of a test on ``new_key`` from ``known_value`` measured on ``known_key``.

    Args:
        test_id: the test.
        known_value: its figure on the known key (a throughput: samples/s, TFLOP/s or GB/s).
        known_key, new_key: hardware keys (``nvidia-h100-80gb-hbm3``).
        dtype: the test's dtype (the compute peak it runs against).
        intensity: the test's arithmetic intensity, FLOP/byte (``TestRecord.arithmetic_intensity``).
        roof: for a ceiling test, its roof name (``gemm_bf16_tflops``, ``copy_gbs``) instead of an intensity.
        band: the relative band (fraction).

    Returns:
        the expectation, or :class:`NoPrediction` with the reason (no peaks for a key or the dtype, no intensity, a
        bus roof that the GPU's datasheet does not bound).

    Raises:
        ValueError: ``band`` below :data:`MIN_BAND`, or ``known_value`` not a positive finite number.
    """
    if band < MIN_BAND:
        raise ValueError(f"band {band!r} is narrower than the {MIN_BAND} that cross-GPU prediction error allows "
                         "(Habitat, ATC 2021: 11.8% mean); pass a band of at least 0.12")
    if not (math.isfinite(known_value) and known_value > 0):
        raise ValueError(f"{test_id}: known value {known_value!r} on {known_key} is not a positive finite throughput")
    peaks = {key: published_peak(key) for key in (known_key, new_key)}
    missing = [key for key, peak in peaks.items() if peak is None]
    if missing:
        return NoPrediction(test_id, f"no published peaks for {', '.join(missing)} "
                                     "(hwregress.hardware.roofline.NAME_RULES)")
    known, new = peaks[known_key], peaks[new_key]
    assert known is not None and new is not None
    if roof is not None:
        scaled = _roof_ratio(roof, known, new)
        if isinstance(scaled, str):
            return NoPrediction(test_id, scaled)
        bound, ratio = scaled
    else:
        if missing_dtype := _missing_dtype(dtype, known, new):
            return NoPrediction(test_id, missing_dtype)
        if intensity is None or not intensity > 0:
            return NoPrediction(test_id, "no arithmetic intensity recorded: the roofline cannot tell whether compute "
                                         "or bandwidth bounds the test")
        bound = _bound(intensity, known.tflops[dtype], known.memory_tb_s, new.tflops[dtype], new.memory_tb_s)
        ratio = (attainable_tflops(intensity, new.tflops[dtype], new.memory_tb_s)
                 / attainable_tflops(intensity, known.tflops[dtype], known.memory_tb_s))
    return ProvisionalExpectation(test_id, new_key, known_key, known_value, bound, ratio, known_value * ratio, band,
                                  f"{known.source}; {new.source}")


def judge_provisional(value: float, expectation: ProvisionalExpectation) -> ProvisionalVerdict:
    """``value`` (measured on the new key) against ``expectation``: ``new`` always, "below prediction" under the
    band."""
    ratio = value / expectation.predicted
    below = value < expectation.low
    what = (f"{ratio:.3f} x the provisional expectation {expectation.predicted:.4g} ({expectation.bound}-bound: "
            f"{expectation.known_key}'s {expectation.known_value:.4g} x {expectation.ratio:.3f} from the published "
            f"peaks, band +-{expectation.band:.0%})")
    message = f"below prediction: {what}" if below else f"within or above prediction: {what}"
    return ProvisionalVerdict(expectation.test_id, Verdict.NEW, below, ratio, message)


def _headline(peak: Peak) -> float:
    return peak.tflops.get("bf16") or peak.tflops.get("fp16") or peak.tflops["fp32"]


def _missing_dtype(dtype: str, known: Peak, new: Peak) -> str | None:
    lacking = [peak.name for peak in (known, new) if dtype not in peak.tflops]
    return f"no published {dtype} peak for the {' or the '.join(lacking)}" if lacking else None


def _bound(intensity: float, known_tflops: float, known_tb_s: float, new_tflops: float, new_tb_s: float) -> str:
    on_known = intensity >= ridge_point(known_tflops, known_tb_s)
    on_new = intensity >= ridge_point(new_tflops, new_tb_s)
    if on_known == on_new:
        return "compute" if on_known else "bandwidth"
    return "mixed"


def _roof_ratio(roof: str, known: Peak, new: Peak) -> tuple[str, float] | str:
    ceiling, _, rest = roof.partition("_")
    if ceiling == "copy":
        return "bandwidth", new.memory_tb_s / known.memory_tb_s
    if ceiling == "gemm":
        dtype = rest.rpartition("_")[0]
        return _missing_dtype(dtype, known, new) or ("compute", new.tflops[dtype] / known.tflops[dtype])
    return (f"{roof}: the GPU datasheets' peaks do not bound it (the host bus or the interconnect does); no "
            "prediction")

"""Numbers no machine can produce: a measurement that breaks physics is a bug in the suite, not a result.

Checks (each sentence states the numbers):

* achieved TFLOP/s above the published dense peak for the dtype (vendor datasheet, e.g. H100 SXM 989
  TFLOP/s dense bf16); where none is published, above ``MEASURED_ROOF_SLACK`` x this session's measured
  GEMM roof (a model's kernels can beat a square GEMM only a little: tile-friendly shapes, timing noise);
* bandwidth above the published peak (H100 SXM 3.35 TB/s HBM3), or above ``MEASURED_ROOF_SLACK`` x the
  measured copy roof where none is published;
* MFU above 1 (MFU = achieved / peak FLOP/s, PaLM, Chowdhery et al. 2022, appendix B);
* zero or negative energy while the mean power was positive, and energy that disagrees with mean power x
  window time by more than ``ENERGY_AGREEMENT`` x (E = P t), widened to ``ENERGY_AGREEMENT`` x (1 + a / t) where
  each power reading averages over the last ``a`` seconds (NVML on Ampere and newer: a = 1 s, "the API returns
  power averaged over 1 sec interval", nvmlDeviceGetPowerUsage): the readings of a window of t seconds mix in up
  to ``a`` seconds of power from before it. A window shorter than ``a`` is not compared at all: its readings
  describe the last ``a`` seconds, not the window, and few readings of a lagging average prove nothing;
* mean power above ``POWER_LIMIT_SLACK`` x the enforced power limit (boards hold their limit on average).

Units: TFLOP/s, GB/s (1e9 bytes/s), J, W, s.
"""

from __future__ import annotations

MEASURED_ROOF_SLACK = 1.10
ENERGY_AGREEMENT = 2.0
POWER_LIMIT_SLACK = 1.10


def physics_violations(*, achieved_tflops: float | None = None, published_peak_tflops: float | None = None,
                       measured_gemm_tflops: float | None = None, bandwidth_gbs: float | None = None,
                       peak_bandwidth_gbs: float | None = None, measured_bandwidth_gbs: float | None = None,
                       mfu: float | None = None, energy_j: float | None = None,
                       mean_power_w: float | None = None, duration_s: float | None = None,
                       power_limit_w: float | None = None, power_averaging_s: float = 0.0) -> list[str]:
    """Sentences for each impossible number among those given (None: not known, not checked).

    Args:
        achieved_tflops: the test's FLOP rate, TFLOP/s.
        published_peak_tflops: the device's published dense peak for the test's dtype, TFLOP/s.
        measured_gemm_tflops: this session's measured GEMM roof for the dtype, TFLOP/s.
        bandwidth_gbs: the test's memory traffic rate, GB/s.
        peak_bandwidth_gbs: published memory bandwidth, GB/s.
        measured_bandwidth_gbs: this session's measured copy roof, GB/s.
        mfu: model FLOP utilisation, a fraction.
        energy_j: energy over the window, J.
        mean_power_w: mean power over the window, W.
        duration_s: the window's length, s (enables the E = P t check).
        power_limit_w: the enforced power limit, W.
        power_averaging_s: seconds each power reading averages over (0: instantaneous readings).

    Returns:
        Empty when everything is physically possible.
    """
    return [
        *_roof("achieved", achieved_tflops, "TFLOP/s", published_peak_tflops, measured_gemm_tflops, "GEMM"),
        *_roof("bandwidth", bandwidth_gbs, "GB/s", peak_bandwidth_gbs, measured_bandwidth_gbs, "copy"),
        *_mfu(mfu),
        *_energy(energy_j, mean_power_w, duration_s, power_averaging_s),
        *_power(mean_power_w, power_limit_w),
    ]


def _roof(what: str, value: float | None, unit: str, published: float | None, measured: float | None,
          roof_name: str) -> list[str]:
    if value is None:
        return []
    if published:
        if value > published:
            return [f"{what} {value:.4g} {unit} exceeds the published peak {published:.4g} {unit}: "
                    "the FLOP/byte count or the timing is wrong"]
        return []
    if measured and value > MEASURED_ROOF_SLACK * measured:
        return [f"{what} {value:.4g} {unit} exceeds {MEASURED_ROOF_SLACK:g} x this session's measured {roof_name} "
                f"roof {measured:.4g} {unit}: the FLOP/byte count or the timing is wrong"]
    return []


def _mfu(mfu: float | None) -> list[str]:
    if mfu is not None and mfu > 1.0:
        return [f"MFU {mfu:.3f} > 1: more FLOP/s than the peak it is divided by"]
    return []


def _energy(energy_j: float | None, mean_power_w: float | None, duration_s: float | None,
            averaging_s: float) -> list[str]:
    if energy_j is None or mean_power_w is None or mean_power_w <= 0:
        return []
    if energy_j <= 0:
        return [f"energy {energy_j:.4g} J over the window while the mean power was {mean_power_w:.4g} W: "
                "the energy counter wrapped, was reset, or was read on another device"]
    if not duration_s or duration_s <= 0 or duration_s < averaging_s:
        return []  # the readings describe the last averaging period, not this shorter window
    implied = mean_power_w * duration_s
    agreement = ENERGY_AGREEMENT * (1.0 + averaging_s / duration_s)
    if implied / agreement <= energy_j <= implied * agreement:
        return []
    widened = (f" ({ENERGY_AGREEMENT:g}x widened by the {averaging_s:g} s power averaging over a {duration_s:.4g} s "
               "window)" if averaging_s else "")
    return [f"energy {energy_j:.4g} J disagrees with mean power {mean_power_w:.4g} W x {duration_s:.4g} s "
            f"= {implied:.4g} J by more than {agreement:.4g}x{widened}"]


def _power(mean_power_w: float | None, power_limit_w: float | None) -> list[str]:
    if mean_power_w is None or not power_limit_w or mean_power_w <= POWER_LIMIT_SLACK * power_limit_w:
        return []
    return [f"mean power {mean_power_w:.4g} W exceeds {POWER_LIMIT_SLACK:g} x the enforced limit "
            f"{power_limit_w:.4g} W"]

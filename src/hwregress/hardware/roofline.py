"""Published peaks of common GPUs, MFU, and roofline placement.

Peaks are dense (no 2:4 sparsity) tensor-core figures in TFLOP/s (fp32: the non-tensor CUDA-core figure; int8: TOPS,
one multiply-add counted as two operations as for the float figures) and DRAM bandwidth in TB/s, each row sourced to
the NVIDIA datasheet it comes from (``Peak.source``). The datasheets print tf32/bf16/fp16/fp8/int8 with sparsity on
Ampere and later (marked "*", "Shown with sparsity. Specifications are one-half lower without sparsity"); those are
halved here. An int8 or fp8 record's MFU divides by the int8 or fp8 peak although only its Linear layers run in
that dtype (hwregress.measure.precision.quantization): a lower bound on how busy the tensor cores were.
Names are matched on the full device name (``torch.cuda.get_device_name`` / NVML): form factor (SXM,
PCIe, NVL) and memory variant change the figures, so a name whose variant cannot be told gets no peak,
with the reason (:func:`peak_lookup`). Full-GPU SM counts, used to scale a MIG instance, are those of
NVIDIA's architecture whitepapers: "NVIDIA H100 Tensor Core GPU Architecture" (2022: SXM5 132 SMs,
PCIe 114; H100 NVL and H200 use the 132-SM configuration) and "NVIDIA A100 Tensor Core GPU
Architecture" (2020: 108 SMs); memory sizes are the datasheets'. The roofline model: Williams, Waterman & Patterson,
"Roofline: an insightful visual performance model for multicore architectures", CACM 52(4), 2009.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    """Published peaks of one GPU model.

    Attributes:
        name: the product name.
        tflops: dtype (``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp8``, ``int8``) -> dense peak TFLOP/s (int8: TOPS).
        memory_tb_s: DRAM bandwidth in TB/s.
        source: the datasheet (and any scaling applied, e.g. to a MIG instance).
        sm_count: streaming multiprocessors of the full GPU (to scale to a MIG instance), None if unknown.
        memory_gb: memory of the full GPU in GB (to scale bandwidth to a MIG instance), None if unknown.
    """

    name: str
    tflops: dict[str, float]
    memory_tb_s: float
    source: str
    sm_count: int | None = None
    memory_gb: float | None = None

    def roof(self, ceiling: str, dtype: str) -> float | None:
        """The published counterpart of a measured ceiling: ``gemm`` -> TFLOP/s for ``dtype``, ``copy``
        -> DRAM GB/s; None for anything without one (``h2d`` depends on the host bus, not the GPU)."""
        if ceiling == "gemm":
            return self.tflops.get(dtype)
        return self.memory_tb_s * 1000.0 if ceiling == "copy" else None


@dataclass(frozen=True)
class NameRule:
    """One row of the name table: the product token (matched as a whole word, so "h200" does not
    match "gh200" nor "a10" "a100"), tokens that must all appear, tokens of which one must appear, and
    the peak (None: deliberately no peak, ``reason`` says why)."""

    model: str
    all_of: tuple[str, ...] = ()
    any_of: tuple[str, ...] = ()
    peak: Peak | None = None
    reason: str = ""

    def matches(self, tokens: set[str]) -> bool:
        return (self.model in tokens and all(t in tokens for t in self.all_of)
                and (not self.any_of or any(t in tokens for t in self.any_of)))


_H100_SHEET = "NVIDIA H100 Tensor Core GPU datasheet"
# sheet: tf32 989*, bf16/fp16 1,979*, fp8 3,958*, int8 3,958* TOPS (sparse)
_HOPPER_SXM = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1979.0, "int8": 1979.0}
# sheet: tf32 835*, bf16/fp16 1,671*, fp8 3,341*, int8 3,341* TOPS (sparse)
_HOPPER_NVL = {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5, "int8": 1670.5}
# sheet: int8 624 | 1,248* TOPS; Ampere has no fp8
_AMPERE_A100 = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0, "int8": 624.0}
_A100_SHEET = "NVIDIA A100 Tensor Core GPU datasheet (2021)"
_V100_SHEET = "NVIDIA V100 Tensor Core GPU datasheet (2020)"
_FORM_UNKNOWN = "cannot tell the form factor (SXM, PCIe, NVL) from the name, and the peaks differ by it"

# First matching row wins: specific rows before general ones.
NAME_RULES: tuple[NameRule, ...] = (
    NameRule("gh200", reason="GH200 Grace Hopper: module power is configurable (450-1000 W) and the memory "
             "comes in HBM3 (4 TB/s) and HBM3e (4.9 TB/s) variants, so no single published peak applies"),
    NameRule("h200", ("nvl",), peak=Peak("H200 NVL", _HOPPER_NVL, 4.8, "NVIDIA H200 Tensor Core GPU datasheet "
             "(2024), H200 NVL column; sparse tensor figures halved", 132, 141)),
    NameRule("h200", peak=Peak("H200 SXM", _HOPPER_SXM, 4.8, "NVIDIA H200 Tensor Core GPU datasheet (2024), "
             "H200 SXM column; sparse tensor figures halved", 132, 141)),
    NameRule("h100", ("nvl",), peak=Peak("H100 NVL", _HOPPER_NVL, 3.9, f"{_H100_SHEET} (2023), H100 NVL column; "
             "sparse tensor figures halved", 132, 94)),
    # sheet: fp8 3,026*, int8 3,026* TOPS (sparse)
    NameRule("h100", ("pcie",), peak=Peak("H100 PCIe", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5,
                                                          "fp8": 1513.0, "int8": 1513.0},
             2.0, f"{_H100_SHEET} (2022), H100 PCIe column; sparse tensor figures halved", 114, 80)),
    NameRule("h100", any_of=("sxm", "sxm5", "hbm3"), peak=Peak("H100 SXM", _HOPPER_SXM, 3.35,
             f"{_H100_SHEET} (2023), H100 SXM column; sparse tensor figures halved", 132, 80)),
    NameRule("h100", reason=_FORM_UNKNOWN),
    NameRule("a100", ("80gb",), ("pcie",), Peak("A100 80GB PCIe", _AMPERE_A100, 1.935,
             f"{_A100_SHEET}, A100 80GB PCIe column", 108, 80)),
    NameRule("a100", ("80gb",), ("sxm", "sxm4"), Peak("A100 80GB SXM", _AMPERE_A100, 2.039,
             f"{_A100_SHEET}, A100 80GB SXM column", 108, 80)),
    NameRule("a100", ("40gb",), ("pcie",), Peak("A100 40GB PCIe", _AMPERE_A100, 1.555,
             f"{_A100_SHEET}, A100 40GB PCIe column", 108, 40)),
    NameRule("a100", ("40gb",), ("sxm", "sxm4"), Peak("A100 40GB SXM", _AMPERE_A100, 1.555,
             f"{_A100_SHEET}, A100 40GB SXM column", 108, 40)),
    NameRule("a100", reason="cannot tell the form factor (SXM, PCIe) and memory (40/80 GB) from the name, "
             "and the memory bandwidth differs by them"),
    # sheet: fp8 485*, int8 485* TOPS (sparse)
    NameRule("l4", peak=Peak("L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5,
                                    "int8": 242.5}, 0.3,
             "NVIDIA L4 Tensor Core GPU datasheet (2023); sparse tensor figures halved")),
    # sheet: int8 250 | 500* TOPS
    NameRule("a10", peak=Peak("A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0, "int8": 250.0}, 0.6,
             "NVIDIA A10 Tensor Core GPU datasheet (2021)")),
    NameRule("t4", peak=Peak("T4", {"fp32": 8.1, "fp16": 65.0, "int8": 130.0}, 0.32,
             "NVIDIA T4 Tensor Core GPU datasheet (2019); fp16 is the mixed-precision tensor figure, int8 its "
             "130 TOPS")),
    NameRule("v100s", ("pcie",), peak=Peak("V100S PCIe", {"fp32": 16.4, "fp16": 130.0}, 1.134,
             f"{_V100_SHEET}, V100S PCIe column; fp16 is the Tensor Performance figure")),
    NameRule("v100", ("pcie",), peak=Peak("V100 PCIe", {"fp32": 14.0, "fp16": 112.0}, 0.9,
             f"{_V100_SHEET}, V100 PCIe column; fp16 is the Tensor Performance figure")),
    NameRule("v100", ("sxm2",), peak=Peak("V100 SXM2", {"fp32": 15.7, "fp16": 125.0}, 0.9,
             f"{_V100_SHEET}, V100 SXM2 column; fp16 is the Tensor Performance figure")),
    NameRule("v100",
             reason="only the V100 SXM2 and PCIe have datasheet columns; this variant (SXM3, FHHL, ...) has none"),
)

_MIG_PROFILE = re.compile(r"\b(\d+)g\.(\d+)gb\b")


@dataclass(frozen=True)
class PeakLookup:
    """The peak of a device name, or None with ``reason`` saying why there is none."""

    peak: Peak | None
    reason: str | None = None


def name_tokens(device_name: str) -> set[str]:
    """Lower-case words of a device name, split at spaces, dashes and underscores
    (``"NVIDIA A100-SXM4-80GB"`` -> ``{"nvidia", "a100", "sxm4", "80gb"}``)."""
    return set(re.split(r"[\s\-_/]+", device_name.lower().strip())) - {""}


def peak_lookup(device_name: str, sm_count: int | None = None, mig: bool = False) -> PeakLookup:
    """The published peaks for a full device name such as ``"NVIDIA H100 80GB HBM3"``.

    A MIG instance (``"... MIG 1g.10gb"`` in the name, or ``mig=True``) gets the full GPU's peaks
    scaled by its share of the SMs (``sm_count``, the instance's ``multi_processor_count``, over the
    full GPU's) for compute, and by its share of the memory (the profile's ``<n>gb`` over the GPU's) for
    bandwidth, since MIG memory slices carry their share of the memory controllers (NVIDIA Multi-Instance
    GPU User Guide, "Terminology"); without ``sm_count`` there is no peak.
    """
    tokens = name_tokens(device_name)
    rule = next((r for r in NAME_RULES if r.matches(tokens)), None)
    if rule is None:
        return PeakLookup(None, f"no published peak for {device_name!r} in hwregress.hardware.roofline.NAME_RULES")
    if rule.peak is None:
        return PeakLookup(None, f"{device_name}: {rule.reason}")
    if mig or "mig" in tokens:
        return _mig_peak(rule.peak, device_name, sm_count)
    return PeakLookup(rule.peak)


def _mig_peak(full: Peak, device_name: str, sm_count: int | None) -> PeakLookup:
    profile = _MIG_PROFILE.search(device_name.lower())
    if sm_count is None or full.sm_count is None:
        return PeakLookup(None, f"{device_name} is a MIG instance and its SM count is unknown; pass the instance's "
                                "multi_processor_count to scale the full GPU's peaks")
    if profile is None or full.memory_gb is None:
        return PeakLookup(None, f"{device_name} is a MIG instance without a '<n>g.<m>gb' profile in its name; "
                                "its share of the memory bandwidth is unknown")
    sm_share = sm_count / full.sm_count
    memory_share = min(1.0, int(profile.group(2)) / full.memory_gb)
    tflops = {dtype: value * sm_share for dtype, value in full.tflops.items()}
    source = (f"{full.source}; scaled to MIG {profile.group(0)}: {sm_count}/{full.sm_count} SMs, "
              f"{profile.group(2)}/{full.memory_gb:g} GB of memory bandwidth")
    return PeakLookup(dataclasses.replace(full, name=f"{full.name} MIG {profile.group(0)}", tflops=tflops,
                                          memory_tb_s=full.memory_tb_s * memory_share, source=source))


def published_peak(device_name: str, sm_count: int | None = None, mig: bool = False) -> Peak | None:
    """The published peaks for a device name, None if unknown (see :func:`peak_lookup` for the reason)."""
    return peak_lookup(device_name, sm_count, mig).peak


def achieved_tflops(flops_per_sample: float, samples_per_s: float) -> float:
    """TFLOP/s = FLOPs per sample x samples/s / 1e12."""
    return flops_per_sample * samples_per_s / 1e12


def mfu(achieved: float, device_name: str, dtype: str, sm_count: int | None = None) -> float | None:
    """Model FLOPs utilization: achieved TFLOP/s / published dense peak for ``dtype`` (Chowdhery et al.,
    "PaLM", 2022, appendix B). None when the device or dtype has no published peak (the CPU)."""
    peak = published_peak(device_name, sm_count)
    if peak is None or dtype not in peak.tflops:
        return None
    return achieved / peak.tflops[dtype]


def attainable_tflops(intensity_flop_per_byte: float, peak_tflops: float, bandwidth_tb_s: float) -> float:
    """Roofline: min(peak compute, intensity x bandwidth), TFLOP/s (TB/s x FLOP/byte = TFLOP/s)."""
    return min(peak_tflops, intensity_flop_per_byte * bandwidth_tb_s)


def ridge_point(peak_tflops: float, bandwidth_tb_s: float) -> float:
    """Arithmetic intensity (FLOP/byte) where the memory roof meets the compute roof."""
    return peak_tflops / bandwidth_tb_s

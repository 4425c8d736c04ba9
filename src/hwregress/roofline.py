"""Published peaks of common GPUs, MFU, and roofline placement.

Peaks are dense (no 2:4 sparsity) tensor-core figures in TFLOP/s and DRAM bandwidth in TB/s, from
NVIDIA's datasheets: H100 Tensor Core GPU datasheet (SXM5 and PCIe, 2023), H200 datasheet (2024), A100
datasheet (2021, 40GB and 80GB), L4 datasheet (2023), A10 datasheet (2021), T4 datasheet (2019), V100
datasheet (2020, SXM2). The datasheets print sparse figures for tf32/bf16/fp16 on Ampere and later;
those are halved here. The roofline model: Williams, Waterman & Patterson, "Roofline: an insightful
visual performance model for multicore architectures", CACM 52(4), 2009.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    """Published peaks of one GPU model.

    Attributes:
        name: the product name.
        tflops: dtype (``fp32``, ``tf32``, ``bf16``, ``fp16``) -> dense peak TFLOP/s.
        memory_tb_s: DRAM bandwidth in TB/s.
        source: the datasheet.
    """

    name: str
    tflops: dict[str, float]
    memory_tb_s: float
    source: str

    def roof(self, ceiling: str, dtype: str) -> float | None:
        """The published counterpart of a measured ceiling: ``gemm`` -> TFLOP/s for ``dtype``, ``copy``
        -> DRAM GB/s; None for anything without one (``h2d`` depends on the host bus, not the GPU)."""
        if ceiling == "gemm":
            return self.tflops.get(dtype)
        return self.memory_tb_s * 1000.0 if ceiling == "copy" else None


# Matching order matters: more specific names first ("A100" before "A10", "H100 PCIe" before "H100").
PUBLISHED_PEAKS: tuple[tuple[tuple[str, ...], Peak], ...] = (
    (("h200",), Peak("H200 SXM", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}, 4.8,
                     "NVIDIA H200 Tensor Core GPU datasheet")),
    (("h100", "pcie"), Peak("H100 PCIe", {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0}, 2.0,
                            "NVIDIA H100 Tensor Core GPU datasheet")),
    (("h100",), Peak("H100 SXM", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}, 3.35,
                     "NVIDIA H100 Tensor Core GPU datasheet")),
    (("a100", "80gb"), Peak("A100 80GB SXM", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, 2.039,
                            "NVIDIA A100 Tensor Core GPU datasheet")),
    (("a100",), Peak("A100 40GB", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, 1.555,
                     "NVIDIA A100 Tensor Core GPU datasheet")),
    (("l4",), Peak("L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0}, 0.3,
                   "NVIDIA L4 Tensor Core GPU datasheet")),
    (("a10",), Peak("A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}, 0.6,
                    "NVIDIA A10 Tensor Core GPU datasheet")),
    (("t4",), Peak("T4", {"fp32": 8.1, "fp16": 65.0}, 0.32, "NVIDIA T4 Tensor Core GPU datasheet")),
    (("v100",), Peak("V100 SXM2", {"fp32": 15.7, "fp16": 125.0}, 0.9, "NVIDIA V100 Tensor Core GPU datasheet")),
)


def published_peak(device_name: str) -> Peak | None:
    """The published peaks for a device name such as ``"NVIDIA H100 80GB HBM3"``, None if unknown."""
    lowered = device_name.lower()
    tokens = set(lowered.replace("-", " ").split())
    for words, peak in PUBLISHED_PEAKS:
        if all(w in tokens or (len(w) > 3 and w in lowered) for w in words):
            return peak
    return None


def achieved_tflops(flops_per_sample: float, samples_per_s: float) -> float:
    """TFLOP/s = FLOPs per sample x samples/s / 1e12."""
    return flops_per_sample * samples_per_s / 1e12


def mfu(achieved: float, device_name: str, dtype: str) -> float | None:
    """Model FLOPs utilization: achieved TFLOP/s / published dense peak for ``dtype`` (Chowdhery et al.,
    "PaLM", 2022, appendix B). None when the device or dtype has no published peak (the CPU)."""
    peak = published_peak(device_name)
    if peak is None or dtype not in peak.tflops:
        return None
    return achieved / peak.tflops[dtype]


def attainable_tflops(intensity_flop_per_byte: float, peak_tflops: float, bandwidth_tb_s: float) -> float:
    """Roofline: min(peak compute, intensity x bandwidth), TFLOP/s (TB/s x FLOP/byte = TFLOP/s)."""
    return min(peak_tflops, intensity_flop_per_byte * bandwidth_tb_s)


def ridge_point(peak_tflops: float, bandwidth_tb_s: float) -> float:
    """Arithmetic intensity (FLOP/byte) where the memory roof meets the compute roof."""
    return peak_tflops / bandwidth_tb_s

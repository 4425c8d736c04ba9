"""The device's roof, measured: dense GEMM throughput per dtype and memory bandwidth.

GEMM: ``C = A @ B`` with square ``n x n`` operands, 2 n^3 FLOPs per product (n^3 multiply-adds).
Device copy: ``dst.copy_(src)`` moves 2 x size bytes (one read, one write), the convention of
NVIDIA's bandwidthTest and STREAM "copy". Host to device: a pinned host buffer copied to the device
moves its size once over the bus.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from hwregress.bench import Measurement, prepare_process
from hwregress.devices import device_kind
from hwregress.memory import PeakMemoryMeter
from hwregress.numerics import TENSOR_DTYPES, precision
from hwregress.telemetry import TelemetrySampler
from hwregress.timing import RoundTimer, TimingPlan, measure


@dataclass(frozen=True)
class CeilingSpec:
    """One roof to measure.

    Attributes:
        name: ``gemm``, ``copy`` (device to device) or ``h2d`` (pinned host to device).
        unit: ``TFLOP/s`` or ``GB/s``.
        size: matrix side ``n`` for GEMM, buffer bytes for copies.
    """

    name: str
    unit: str
    size: int


def default_spec(name: str, device: str) -> CeilingSpec:
    """Sizes large enough to saturate the device, small enough for a 2-core CPU: GEMM n = 8192 on
    accelerators and 1024 on the CPU; copies of 1 GiB on accelerators and 256 MiB on the CPU (measured on the
    2-core development VM, four processes each: 64 MiB copies ran 30-41 GB/s, 256 MiB 37-39 GB/s; 64 MiB
    sessions of the CPU tier moved 35-83 GB/s, beyond any honest threshold).

    Raises:
        ValueError: unknown ceiling name.
    """
    accelerator = device_kind(device) != "cpu"
    if name == "gemm":
        return CeilingSpec("gemm", "TFLOP/s", 8192 if accelerator else 1024)
    if name in ("copy", "h2d"):
        return CeilingSpec(name, "GB/s", 2**30 if accelerator else 256 * 2**20)
    raise ValueError(f"unknown ceiling {name!r}; use gemm, copy or h2d")


def _gemm(device: str, dtype: str, n: int) -> tuple[Callable[[], None], float]:
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=TENSOR_DTYPES[dtype], generator=generator)
    b = torch.randn(n, n, device=device, dtype=TENSOR_DTYPES[dtype], generator=generator)
    out = torch.empty_like(a)

    def step() -> None:
        torch.matmul(a, b, out=out)

    return step, 2.0 * n**3 / 1e12


def _copy(device: str, size: int) -> tuple[Callable[[], None], float]:
    src = torch.ones(size // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), 2.0 * src.numel() * 4 / 1e9


def _h2d(device: str, size: int) -> tuple[Callable[[], None], float]:
    host = torch.ones(size // 4, dtype=torch.float32).pin_memory()
    dst = torch.empty(host.numel(), device=device, dtype=torch.float32)
    return (lambda: dst.copy_(host, non_blocking=True)), host.numel() * 4 / 1e9


def run_ceiling(spec: CeilingSpec, device: str, dtype: str, timer: RoundTimer, plan: TimingPlan,
                telemetry_interval_s: float = 0.1,
                round_driver: Callable[[Callable[[], None], int], None] | None = None) -> Measurement:
    """Measure one roof. Per-round samples are in ``spec.unit`` (TFLOP/s or GB/s).

    Raises:
        ValueError: ``h2d`` on a device without a host-to-device bus (the CPU).
    """
    if spec.name == "h2d" and device_kind(device) != "cuda":
        raise ValueError(f"h2d bandwidth needs a CUDA device, got {device}")
    prepare_process(device)
    with PeakMemoryMeter(device) as memory, precision(device, dtype if spec.name == "gemm" else "fp32"):
        if spec.name == "gemm":
            step, work = _gemm(device, dtype, spec.size)
        elif spec.name == "copy":
            step, work = _copy(device, spec.size)
        else:
            step, work = _h2d(device, spec.size)
        sampler = TelemetrySampler(device, telemetry_interval_s)
        timing = measure(step, timer, plan, round_driver, window=sampler)
    return Measurement(timing, work, memory.peak_bytes, sampler.summary(), sampler.compact_series(),
                       health=sampler.health)

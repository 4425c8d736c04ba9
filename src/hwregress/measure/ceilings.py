"""The device's roof, measured: dense GEMM throughput per dtype, memory bandwidth and bus bandwidth.

GEMM: ``C = A @ B`` with square ``n x n`` operands, 2 n^3 FLOPs per product (n^3 multiply-adds).
Device copy: ``dst.copy_(src)`` moves 2 x size bytes (one read, one write), the convention of
NVIDIA's bandwidthTest and STREAM "copy". Bus copies move their size once over the bus, the convention
of bandwidthTest's host/device and device/device (peer) modes: ``h2d`` a pinned host buffer to the
device, ``d2h`` the device to a pinned host buffer, ``p2p`` ``cuda:i`` to the next visible GPU
``cuda:(i+1) % count``. Their published counterparts are in :mod:`hwregress.hardware.interconnect`.

A ceiling that cannot run on a device (``h2d``/``d2h`` off CUDA, ``p2p`` with one GPU) raises
:class:`CeilingUnsupported`; :func:`unsupported_reason` says so beforehand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from hwregress.hardware.facts import device_kind
from hwregress.hardware.telemetry import TelemetrySampler
from hwregress.measure.memory import PeakMemoryMeter
from hwregress.measure.precision.numerics import TENSOR_DTYPES, precision
from hwregress.measure.timing import RoundTimer, TimingPlan, VerdictCheck, in_work_units, measure
from hwregress.measure.window import Measurement, prepare_process

CEILING_NAMES = ("gemm", "copy", "h2d", "d2h", "p2p")
_HOST_BUS_CEILINGS = ("h2d", "d2h")


class CeilingUnsupported(ValueError):
    """A ceiling that cannot run here; the message is the reason, e.g. ``"p2p needs two CUDA devices,
    1 visible ..."`` or ``"d2h needs a CUDA device, got cpu ..."``. A ValueError, as ``run_ceiling``
    raised for ``h2d`` on the CPU before this class existed."""


@dataclass(frozen=True)
class CeilingSpec:
    """One roof to measure.

    Attributes:
        name: ``gemm``, ``copy`` (device to device), ``h2d`` (pinned host to device), ``d2h`` (device
            to pinned host) or ``p2p`` (this GPU to the next visible one).
        unit: ``TFLOP/s`` or ``GB/s``.
        size: matrix side ``n`` for GEMM, buffer bytes for copies.
    """

    name: str
    unit: str
    size: int


@dataclass(frozen=True)
class PeerRoute:
    """The GPU pair a ``p2p`` copy runs over.

    Attributes:
        source: the device under test, e.g. ``"cuda:0"`` (the copy reads it and runs on its stream).
        peer: the next visible GPU, ``cuda:(i+1) % count``, e.g. ``"cuda:1"`` (the copy writes it).
        peer_name: the peer's ``torch.cuda.get_device_name``.
        direct_access: ``torch.cuda.can_device_access_peer(source, peer)``: True when the GPUs can
            read each other's memory directly (NVLink or PCIe peer-to-peer); False means the driver
            stages the copy through host memory, far below either link's figure.
    """

    source: str
    peer: str
    peer_name: str
    direct_access: bool

    def facts(self) -> dict[str, Any]:
        """The route as record facts: ``{"peer": "cuda:1", "peer_name": ..., "peer_direct_access": True}``."""
        return {"peer": self.peer, "peer_name": self.peer_name, "peer_direct_access": self.direct_access}


@dataclass
class CeilingMeasurement(Measurement):
    """A :class:`hwregress.measure.window.Measurement` with the facts of how the roof was measured, for the
    caller to put into its record: ``p2p`` -> :meth:`PeerRoute.facts`; the other ceilings -> ``{}``."""

    facts: dict[str, Any] = field(default_factory=dict)


def _check_name(name: str) -> None:
    if name not in CEILING_NAMES:
        raise ValueError(f"unknown ceiling {name!r}; use {', '.join(CEILING_NAMES)}")


def default_spec(name: str, device: str) -> CeilingSpec:
    """Sizes large enough to saturate the device, small enough for a 2-core CPU: GEMM n = 8192 on
    accelerators and 1024 on the CPU; copies (``copy``, ``h2d``, ``d2h``, ``p2p``) of 1 GiB on
    accelerators and 256 MiB on the CPU (smaller CPU copies moved beyond any honest threshold between sessions:
    docs/measured.md, 'CPU ceilings'). A spec is returned even where the ceiling cannot run (``d2h`` on the
    CPU): :func:`run_ceiling` raises :class:`CeilingUnsupported` then.

    Raises:
        ValueError: unknown ceiling name.
    """
    _check_name(name)
    accelerator = device_kind(device) != "cpu"
    if name == "gemm":
        return CeilingSpec("gemm", "TFLOP/s", 8192 if accelerator else 1024)
    return CeilingSpec(name, "GB/s", 2**30 if accelerator else 256 * 2**20)


def p2p_route(device: str) -> PeerRoute:
    """The pair a ``p2p`` copy from ``device`` (``cuda:i``; ``cuda`` is the current device) runs over:
    to ``cuda:(i+1) % count``.

    Raises:
        CeilingUnsupported: ``device`` is not CUDA, or fewer than two CUDA devices are visible.
    """
    if device_kind(device) != "cuda":
        raise CeilingUnsupported(f"p2p needs a CUDA device, got {device}; run it on cuda:<index>")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        raise CeilingUnsupported(f"p2p needs two CUDA devices, {count} visible; run it on a machine with two GPUs "
                                 "and check CUDA_VISIBLE_DEVICES")
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    peer = (index + 1) % count
    return PeerRoute(f"cuda:{index}", f"cuda:{peer}", torch.cuda.get_device_name(peer),
                     bool(torch.cuda.can_device_access_peer(index, peer)))


def unsupported_reason(name: str, device: str) -> str | None:
    """None when ceiling ``name`` can run on ``device`` here, else the reason (the message
    :func:`run_ceiling` would raise :class:`CeilingUnsupported` with), e.g. for a test to skip.

    Raises:
        ValueError: unknown ceiling name.
    """
    _check_name(name)
    if name in _HOST_BUS_CEILINGS and device_kind(device) != "cuda":
        return f"{name} needs a CUDA device, got {device}; run it on cuda:<index>"
    if name == "p2p":
        try:
            p2p_route(device)
        except CeilingUnsupported as reason:
            return str(reason)
    return None


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


def _d2h(device: str, size: int) -> tuple[Callable[[], None], float]:
    src = torch.ones(size // 4, device=device, dtype=torch.float32)
    host = torch.empty(src.numel(), dtype=torch.float32, pin_memory=True)
    return (lambda: host.copy_(src, non_blocking=True)), src.numel() * 4 / 1e9


def _p2p(route: PeerRoute, size: int) -> tuple[Callable[[], None], float]:
    # torch runs a cross-device copy on the source device's current stream, the stream the round timer
    # records its CUDA events on, so the timed window holds the whole copy
    src = torch.ones(size // 4, device=route.source, dtype=torch.float32)
    dst = torch.empty(src.numel(), device=route.peer, dtype=torch.float32)
    return (lambda: dst.copy_(src)), src.numel() * 4 / 1e9


def _build(spec: CeilingSpec, device: str, dtype: str,
           route: PeerRoute | None) -> tuple[Callable[[], None], float]:
    if spec.name == "gemm":
        return _gemm(device, dtype, spec.size)
    if spec.name == "copy":
        return _copy(device, spec.size)
    if spec.name == "h2d":
        return _h2d(device, spec.size)
    if spec.name == "d2h":
        return _d2h(device, spec.size)
    assert route is not None  # p2p: run_ceiling found the route first
    return _p2p(route, spec.size)


def run_ceiling(spec: CeilingSpec, device: str, dtype: str, timer: RoundTimer, plan: TimingPlan,
                telemetry_interval_s: float = 0.1,
                round_driver: Callable[[Callable[[], None], int], None] | None = None,
                settled: VerdictCheck | None = None) -> CeilingMeasurement:
    """Measure one roof. Per-round samples are in ``spec.unit`` (TFLOP/s or GB/s); ``settled`` takes the window's
    planned looks against the baseline (:class:`hwregress.measure.window.RunOptions`); ``facts`` of the
    result say how it was measured (``p2p``: the peer and whether direct peer access is possible).

    Peak memory and telemetry are those of ``device``: a ``p2p`` copy's destination buffer lives on the
    peer and is not counted.

    Raises:
        CeilingUnsupported: the ceiling cannot run here (:func:`unsupported_reason`).
        ValueError: unknown ceiling name.
    """
    reason = unsupported_reason(spec.name, device)
    if reason is not None:
        raise CeilingUnsupported(reason)
    route = p2p_route(device) if spec.name == "p2p" else None
    prepare_process(device)
    with PeakMemoryMeter(device) as memory, precision(device, dtype if spec.name == "gemm" else "fp32"):
        step, work = _build(spec, device, dtype, route)
        sampler = TelemetrySampler(device, telemetry_interval_s)
        timing = measure(step, timer, plan, round_driver, window=memory.steady(sampler),
                         settled=in_work_units(settled, work))
    return CeilingMeasurement(timing, work, memory.peak_bytes, sampler.summary(), sampler.compact_series(),
                              health=sampler.health, facts=route.facts() if route is not None else {})

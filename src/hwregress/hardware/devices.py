"""Device discovery, hardware keys, device facts and synchronization.

A *device spec* is the string torch understands: ``"cpu"``, ``"cuda:0"``, ``"mps"``. A *hardware key*
names the machine class a baseline belongs to (``"nvidia-h100-80gb-hbm3"``, ``"amd-epyc-2t"``): two
machines with the same key are expected to perform alike.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from hwregress.hardware.facts import device_kind, slugify
from hwregress.hardware.identity import cpu_hardware_key, this_cpu_identity

SUPPORTED_KINDS = ("cpu", "cuda", "mps")


@dataclass(frozen=True)
class DeviceInfo:
    """What the suite knows about one device.

    Attributes:
        spec: the torch device string, e.g. ``"cuda:0"``.
        kind: ``"cpu"``, ``"cuda"`` or ``"mps"``.
        name: the human name (``torch.cuda.get_device_name`` or the CPU model).
        hardware_key: slug that names the baselines file, e.g. ``"nvidia-h100-80gb-hbm3"``.
        total_memory_bytes: device memory in bytes (host RAM for the CPU), None where unknown.
        facts: further JSON-able facts (compute capability, SM count, threads, ...).
    """

    spec: str
    kind: str
    name: str
    hardware_key: str
    total_memory_bytes: int | None
    facts: dict[str, Any] = field(default_factory=dict)


def visible_devices() -> list[str]:
    """Every device this process can use: ``cpu``, then ``cuda:0`` ... ``cuda:N-1``, then ``mps``."""
    specs = ["cpu"]
    if torch.cuda.is_available():
        specs += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        specs.append("mps")
    return specs


def parse_device_list(text: str, source: str) -> list[str]:
    """Parse a comma-separated device list such as ``"cuda:1,cpu"``.

    ``cuda`` alone means every visible CUDA device. Devices that are well-formed but not visible are
    kept: their tests skip with a reason, so a GPU runner that lost a GPU shows it.

    Raises:
        ValueError: an entry is not ``cpu``, ``mps``, ``cuda`` or ``cuda:<index>``; the message names
            the entry, ``source`` (e.g. ``"--devices"``) and the visible devices.
    """
    specs: list[str] = []
    for raw in text.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "cuda":
            found = [s for s in visible_devices() if s.startswith("cuda:")]
            specs += found or ["cuda:0"]
        elif entry in ("cpu", "mps") or re.fullmatch(r"cuda:\d+", entry):
            specs.append(entry)
        else:
            raise ValueError(
                f"{source}: {raw.strip()!r} is not a device; use cpu, mps, cuda or cuda:<index> "
                f"(visible here: {', '.join(visible_devices())})"
            )
    if not specs:
        raise ValueError(f"{source}: {text!r} names no device; e.g. --devices cuda:0,cpu")
    return list(dict.fromkeys(specs))


def unavailable_reason(spec: str) -> str | None:
    """None if ``spec`` can run here, else a sentence saying why not."""
    if spec in visible_devices():
        return None
    kind = device_kind(spec)
    if kind == "cuda":
        if not torch.cuda.is_available():
            return f"{spec}: no CUDA device visible (torch {torch.__version__}, torch.cuda.is_available() is False)"
        return f"{spec}: only {torch.cuda.device_count()} CUDA device(s) visible"
    return f"{spec}: not available on this machine"


@functools.cache
def cpu_model_name() -> str:
    """The CPU model string from /proc/cpuinfo (Linux) or ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def describe(spec: str) -> DeviceInfo:
    """Facts about the device ``spec``; see :class:`DeviceInfo`.

    The CPU's hardware key joins the CPU model, where the model name is ambiguous its family and model
    numbers, and torch's intra-op thread count, since CPU throughput scales with threads: ``"amd-epyc-f26m2-2t"``
    (:func:`hwregress.hardware.identity.cpu_hardware_key`: two EPYC generations get two baselines files).
    """
    kind = device_kind(spec)
    if kind == "cuda":
        index = torch.device(spec).index or 0
        props = torch.cuda.get_device_properties(index)
        facts = {
            "compute_capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "mig": "MIG" in props.name.split(),  # under MIG, CUDA names the instance "<GPU> MIG 1g.10gb"
        }
        return DeviceInfo(spec, kind, props.name, slugify(props.name), int(props.total_memory), facts)
    if kind == "mps":
        return DeviceInfo(spec, kind, "Apple MPS", slugify(f"apple-mps-{platform.machine()}"), None, {})
    threads = torch.get_num_threads()
    name = cpu_model_name()
    return DeviceInfo(
        spec,
        "cpu",
        name,
        cpu_hardware_key({**this_cpu_identity(), "cpu_brand": name, "torch_threads": threads}),
        _host_memory_bytes(),
        {"threads": threads, "logical_cores": os.cpu_count(), "machine": platform.machine()},
    )


def _host_memory_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # psutil missing or unreadable /proc: a fact we can live without
        return None


def synchronize(spec: str) -> None:
    """Wait until every queued kernel on ``spec`` has finished (no-op on the CPU)."""
    kind = device_kind(spec)
    if kind == "cuda":
        torch.cuda.synchronize(torch.device(spec))
    elif kind == "mps":
        torch.mps.synchronize()


def environment_fingerprint(spec: str, cudnn_benchmark: bool = True) -> dict[str, str | None]:
    """The software and settings that decide performance: torch, CUDA, cuDNN, NVIDIA driver, Python,
    torchvision, and on CUDA ``cudnn_benchmark`` (the ``torch.backends.cudnn.benchmark`` setting the
    runs use: ``bench.RunOptions.cudnn_benchmark``, True unless a caller turns it off).

    Values are strings, None where not applicable (no CUDA) or unreadable.
    """
    kind = device_kind(spec)
    on_cuda = kind == "cuda"
    fingerprint: dict[str, str | None] = {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "torchvision": _torchvision_version(),
        "cuda": torch.version.cuda if on_cuda else None,
        "cudnn": str(torch.backends.cudnn.version()) if on_cuda and torch.backends.cudnn.is_available() else None,
        "cudnn_benchmark": str(bool(cudnn_benchmark)) if on_cuda else None,
        "driver": nvidia_driver_version() if on_cuda else None,
        "platform": f"{sys.platform}-{platform.machine()}",
    }
    return fingerprint


def _torchvision_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("torchvision")
    except Exception:  # not installed
        return None


@functools.lru_cache(maxsize=1)
def nvidia_driver_version() -> str | None:
    """The NVIDIA driver version through NVML, None without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVMLError_LibraryNotFound and friends: no driver here
        return None

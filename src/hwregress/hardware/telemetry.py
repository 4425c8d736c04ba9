"""Background telemetry during a measured window: NVML for CUDA devices, psutil for the host.

Every NVML query is guarded on its own: a call the GPU does not support, or a GPU lost mid-run, turns
that one metric off (its error is kept in ``errors``), never the session.

NVML units: utilization in %, memory in bytes, power in mW (reported here in W), total energy in mJ
(reported in J), temperature in deg C, clocks in MHz. Reference: NVIDIA NVML API Reference Guide,
"Device Queries" (nvmlDeviceGetUtilizationRates, nvmlDeviceGetPowerUsage,
nvmlDeviceGetTotalEnergyConsumption, nvmlDeviceGetCurrentClocksEventReasons).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import psutil

from hwregress.hardware.devices import device_kind
from hwregress.hardware.health import CpuHealthProbe, gpu_health

# Clocks-event (throttle) reason bits from nvml.h; 0x1 (GPU idle) is not a throttle.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
IDLE_REASON = 0x1


def decode_reasons(mask: int) -> list[str]:
    """Names of the bits set in an NVML clocks-event-reasons mask (unknown bits as hex)."""
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    return names + ([hex(unknown)] if unknown else [])


class NvmlLookupError(RuntimeError):
    """No NVML handle matches the CUDA device by PCI bus id or UUID; the message lists each attempt."""


def pci_bus_id(props: Any) -> str | None:
    """The PCI address of a CUDA device in NVML's format (``NVML_DEVICE_PCI_BUS_ID_FMT``,
    ``"%08X:%02X:%02X.0"``, e.g. ``"00000000:18:00.0"``) from ``torch.cuda.get_device_properties``:
    its ``pci_bus_id`` when that is already an address string, else built from the integer
    ``pci_domain_id`` / ``pci_bus_id`` / ``pci_device_id``; None when the properties carry none."""
    bus = getattr(props, "pci_bus_id", None)
    if isinstance(bus, str) and ":" in bus:
        return bus.upper()
    domain, device = getattr(props, "pci_domain_id", None), getattr(props, "pci_device_id", None)
    if not all(isinstance(v, int) for v in (domain, bus, device)):
        return None
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def nvml_uuid(props: Any) -> str | None:
    """NVML's UUID string (``"GPU-<uuid>"``) of a CUDA device's properties, None when torch has none."""
    uuid = getattr(props, "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


class _Nvml:
    """The NVML handle of one CUDA device and guarded queries.

    The handle is looked up by PCI bus id, then by UUID, never by index: NVML numbers every GPU of the
    machine while CUDA numbers only those in ``CUDA_VISIBLE_DEVICES``, so NVML index 1 can be another
    GPU than ``cuda:1``, and its telemetry would be another GPU's, silently.

    Attributes:
        handle: the NVML device handle; ``lookup`` how it was found (``"pci bus id 0000...:18:00.0"``).

    Raises:
        NvmlLookupError: neither the bus id nor the UUID names an NVML device.
    """

    def __init__(self, device: str) -> None:
        import pynvml
        import torch

        self.nvml = pynvml
        self.errors: dict[str, str] = {}
        pynvml.nvmlInit()
        try:
            index = torch.device(device).index
            index = torch.cuda.current_device() if index is None else index
            self.handle, self.lookup = self._handle_for(device, torch.cuda.get_device_properties(index))
        except Exception:
            self.close()
            raise

    def _handle_for(self, device: str, props: Any) -> tuple[Any, str]:
        attempts = []
        for how, key, find in (("pci bus id", pci_bus_id(props), self.nvml.nvmlDeviceGetHandleByPciBusId),
                               ("uuid", nvml_uuid(props), self.nvml.nvmlDeviceGetHandleByUUID)):
            if key is None:
                attempts.append(f"{how}: torch reports none")
                continue
            try:
                return find(key), f"{how} {key}"
            except Exception as error:  # NVMLError_NotFound, NVMLError_InvalidArgument, ...
                attempts.append(f"{how} {key}: {type(error).__name__}: {error}")
        raise NvmlLookupError(
            f"no NVML device matches {device} ({'; '.join(attempts)}); GPU telemetry is off rather than read "
            "by NVML index, which ignores CUDA_VISIBLE_DEVICES and may name another GPU"
        )

    def health(self) -> dict[str, Any]:
        """The GPU's state now (:func:`hwregress.hardware.health.gpu_health`)."""
        return gpu_health(self.handle, self.nvml)

    def query(self, name: str, call: Callable[[], Any]) -> Any:
        if name in self.errors:
            return None
        try:
            return call()
        except Exception as error:  # NVMLError_NotSupported, NVMLError_GpuIsLost, ...
            self.errors[name] = f"{type(error).__name__}: {error}"
            return None

    def sample(self) -> dict[str, Any]:
        n, h = self.nvml, self.handle
        util = self.query("utilization", lambda: n.nvmlDeviceGetUtilizationRates(h))
        memory = self.query("memory", lambda: n.nvmlDeviceGetMemoryInfo(h))
        power = self.query("power", lambda: n.nvmlDeviceGetPowerUsage(h))
        return {
            "gpu_util_pct": getattr(util, "gpu", None),
            "mem_util_pct": getattr(util, "memory", None),
            "memory_used_bytes": getattr(memory, "used", None),
            "power_w": power / 1000.0 if power is not None else None,
            "temperature_c": self.query("temperature", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
            "sm_clock_mhz": self.query("sm_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            "mem_clock_mhz": self.query("mem_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
            "clock_event_reasons": self.clock_event_reasons(),
        }

    def clock_event_reasons(self) -> int | None:
        n, h = self.nvml, self.handle
        newer = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if newer is not None and "clocks_event" not in self.errors:
            value = self.query("clocks_event", lambda: newer(h))
            if value is not None:
                return int(value)
        return self.query("throttle_reasons", lambda: int(n.nvmlDeviceGetCurrentClocksThrottleReasons(h)))

    def energy_mj(self) -> int | None:
        return self.query("energy", lambda: int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)))

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


class TelemetrySampler:
    """Context manager that reads telemetry every ``interval_s`` on a background thread.

    After exit: ``health`` (the machine's health over the window: :class:`hwregress.hardware.health.CpuHealthProbe`'s
    result, merged on CUDA with :func:`hwregress.hardware.health.gpu_health` read at the window's end, while the GPU
    still works), ``series`` (list of dicts with ``t_s`` relative to entry), ``gpu_available``,
    ``gpu_unavailable_reason`` and ``gpu_lookup`` (how the NVML device was matched to the CUDA device),
    ``errors`` (metric -> NVML error), ``energy_j`` (GPU energy over the window in J from the
    total-energy counter in mJ; integrated power when the counter is unsupported or did not advance in
    a short window; else None), ``duration_s``.
    """

    def __init__(self, device: str, interval_s: float = 0.1, health_probe: CpuHealthProbe | None = None) -> None:
        if interval_s <= 0:
            raise ValueError(f"telemetry interval must be > 0 s, got {interval_s}")
        self.device = device
        self.interval_s = interval_s
        self.series: list[dict[str, Any]] = []
        self.errors: dict[str, str] = {}
        self.gpu_available = False
        self.gpu_unavailable_reason: str | None = None
        self.gpu_lookup: str | None = None
        self.energy_j: float | None = None
        self.energy_source: str | None = None
        self.duration_s = 0.0
        self._nvml: _Nvml | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process = psutil.Process()
        self._start = 0.0
        self._energy_start: int | None = None
        self.health: dict[str, Any] = {}
        self._health_probe = health_probe or CpuHealthProbe()  # a rank passes one whose "us" is its whole job

    def __enter__(self) -> TelemetrySampler:
        if device_kind(self.device) == "cuda":
            self._open_nvml()
        else:
            self.gpu_unavailable_reason = f"{self.device} is not an NVIDIA GPU"
        psutil.cpu_percent(percpu=True)  # primes psutil's per-core counters
        self._health_probe.__enter__()
        self._start = time.perf_counter()
        self._energy_start = self._nvml.energy_mj() if self._nvml else None
        self._thread = threading.Thread(target=self._run, name="hwregress-telemetry", daemon=True)
        self._thread.start()
        return self

    def _open_nvml(self) -> None:
        try:
            self._nvml = _Nvml(self.device)
            self.gpu_available = True
            self.gpu_lookup = self._nvml.lookup
        except Exception as error:  # NVMLError_LibraryNotFound (no driver), DriverNotLoaded, ...
            self.gpu_unavailable_reason = f"NVML unavailable: {type(error).__name__}: {error}"

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.series.append(self._sample())

    def _sample(self) -> dict[str, Any]:
        sample: dict[str, Any] = {"t_s": time.perf_counter() - self._start}
        per_core = psutil.cpu_percent(percpu=True)
        sample["cpu_util_pct"] = sum(per_core) / len(per_core) if per_core else None
        sample["cpu_util_per_core_pct"] = per_core
        sample["rss_bytes"] = self._process.memory_info().rss
        try:
            frequency = psutil.cpu_freq()
            sample["cpu_freq_mhz"] = frequency.current if frequency else None
        except Exception:  # not readable in some containers
            sample["cpu_freq_mhz"] = None
        if self._nvml is not None:
            sample.update(self._nvml.sample())
        return sample

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        gpu = self._nvml.health() if self._nvml is not None else {}
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.duration_s = time.perf_counter() - self._start
        self._health_probe.__exit__(exc_type, exc, tb)
        self.health = {**self._health_probe.result, **gpu}
        if self._nvml is not None:
            self._finish_energy()
            self.errors = dict(self._nvml.errors)
            self._nvml.close()

    def _finish_energy(self) -> None:
        assert self._nvml is not None
        end = self._nvml.energy_mj()
        # the counter updates at the driver's own interval: a window shorter than it may read no change
        if self._energy_start is not None and end is not None and end > self._energy_start:
            self.energy_j, self.energy_source = (end - self._energy_start) / 1000.0, "total-energy counter"
            return
        points = [(s["t_s"], s["power_w"]) for s in self.series if s.get("power_w") is not None]
        if len(points) >= 2:
            self.energy_j = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(points))
            self.energy_j *= self.duration_s / (points[-1][0] - points[0][0])  # extend to the whole window
            self.energy_source = "integrated power"

    def throttle_reasons(self) -> list[str]:
        """Reasons other than idle seen in any reading of the window."""
        mask = 0
        for sample in self.series:
            mask |= sample.get("clock_event_reasons") or 0
        return decode_reasons(mask & ~IDLE_REASON)

    def summary(self) -> dict[str, Any]:
        """Min/mean/max of each numeric metric, throttle reasons, energy, availability and errors."""
        metrics: dict[str, dict[str, float]] = {}
        for key in ("gpu_util_pct", "mem_util_pct", "memory_used_bytes", "power_w", "temperature_c",
                    "sm_clock_mhz", "mem_clock_mhz", "cpu_util_pct", "rss_bytes", "cpu_freq_mhz"):
            values = [s[key] for s in self.series if s.get(key) is not None]
            if values:
                metrics[key] = {"min": min(values), "mean": sum(values) / len(values), "max": max(values)}
        return {
            "interval_s": self.interval_s,
            "readings": len(self.series),
            "duration_s": self.duration_s,
            "gpu_available": self.gpu_available,
            "gpu_unavailable_reason": self.gpu_unavailable_reason,
            "gpu_lookup": self.gpu_lookup,
            "errors": self.errors,
            "metrics": metrics,
            "throttle_reasons": self.throttle_reasons(),
            "energy_j": self.energy_j,
            "energy_source": self.energy_source,
        }

    def compact_series(self, max_points: int = 200) -> dict[str, list[float | None]]:
        """The time series for the report, thinned to at most ``max_points`` points."""
        step = max(1, len(self.series) // max_points)
        kept = self.series[::step]
        keys = ("t_s", "gpu_util_pct", "power_w", "temperature_c", "sm_clock_mhz", "cpu_util_pct", "rss_bytes")
        return {k: [s.get(k) for s in kept] for k in keys if any(s.get(k) is not None for s in kept)}

"""Background telemetry during a measured window: NVML for CUDA devices, psutil for the host.

Every NVML query is guarded on its own: a call the GPU does not support, or a GPU lost mid-run, turns
that one metric off (its error is kept in ``errors``), never the session.

NVML units: utilization in %, memory in bytes, power in mW (reported here in W), total energy in mJ
(reported in J), temperature in deg C, clocks in MHz. Reference: NVIDIA NVML API Reference Guide,
"Device Queries" (nvmlDeviceGetUtilizationRates, nvmlDeviceGetPowerUsage,
nvmlDeviceGetTotalEnergyConsumption, nvmlDeviceGetCurrentClocksEventReasons).

Power is not the window's: "On Ampere (except GA100) or newer GPUs, the API returns power averaged over 1 sec
interval. On GA100 and older architectures, instantaneous power is returned" (nvmlDeviceGetPowerUsage). A
window's energy therefore comes from the total-energy counter (its delta over the window), and a window shorter
than the averaging period says so (``power_note``) instead of comparing its power with its energy.
"""

from __future__ import annotations

import itertools
import threading
import time
from types import TracebackType
from typing import Any

import psutil

from hwregress.hardware.facts import device_kind
from hwregress.hardware.health import CpuHealthProbe
from hwregress.hardware.nvml import NvmlDevice

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


class TelemetrySampler:
    """Context manager that reads telemetry every ``interval_s`` on a background thread.

    After exit: ``health`` (the machine's health over the window: :class:`hwregress.hardware.health.CpuHealthProbe`'s
    result, merged on CUDA with :func:`hwregress.hardware.gpu_health.gpu_health` read at the window's end, while the GPU
    still works), ``series`` (list of dicts with ``t_s`` relative to entry), ``gpu_available``,
    ``gpu_unavailable_reason`` and ``gpu_lookup`` (how the NVML device was matched to the CUDA device),
    ``errors`` (metric -> NVML error), ``energy_j`` (GPU energy over the window in J from the
    total-energy counter in mJ; integrated power when the counter is unsupported or did not advance in
    a short window; else None), ``duration_s``, ``power_averaging_s`` (s each power reading averages over,
    None without NVML). The GPU's compute processes are judged with the health probe's pids as "us" (a rank's
    probe: its whole job, so co-located siblings on the GPU are not contention).
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
        self.power_averaging_s: float | None = None
        self.duration_s = 0.0
        self._nvml: NvmlDevice | None = None
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
            self._nvml = NvmlDevice(self.device)
            self.gpu_available = True
            self.gpu_lookup = self._nvml.lookup
            self.power_averaging_s = self._nvml.power_averaging_s
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
        gpu = self._nvml.health(self._health_probe.our_pids()) if self._nvml is not None else {}
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
            "power_averaging_s": self.power_averaging_s,
            "power_note": self.power_note(),
        }

    def power_note(self) -> str | None:
        """A sentence when the window is shorter than the period each power reading averages over: its power
        readings describe the last averaging period, not the window; None otherwise."""
        averaging = self.power_averaging_s
        if not averaging or not any(s.get("power_w") is not None for s in self.series) or self.duration_s >= averaging:
            return None
        return (f"power averaged over {averaging:g} s, not the {self.duration_s:.2g} s window (NVML's power reading "
                "on Ampere and newer): the window's energy is the total-energy counter's"
                + ("" if self.energy_source == "total-energy counter" else ", which did not advance; the energy "
                   "integrated from these readings is approximate"))

    def compact_series(self, max_points: int = 200) -> dict[str, list[float | None]]:
        """The time series for the report, thinned to at most ``max_points`` points."""
        step = max(1, len(self.series) // max_points)
        kept = self.series[::step]
        keys = ("t_s", "gpu_util_pct", "power_w", "temperature_c", "sm_clock_mhz", "cpu_util_pct", "rss_bytes")
        return {k: [s.get(k) for s in kept] for k in keys if any(s.get(k) is not None for s in kept)}

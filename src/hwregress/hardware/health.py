"""Machine health before and during a measured window, as evidence: nothing here raises.

A timing is only as good as the machine was quiet. Contention can make a test many times slower
(docs/measured.md, 'Noise between sessions'); the verdict must be able to say so. :class:`CpuHealthProbe`
measures the host over a window (psutil), :func:`hwregress.hardware.gpu_health.gpu_health` reads a GPU's state
(NVML), and :func:`findings` turns either dict into sentences for what is abnormal. Every read is guarded on its
own: a failure leaves that field None and its error in ``errors``.

CPU time accounting (psutil ``cpu_times``, i.e. Linux ``/proc/stat``, in seconds summed over cores):

    total = sum of all fields except guest, guest_nice     (guest time is already inside user)
    busy  = total - idle - iowait - steal
    other_cpu_fraction = (busy - our CPU time) / total
    steal_fraction = steal / total                          (time the hypervisor gave to other VMs)

"Our" CPU time is that of a process tree: the probe's root process and every live process under it, each with
its ``children_user`` / ``children_system`` (Linux ``cutime`` / ``cstime``: the children it has reaped, with
theirs), so a worker that ran and was reaped inside the tree during the window stays ours. The root is this
process, or for a rank of a distributed or co-located job the pytest worker that launched the job
(:func:`hwregress.scaleout.rank_timing.job_health_probe`): the launcher, every rank and their siblings are "us", not
contention; the same pids are "us" among the GPU's compute processes.

The thread that enters the probe (the one that runs the window and, on a GPU, launches its kernels) is watched too,
for a launch-bound window whose speed is that thread's (docs/measured.md, 'Measured on an H200'): its involuntary
context switches over the window (``getrusage(RUSAGE_THREAD)``'s ``ru_nivcsw``: the scheduler took the core from
it), its migrations between CPUs (``se.nr_migrations`` of ``/proc/thread-self/sched``, where the kernel exposes it),
the CPU it last ran on at each end (``/proc/thread-self/stat`` field 39), and the host's speed at each end: the
fastest of five timings of a fixed pure-Python loop (:func:`hwregress.hardware.host_thread.host_speed_ns`, ns per
iteration), which moves with the
core's clock and with a sibling hyperthread's load where steal and frequency readings say nothing.

NVML queries: NVIDIA NVML API Reference Guide, "Device Queries" (nvmlDeviceGetComputeRunningProcesses,
nvmlDeviceGetMPSComputeRunningProcesses (processes with an MPS compute context), nvmlDeviceGetRemappedRows,
nvmlDeviceGetRetiredPagesPendingStatus, nvmlDeviceGetTemperatureThreshold,
nvmlDeviceGetCurrPcieLinkGeneration, ...).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import psutil

from hwregress.hardware import host_thread

# Thresholds of :func:`findings`, documented where they are used.
OTHER_CPU_LIMIT = 0.10  # other processes used > 10% of the cores' time: the window was shared
STEAL_LIMIT = 0.05  # the hypervisor took > 5% of the cores' time
LOAD_PER_CORE_LIMIT = 1.5  # 1-min load above 1.5x the core count before the window: it started busy
FREQUENCY_LIMIT = 0.60  # cores below 60% of their maximum clock (the max is single-core turbo; all-core
# clocks under load sit at 75-90% of it, lower with AVX-512: only a deep drop is evidence)
MEMORY_AVAILABLE_LIMIT = 0.10  # less than 10% of RAM available
SWAP_IN_LIMIT_BYTES = 2**20  # more than 1 MiB swapped in during the window
TEMPERATURE_MARGIN_C = 5  # GPU within 5 deg C of its slowdown temperature
POWER_LIMIT_SLACK = 0.99  # enforced power limit below 99% of the default
# Governors that hold clocks low or fixed; "powersave" is the normal dynamic mode under P-state drivers.
SLOW_GOVERNORS = ("powersave", "conservative", "userspace")
PSTATE_DRIVERS = ("intel_pstate", "amd-pstate-epp", "amd-pstate")
CPUFREQ_DIR = "/sys/devices/system/cpu/cpu0/cpufreq"


def _guard(errors: dict[str, str], name: str, read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception as error:  # psutil.AccessDenied, NVMLError_NotSupported, OSError, ...
        errors[name] = f"{type(error).__name__}: {error}"
        return None


def _read_sysfs(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:  # no cpufreq in most VMs and containers
        return None


def _times_split(times: Any) -> tuple[float, float, float]:
    """(total, busy, steal) core-seconds of a psutil ``cpu_times()`` result (see module doc)."""
    fields = times._asdict()
    total = sum(v for k, v in fields.items() if k not in ("guest", "guest_nice"))
    idle = fields.get("idle", 0.0) + fields.get("iowait", 0.0)
    steal = fields.get("steal", 0.0)
    return total, total - idle - steal, steal


def _cpu_seconds_with_reaped(times: Any) -> float:
    """user + system of a psutil ``cpu_times()`` result, plus those of the children the process reaped."""
    return times.user + times.system + getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0)


def tree_cpu_seconds(process: Any) -> float:
    """CPU seconds of ``process`` and its live descendants, each with the children it reaped (see module doc):
    a child that is alive counts once, by itself; once reaped, in its parent's ``children_*`` times."""
    seconds = _cpu_seconds_with_reaped(process.cpu_times())
    for child in process.children(recursive=True):
        try:
            seconds += _cpu_seconds_with_reaped(child.cpu_times())
        except Exception:  # the child ended between listing and reading
            continue
    return seconds


def _tree_pids(process: Any) -> set[int]:
    """The pids of ``process`` and its live descendants, and this process's (always ours)."""
    pids = {os.getpid()}
    try:
        pids.add(int(process.pid))
        pids |= {int(child.pid) for child in process.children(recursive=True)}
    except Exception:  # psutil.NoSuchProcess, AccessDenied: what was read still counts
        pass
    return pids


class CpuHealthProbe:
    """Context manager: the host's health over the ``with`` block.

    After exit, ``result`` holds (None where unreadable): ``window_s`` (s), ``logical_cores``,
    ``other_cpu_fraction`` / ``steal_fraction`` / ``own_cpu_fraction`` (fractions of the cores' time,
    see module doc), ``load_avg_1m_before`` / ``load_avg_1m_after``, ``cpu_freq_mhz`` and
    ``cpu_freq_max_mhz`` (MHz), ``cpu_governor`` and ``cpu_freq_driver`` (sysfs), ``mem_available_fraction``
    (lowest of entry and exit), ``swap_in_bytes`` (bytes swapped in during the window), and of the thread that
    entered the probe (module doc): ``thread_involuntary_switches`` and ``thread_migrations`` over the window,
    ``thread_cpu_before`` / ``thread_cpu_after``, ``host_speed_before_ns`` / ``host_speed_after_ns``; ``errors``.

    Args:
        psutil_module: psutil or a stand-in with the same functions (tests).
        process: the root of the process tree that is "us" (a psutil process); None: this process.
        cpufreq_dir: where ``scaling_governor`` and ``scaling_driver`` are read.
    """

    def __init__(self, psutil_module: Any = psutil, process: Any | None = None,
                 cpufreq_dir: str = CPUFREQ_DIR) -> None:
        self.psutil = psutil_module
        self.process = process
        self.cpufreq_dir = cpufreq_dir
        self.errors: dict[str, str] = {}
        self.result: dict[str, Any] = {}
        self._start: dict[str, Any] = {}

    def _snapshot(self) -> dict[str, Any]:
        ps, errors = self.psutil, self.errors
        if self.process is None:
            self.process = _guard(errors, "process", ps.Process)
        memory = _guard(errors, "virtual_memory", ps.virtual_memory)
        return {
            "t": time.perf_counter(),
            "host_speed_ns": _guard(errors, "host_speed", host_thread.host_speed_ns),
            "switches": _guard(errors, "thread_rusage", host_thread.involuntary_switches),
            "migrations": _guard(errors, "thread_sched", host_thread.migrations),
            "thread_cpu": _guard(errors, "thread_stat", host_thread.last_cpu),
            "times": _guard(errors, "cpu_times", lambda: _times_split(ps.cpu_times())),
            "own": _guard(errors, "own_cpu_times", lambda: tree_cpu_seconds(self.process)),
            "load": _guard(errors, "load_average", lambda: ps.getloadavg()[0]),
            "available": memory.available / memory.total if memory is not None and memory.total else None,
            "swap_in": _guard(errors, "swap_memory", lambda: ps.swap_memory().sin),
        }

    def __enter__(self) -> CpuHealthProbe:
        self._start = self._snapshot()
        return self

    def our_pids(self) -> set[int]:
        """The pids that are "us" now: the root process, its live descendants and this process (for
        :func:`~hwregress.hardware.gpu_health.gpu_health`: the job's processes on the GPU are not contention)."""
        if self.process is None:
            self.process = _guard(self.errors, "process", self.psutil.Process)
        return _tree_pids(self.process) if self.process is not None else {os.getpid()}

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        end = self._snapshot()
        self.result = {"window_s": end["t"] - self._start["t"],
                       "logical_cores": _guard(self.errors, "cpu_count", self.psutil.cpu_count),
                       **self._cpu_shares(self._start, end), **self._frequency(),
                       "load_avg_1m_before": self._start["load"], "load_avg_1m_after": end["load"],
                       "mem_available_fraction": _lowest(self._start["available"], end["available"]),
                       "swap_in_bytes": _delta(self._start["swap_in"], end["swap_in"]),
                       "thread_involuntary_switches": _delta(self._start["switches"], end["switches"]),
                       "thread_migrations": _delta(self._start["migrations"], end["migrations"]),
                       "thread_cpu_before": self._start["thread_cpu"], "thread_cpu_after": end["thread_cpu"],
                       "host_speed_before_ns": self._start["host_speed_ns"],
                       "host_speed_after_ns": end["host_speed_ns"],
                       "errors": dict(self.errors)}

    @staticmethod
    def _cpu_shares(start: Mapping[str, Any], end: Mapping[str, Any]) -> dict[str, float | None]:
        shares: dict[str, float | None] = dict.fromkeys(("other_cpu_fraction", "steal_fraction", "own_cpu_fraction"))
        if start["times"] is None or end["times"] is None:
            return shares
        total, busy, steal = (b - a for a, b in zip(start["times"], end["times"], strict=True))
        if total <= 0:
            return shares  # window shorter than the kernel's accounting tick
        own = _delta(start["own"], end["own"])
        shares["steal_fraction"] = min(max(steal / total, 0.0), 1.0)
        if own is not None:
            shares["own_cpu_fraction"] = min(max(own / total, 0.0), 1.0)
            shares["other_cpu_fraction"] = min(max((busy - own) / total, 0.0), 1.0)
        return shares

    def _frequency(self) -> dict[str, Any]:
        frequency = _guard(self.errors, "cpu_freq", self.psutil.cpu_freq)
        current = getattr(frequency, "current", None) or None
        maximum = getattr(frequency, "max", None) or None  # 0 where the VM does not expose it
        return {"cpu_freq_mhz": current, "cpu_freq_max_mhz": maximum,
                "cpu_governor": _read_sysfs(os.path.join(self.cpufreq_dir, "scaling_governor")),
                "cpu_freq_driver": _read_sysfs(os.path.join(self.cpufreq_dir, "scaling_driver"))}


def _delta(start: float | None, end: float | None) -> float | None:
    return end - start if start is not None and end is not None else None


def _lowest(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def findings(health: Mapping[str, Any]) -> list[str]:
    """Plain sentences for what is abnormal in a :class:`CpuHealthProbe` result, a
    :func:`~hwregress.hardware.gpu_health.gpu_health` dict, or both merged: :func:`contention_findings` first, then
    :func:`state_findings`. Empty when nothing is abnormal or nothing was readable. Thresholds: the module's
    ``*_LIMIT`` constants."""
    return contention_findings(health) + state_findings(health)


def contention_findings(health: Mapping[str, Any]) -> list[str]:
    """Sentences for other work sharing the machine: CPU time used by other processes (>
    ``OTHER_CPU_LIMIT``), other GPU compute processes, hypervisor steal (> ``STEAL_LIMIT``), a load
    average above ``LOAD_PER_CORE_LIMIT`` x the cores before the window."""
    return [*_cpu_contention(health), *_gpu_contention(health), *_steal(health), *_load(health)]


def state_findings(health: Mapping[str, Any]) -> list[str]:
    """Sentences for a machine in a degraded state: GPU memory faults, a lowered power limit, a GPU near
    its slowdown temperature, a PCIe link below its maximum, low CPU clocks or a slow governor, memory
    pressure or swapping, persistence mode off."""
    sentences: list[str] = []
    for rule in (_gpu_memory_faults, _gpu_power_limit, _gpu_temperature, _gpu_pcie, _cpu_frequency,
                 _memory_pressure, _persistence):
        sentences += rule(health)
    return sentences


def _cpu_contention(h: Mapping[str, Any]) -> list[str]:
    other = h.get("other_cpu_fraction")
    if other is None or other <= OTHER_CPU_LIMIT:
        return []
    cores = h.get("logical_cores")
    on = f"the {cores} cores'" if cores else "the cores'"
    return [f"CPU contention: other processes used {other:.0%} of {on} time during the window "
            f"(more than {OTHER_CPU_LIMIT:.0%} means the measurement shared the machine)"]


def _gpu_contention(h: Mapping[str, Any]) -> list[str]:
    return [*_gpu_compute_contention(h), *_mps_contention(h)]


def _pid_list(processes: list[Mapping[str, Any]]) -> str:
    return ", ".join(str(p["pid"]) for p in processes[:5])


def _gpu_compute_contention(h: Mapping[str, Any]) -> list[str]:
    others = h.get("gpu_other_processes")
    if not others:
        return []
    pids = _pid_list(others)
    if h.get("gpu_pids_comparable") is False:
        return [f"{len(others)} compute processes on the GPU (pids {pids}, from another pid namespace: this "
                "process may be one of them); more than one means the GPU was shared"] if len(others) > 1 else []
    return [f"another compute process on the GPU during the window (pids {pids})"]


def _mps_contention(h: Mapping[str, Any]) -> list[str]:
    others = h.get("gpu_mps_other_processes")
    if not others or h.get("gpu_pids_comparable") is False:
        return []
    return [f"another MPS client on the GPU during the window (pids {_pid_list(others)}): its kernels ran "
            "beside ours through the shared MPS context"]


def _steal(h: Mapping[str, Any]) -> list[str]:
    steal = h.get("steal_fraction")
    if steal is None or steal <= STEAL_LIMIT:
        return []
    return [f"the hypervisor took {steal:.0%} of the cores' time for other VMs (steal; limit {STEAL_LIMIT:.0%})"]


def _load(h: Mapping[str, Any]) -> list[str]:
    load, cores = h.get("load_avg_1m_before"), h.get("logical_cores")
    if load is None or not cores or load <= LOAD_PER_CORE_LIMIT * cores:
        return []
    return [f"the machine was busy before the window: 1-min load average {load:.1f} on {cores} cores "
            f"(limit {LOAD_PER_CORE_LIMIT:g} per core)"]


def _gpu_memory_faults(h: Mapping[str, Any]) -> list[str]:
    found = []
    if h.get("row_remap_failure"):
        found.append("GPU memory row remapping failed: the GPU needs service (NVML remapped rows)")
    if h.get("row_remap_pending") or h.get("retired_pages_pending"):
        found.append("GPU memory rows are waiting to be remapped or retired: reset the GPU (NVML pending status)")
    if h.get("ecc_uncorrected_volatile"):
        found.append(f"{h['ecc_uncorrected_volatile']} uncorrected ECC errors since the driver loaded")
    return found


def _gpu_power_limit(h: Mapping[str, Any]) -> list[str]:
    enforced, default = h.get("power_limit_enforced_w"), h.get("power_limit_default_w")
    if enforced is None or not default or enforced >= POWER_LIMIT_SLACK * default:
        return []
    return [f"GPU power limit lowered: {enforced:.0f} W enforced vs {default:.0f} W default"]


def _gpu_temperature(h: Mapping[str, Any]) -> list[str]:
    temperature, slowdown = h.get("temperature_c"), h.get("temperature_slowdown_c")
    if temperature is None or slowdown is None or temperature < slowdown - TEMPERATURE_MARGIN_C:
        return []
    return [f"GPU at {temperature} C, within {TEMPERATURE_MARGIN_C} C of its slowdown temperature {slowdown} C"]


def _gpu_pcie(h: Mapping[str, Any]) -> list[str]:
    found = []
    for what, now, best in (("generation", "pcie_gen", "pcie_max_gen"), ("width", "pcie_width", "pcie_max_width")):
        if h.get(now) is not None and h.get(best) is not None and h[now] < h[best]:
            unit = "x" if what == "width" else "gen "
            found.append(f"PCIe link {what} {unit}{h[now]} below its maximum {unit}{h[best]} "
                         "(read under load: links train down at idle)")
    return found


def _cpu_frequency(h: Mapping[str, Any]) -> list[str]:
    found = []
    current, maximum = h.get("cpu_freq_mhz"), h.get("cpu_freq_max_mhz")
    if current and maximum and current < FREQUENCY_LIMIT * maximum:
        found.append(f"CPU clock {current:.0f} MHz is {current / maximum:.0%} of its maximum {maximum:.0f} MHz "
                     f"(limit {FREQUENCY_LIMIT:.0%})")
    governor, driver = h.get("cpu_governor"), h.get("cpu_freq_driver")
    if governor in SLOW_GOVERNORS and not (governor == "powersave" and driver in PSTATE_DRIVERS):
        found.append(f"CPU frequency governor is {governor!r} (driver {driver}): clocks may stay low; "
                     "use 'performance' or 'schedutil'")
    return found


def _memory_pressure(h: Mapping[str, Any]) -> list[str]:
    found = []
    available, swapped = h.get("mem_available_fraction"), h.get("swap_in_bytes")
    if available is not None and available < MEMORY_AVAILABLE_LIMIT:
        found.append(f"memory pressure: only {available:.0%} of RAM available (limit {MEMORY_AVAILABLE_LIMIT:.0%})")
    if swapped is not None and swapped > SWAP_IN_LIMIT_BYTES:
        found.append(f"{swapped / 2**20:.0f} MiB swapped in during the window")
    return found


def _persistence(h: Mapping[str, Any]) -> list[str]:
    if h.get("persistence_mode") is False:
        return ["GPU persistence mode is off: the driver may tear down state between runs "
                "(nvidia-smi -pm 1)"]
    return []

"""A GPU's state from NVML at the end of a window (:func:`gpu_health`): compute processes and MPS clients, ours and
others, persistence mode, pending page retirement and row remapping, uncorrected ECC errors, power limits, PCIe
link and temperature. Split from :mod:`hwregress.hardware.health`, which holds the CPU probe and turns both into
findings (:func:`hwregress.hardware.health.findings`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import psutil

from hwregress.hardware.health import _guard, _tree_pids

MPS_SERVER_NAME = "nvidia-cuda-mps-server"  # NVIDIA's MPS documentation: the server the control daemon starts


def _our_pids(psutil_module: Any) -> set[int]:
    try:
        return _tree_pids(psutil_module.Process())
    except Exception:  # psutil missing or access denied: our own pid still counts
        return {os.getpid()}


def _listed(processes: Any) -> list[dict[str, Any]]:
    return [{"pid": int(p.pid), "used_memory_bytes": getattr(p, "usedGpuMemory", None)} for p in processes]


def _is_mps_server(pid: int) -> bool:
    try:
        return psutil.Process(pid).name() == MPS_SERVER_NAME
    except Exception:  # gone, another pid namespace, access denied
        return False


def _gpu_processes(nvml: Any, handle: Any, errors: dict[str, str], ours: set[int]) -> dict[str, Any]:
    """Compute processes and MPS clients on the GPU, ours and others (see :func:`gpu_health`)."""
    mps = _guard(errors, "mps_processes", lambda: _listed(nvml.nvmlDeviceGetMPSComputeRunningProcesses(handle)))
    found: dict[str, Any] = {"gpu_mps_processes": mps, "gpu_mps_active": bool(mps) if mps is not None else None,
                             "gpu_mps_other_processes": [p for p in mps if p["pid"] not in ours] if mps is not None
                             else None, "gpu_mps_server_pids": []}
    running = _guard(errors, "compute_processes", lambda: _listed(nvml.nvmlDeviceGetComputeRunningProcesses(handle)))
    if running is None:
        return {**found, "gpu_other_processes": None, "gpu_pids_comparable": None}
    # under MPS the compute list names the MPS server, which holds the clients' shared context: not a stranger
    servers = [p["pid"] for p in running if mps and p["pid"] not in ours and _is_mps_server(p["pid"])]
    clients = [p["pid"] for p in mps or []]
    comparable = any(pid in ours for pid in [p["pid"] for p in running] + clients) or not (running or clients)
    return {**found, "gpu_mps_server_pids": servers, "gpu_pids_comparable": comparable,
            "gpu_other_processes": [p for p in running if p["pid"] not in ours and p["pid"] not in servers]}


def _gpu_reads(nvml: Any, handle: Any) -> dict[str, Callable[[], Any]]:
    n, h = nvml, handle
    return {
        "persistence_mode": lambda: n.nvmlDeviceGetPersistenceMode(h) == n.NVML_FEATURE_ENABLED,
        "retired_pages_pending": lambda: n.nvmlDeviceGetRetiredPagesPendingStatus(h) == n.NVML_FEATURE_ENABLED,
        "row_remap_pending": lambda: bool(n.nvmlDeviceGetRemappedRows(h)[2]),
        "row_remap_failure": lambda: bool(n.nvmlDeviceGetRemappedRows(h)[3]),
        "ecc_uncorrected_volatile": lambda: int(n.nvmlDeviceGetTotalEccErrors(
            h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC)),
        "power_limit_enforced_w": lambda: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
        "power_limit_default_w": lambda: n.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0,
        "pcie_gen": lambda: int(n.nvmlDeviceGetCurrPcieLinkGeneration(h)),
        "pcie_max_gen": lambda: int(n.nvmlDeviceGetMaxPcieLinkGeneration(h)),
        "pcie_width": lambda: int(n.nvmlDeviceGetCurrPcieLinkWidth(h)),
        "pcie_max_width": lambda: int(n.nvmlDeviceGetMaxPcieLinkWidth(h)),
        "temperature_c": lambda: int(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
        "temperature_slowdown_c": lambda: int(n.nvmlDeviceGetTemperatureThreshold(
            h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)),
    }


def gpu_health(handle: Any, nvml: Any, our_pids: set[int] | None = None) -> dict[str, Any]:
    """A GPU's state from NVML; never raises (a failed read leaves its field None, its error in ``errors``).

    Read it while the measured work runs: PCIe links train down to gen 1 at idle to save power.

    Args:
        handle: the NVML device handle (a MIG device handle: that instance's processes).
        nvml: the ``pynvml`` module, initialised, or a stand-in (tests).
        our_pids: pids that are "us" (a job's: :meth:`CpuHealthProbe.our_pids`); None: this process and its
            descendants.

    Returns:
        ``gpu_other_processes`` (compute processes not ours, the MPS server excepted: list of ``{"pid",
        "used_memory_bytes"}``), ``gpu_pids_comparable`` (False when NVML lists pids of another pid namespace,
        so ours cannot be told apart), ``gpu_mps_processes`` (the MPS clients NVML lists, ours included; None
        where this pynvml or driver has no MPS query), ``gpu_mps_other_processes`` (MPS clients not ours),
        ``gpu_mps_active`` (any MPS client listed), ``gpu_mps_server_pids`` (compute processes named
        ``nvidia-cuda-mps-server`` while MPS clients are listed),
        ``persistence_mode``, ``retired_pages_pending``, ``row_remap_pending``, ``row_remap_failure``
        (bool), ``ecc_uncorrected_volatile`` (count since driver load), ``power_limit_enforced_w`` /
        ``power_limit_default_w`` (W), ``pcie_gen`` / ``pcie_max_gen`` / ``pcie_width`` /
        ``pcie_max_width``, ``temperature_c`` / ``temperature_slowdown_c`` (deg C), ``errors``.
    """
    errors: dict[str, str] = {}
    ours = _our_pids(psutil) if our_pids is None else our_pids
    health = _gpu_processes(nvml, handle, errors, ours)
    for name, read in _gpu_reads(nvml, handle).items():
        health[name] = _guard(errors, name, read)
    health["errors"] = errors
    return health

"""What tells machines apart: a flat identity of the CPU and of each GPU, and what changed between two.

A hardware key is a name, not an identity: two machines of one name can run the same tests 2x apart
(docs/measured.md, 'Machine identity'). A :data:`HardwareIdentity` is a flat ``dict`` of facts (str, int, float,
bool or None where unreadable) stored beside a baseline and checked before judging against it.

CPU sources, in order, each field taken from the first that knows it: ``/proc/cpuinfo`` (Linux: vendor,
brand, family/model/stepping, ISA flags), ``lscpu`` (L2/L3 sizes, max MHz), then py-cpuinfo
(``cpuinfo.get_cpu_info()``, macOS/Windows and whatever Linux left unknown). py-cpuinfo comes last
because its ``l3_cache_size`` can be /proc's per-core "cache size" rather than the L3's, and it runs CPUID in a
child process, a second per process (docs/measured.md, 'Machine identity'); identities compared across Linux
machines must come from the same source.

GPU fields come from ``torch.cuda.get_device_properties`` and NVML (NVIDIA NVML API Reference Guide,
"Device Queries"); every NVML read is guarded on its own: an error gives None for that field.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from hwregress.hardware.facts import CPU_PERFORMANCE_FIELDS, GPU_PERFORMANCE_FIELDS, ISA_FEATURES, slugify
from hwregress.hardware.nvml import nvml_uuid, pci_bus_id

HardwareIdentity = dict[str, str | int | float | bool | None]


_PROC_KEYS = {"vendor_id": "cpu_vendor", "model name": "cpu_brand", "cpu family": "cpu_family",
              "model": "cpu_model", "stepping": "cpu_stepping"}
_LSCPU_SIZE = re.compile(r"([\d.]+)\s*([KMG]?)(?:i?B)?", re.IGNORECASE)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def _normal_flag(name: str) -> str:
    return name.lower().replace("_", "").replace(".", "")


def _flag_fields(flags: set[str]) -> HardwareIdentity:
    normal = {_normal_flag(f) for f in flags}
    return {f"cpu_{feature}": _normal_flag(feature) in normal for feature in ISA_FEATURES}


def parse_proc_cpuinfo(text: str) -> HardwareIdentity:
    """Vendor, brand, family/model/stepping and ISA feature flags from the first processor block of
    ``/proc/cpuinfo`` text (x86 ``flags`` or Arm ``Features``); fields it lacks are left out."""
    found: HardwareIdentity = {}
    flags: set[str] | None = None
    for line in text.splitlines():
        if not line.strip():
            if found or flags is not None:
                break  # end of the first processor block
            continue
        key, _, value = (part.strip() for part in line.partition(":"))
        key = key.lower()
        if key in _PROC_KEYS and _PROC_KEYS[key] not in found:
            found[_PROC_KEYS[key]] = int(value) if value.isdigit() else value
        elif key in ("flags", "features"):
            flags = set(value.split())
    if flags is not None:
        found.update(_flag_fields(flags))
    return found


def _size_bytes(text: str) -> int | None:
    match = _LSCPU_SIZE.match(text.strip())
    if match is None:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def parse_lscpu(text: str) -> HardwareIdentity:
    """L2/L3 cache sizes (bytes, as lscpu reports them: the total over instances when it says so) and
    the maximum clock (MHz) from ``lscpu`` output; fields it lacks are left out."""
    found: HardwareIdentity = {}
    for line in text.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        key = key.lower()
        if key in ("l2 cache", "l2"):
            found["cpu_l2_cache_bytes"] = _size_bytes(value)
        elif key in ("l3 cache", "l3"):
            found["cpu_l3_cache_bytes"] = _size_bytes(value)
        elif key == "cpu max mhz":
            try:
                found["cpu_max_mhz"] = float(value)
            except ValueError:
                pass
    return {k: v for k, v in found.items() if v is not None}


def from_py_cpuinfo(info: Mapping[str, Any]) -> HardwareIdentity:
    """The identity fields of a ``cpuinfo.get_cpu_info()`` dict; fields it lacks are left out."""
    pairs = {"cpu_vendor": info.get("vendor_id_raw"), "cpu_brand": info.get("brand_raw"),
             "cpu_family": info.get("family"), "cpu_model": info.get("model"),
             "cpu_stepping": info.get("stepping"), "cpu_l2_cache_bytes": info.get("l2_cache_size"),
             "cpu_l3_cache_bytes": info.get("l3_cache_size")}
    found: HardwareIdentity = {k: v for k, v in pairs.items() if isinstance(v, (int, str)) and v != ""}
    if info.get("flags"):
        found.update(_flag_fields(set(info["flags"])))
    return found


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _run_lscpu() -> str:
    try:
        return subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=False,
                              env={**os.environ, "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _py_cpuinfo() -> dict[str, Any]:
    try:
        import cpuinfo

        return dict(cpuinfo.get_cpu_info())
    except Exception:  # py-cpuinfo missing, or its CPUID child failed: the other sources stand
        return {}


def _host_facts() -> HardwareIdentity:
    facts: HardwareIdentity = {}
    try:
        import psutil

        facts["cpu_physical_cores"] = psutil.cpu_count(logical=False)
        facts["cpu_logical_cores"] = psutil.cpu_count(logical=True)
        facts["memory_gib"] = round(psutil.virtual_memory().total / 2**30)
    except Exception:  # psutil missing or /proc unreadable
        pass
    try:
        import torch

        facts["torch_threads"] = torch.get_num_threads()
    except Exception:
        pass
    return facts


def cpu_identity(proc_cpuinfo: str | None = None, lscpu: str | None = None,
                 py_cpuinfo: Callable[[], Mapping[str, Any]] | None = None) -> HardwareIdentity:
    """The identity of this machine's CPU; never raises (unreadable fields are None).

    Args:
        proc_cpuinfo: ``/proc/cpuinfo`` text; None reads the file ("" where absent).
        lscpu: ``lscpu`` output; None runs it.
        py_cpuinfo: returns a ``cpuinfo.get_cpu_info()`` dict; called only when a field is still unknown.

    Returns:
        ``cpu_vendor``, ``cpu_brand``, ``cpu_family``, ``cpu_model``, ``cpu_stepping``,
        ``cpu_physical_cores``, ``cpu_logical_cores``, ``torch_threads``, ``cpu_l2_cache_bytes``,
        ``cpu_l3_cache_bytes`` (bytes), ``cpu_max_mhz``, ``cpu_<feature>`` for each of
        :data:`ISA_FEATURES` (bool), ``memory_gib`` (host RAM, rounded GiB).
    """
    identity: HardwareIdentity = dict.fromkeys(CPU_PERFORMANCE_FIELDS)
    identity["memory_gib"] = None
    _fill(identity, _host_facts)
    _fill(identity, lambda: parse_proc_cpuinfo(_read_text("/proc/cpuinfo") if proc_cpuinfo is None else proc_cpuinfo))
    _fill(identity, lambda: parse_lscpu(_run_lscpu() if lscpu is None else lscpu))
    if any(identity[k] is None for k in _PY_CPUINFO_FIELDS):
        _fill(identity, lambda: from_py_cpuinfo((py_cpuinfo or _py_cpuinfo)()))
    return identity


# what py-cpuinfo knows better than nothing; its absence alone is worth its ~1 s
_PY_CPUINFO_FIELDS = ("cpu_vendor", "cpu_brand", "cpu_family", "cpu_model", "cpu_avx2", "cpu_asimd")


def _fill(identity: HardwareIdentity, source: Callable[[], HardwareIdentity]) -> None:
    """Set the fields of ``identity`` that are None from ``source``; a failing source changes nothing."""
    try:
        found = source()
    except Exception:  # a malformed or unreadable source must not cost the others
        return
    for key, value in found.items():
        if identity.get(key) is None and value is not None:
            identity[key] = value


def this_cpu_identity() -> HardwareIdentity:
    """:func:`cpu_identity` of this machine, read once per process (a fresh dict each call)."""
    return device_identity("cpu")


def _nvml_reads(nvml: Any, handle: Any) -> dict[str, Callable[[], Any]]:
    """Field -> NVML read, in NVML's units converted to the field's (mW -> W)."""
    n, h = nvml, handle
    return {
        "gpu_power_limit_default_w": lambda: n.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0,
        "gpu_power_limit_enforced_w": lambda: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
        "gpu_max_sm_clock_mhz": lambda: int(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)),
        "gpu_max_mem_clock_mhz": lambda: int(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_MEM)),
        "gpu_mig_mode": lambda: bool(n.nvmlDeviceGetMigMode(h)[0]),  # (current, pending)
        "gpu_pcie_max_gen": lambda: int(n.nvmlDeviceGetMaxPcieLinkGeneration(h)),
        "gpu_pcie_max_width": lambda: int(n.nvmlDeviceGetMaxPcieLinkWidth(h)),
        "gpu_ecc_mode": lambda: bool(n.nvmlDeviceGetEccMode(h)[0]),  # (current, pending)
        "gpu_name": lambda: _text(n.nvmlDeviceGetName(h)),
        "gpu_memory_bytes": lambda: int(n.nvmlDeviceGetMemoryInfo(h).total),
        "gpu_uuid": lambda: _text(n.nvmlDeviceGetUUID(h)),
    }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _guarded(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:  # NVMLError_NotSupported (MIG, ECC on consumer GPUs), NoPermission, GpuIsLost...
        return None


def _torch_props(index: int) -> Any:
    try:
        import torch

        return torch.cuda.get_device_properties(index) if torch.cuda.is_available() else None
    except Exception:  # no CUDA build, no device at that index
        return None


def _handle(nvml: Any, props: Any) -> Any:
    """NVML handle by PCI bus id, then UUID, never by index (NVML's indices ignore
    CUDA_VISIBLE_DEVICES: see :mod:`hwregress.hardware.telemetry`); None when neither matches."""
    for key, find in ((pci_bus_id(props), "nvmlDeviceGetHandleByPciBusId"),
                      (nvml_uuid(props), "nvmlDeviceGetHandleByUUID")):
        if key is not None:
            handle = _guarded(lambda key=key, find=find: getattr(nvml, find)(key))
            if handle is not None:
                return handle
    return None


def gpu_identity(index: int, nvml: Any | None, props: Any | None = None,
                 handle: Any | None = None) -> HardwareIdentity:
    """The identity of CUDA device ``index``; never raises (unreadable fields are None).

    Args:
        index: the torch CUDA device index.
        nvml: the ``pynvml`` module, already initialised (``nvmlInit``), or None without NVML.
        props: ``torch.cuda.get_device_properties(index)``; None reads it (None without CUDA).
        handle: the device's NVML handle; None looks it up from ``props`` (PCI bus id, then UUID).

    Returns:
        ``gpu_name``, ``gpu_memory_bytes`` (bytes), ``gpu_sm_count``, ``gpu_compute_capability``
        (``"9.0"``) from torch, NVML filling the name and memory where torch cannot;
        ``gpu_power_limit_default_w`` / ``gpu_power_limit_enforced_w`` (W), ``gpu_max_sm_clock_mhz`` /
        ``gpu_max_mem_clock_mhz`` (MHz), ``gpu_mig_mode`` / ``gpu_ecc_mode`` (bool, current mode),
        ``gpu_pcie_max_gen`` / ``gpu_pcie_max_width``, ``gpu_uuid`` from NVML.
    """
    props = _torch_props(index) if props is None else props
    identity: HardwareIdentity = dict.fromkeys((*GPU_PERFORMANCE_FIELDS, "gpu_uuid"))
    if props is not None:
        identity.update({
            "gpu_name": _guarded(lambda: str(props.name)),
            "gpu_memory_bytes": _guarded(lambda: int(props.total_memory)),
            "gpu_sm_count": _guarded(lambda: int(props.multi_processor_count)),
            "gpu_compute_capability": _guarded(lambda: f"{props.major}.{props.minor}"),
        })
    if handle is None and nvml is not None and props is not None:
        handle = _handle(nvml, props)
    if handle is not None:
        for field, read in _nvml_reads(nvml, handle).items():
            if identity.get(field) is None:
                identity[field] = _guarded(read)
    return identity


# A brand is specific when it carries a model number ("EPYC 7B13", "Xeon Platinum 8480+", "i9-13900K"):
# a token with a digit that is not a clock ("2.20GHz") or a core count ("64-Core").
_MODEL_NUMBER = re.compile(r"^(?!.*(?:[gm]hz|-core)$)(?=.*\d)[\w+-]+$", re.IGNORECASE)


def is_ambiguous_name(brand: str | None) -> bool:
    """True when ``brand`` names a family but no model ("AMD EPYC", "Intel Xeon Processor")."""
    if not brand:
        return True
    return not any(_MODEL_NUMBER.match(token) for token in re.split(r"[\s()@]+", brand) if token)


def key_suffix(identity: Mapping[str, Any]) -> str:
    """A short readable disambiguator for a CPU whose brand alone is ambiguous, else ``""``.

    ``{"cpu_brand": "AMD EPYC", "cpu_family": 25, "cpu_model": 1}`` -> ``"f25m1"``; family and model
    both, since Intel reports family 6 for every core since 2006 and AMD's family 25 spans Zen 3
    (model 1) and Zen 4 (model 17). ``""`` for a specific brand, for a GPU identity, or when the family
    is unknown. See :func:`cpu_hardware_key` for a whole key.
    """
    if "cpu_brand" not in identity or not is_ambiguous_name(identity.get("cpu_brand")):
        return ""
    family, model = identity.get("cpu_family"), identity.get("cpu_model")
    if family is None:
        return ""
    return f"f{family}" + (f"m{model}" if model is not None else "")


def cpu_hardware_key(identity: Mapping[str, Any]) -> str:
    """``"amd-epyc-f25m1-2t"``: the brand, :func:`key_suffix` where the brand is ambiguous, and torch's
    thread count (the key scheme of :func:`hwregress.hardware.devices.describe`, disambiguated)."""
    parts = [slugify(str(identity.get("cpu_brand") or "unknown-cpu")), key_suffix(identity)]
    threads = identity.get("torch_threads")
    if threads is not None:
        parts.append(f"{threads}t")
    return "-".join(p for p in parts if p)


def device_identity(spec: str) -> HardwareIdentity:
    """The identity of the device a test runs on, read once per process: the host CPU's for ``cpu`` and
    ``mps``, the GPU's (:func:`gpu_identity`, NVML when it loads) and its host's CPU brand and logical cores for
    ``cuda:N``. Never raises."""
    return dict(_cached_device_identity(spec))


@functools.cache
def _cached_device_identity(spec: str) -> tuple[tuple[str, Any], ...]:
    if not spec.startswith("cuda"):
        return tuple(cpu_identity().items())
    index = int(spec.partition(":")[2] or 0)
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no library: the torch half of the identity still counts
        return tuple({**gpu_identity(index, None), **_gpu_host()}.items())
    try:
        return tuple({**gpu_identity(index, pynvml), **_gpu_host()}.items())
    finally:
        _guarded(pynvml.nvmlShutdown)


def _gpu_host() -> HardwareIdentity:
    """The host of a GPU, as far as a launch-bound GPU test depends on it: ``host_cpu_brand``,
    ``host_logical_cores`` (:data:`hwregress.hardware.facts.UNIT_FIELDS`: told, not compared)."""
    host = cpu_identity()
    return {"host_cpu_brand": host.get("cpu_brand"), "host_logical_cores": host.get("cpu_logical_cores")}

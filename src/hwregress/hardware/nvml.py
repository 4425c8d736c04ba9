"""The NVML bindings: the NVML handle of one CUDA device, found by PCI bus id or UUID (never by index), and
its guarded queries; the device's PCI address and UUID in NVML's formats from torch's device properties.

NVML units: utilization in %, memory in bytes, power in mW, total energy in mJ, temperature in deg C, clocks in
MHz (power averaged over 1 s on Ampere and newer: :func:`power_averaging_s`). Reference: NVIDIA NVML API
Reference Guide, "Device Queries". ``pynvml`` (package nvidia-ml-py) and torch are
imported when a handle is opened, so the helpers here load without either.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from hwregress.hardware.facts import MIG_UUID_PREFIX, POWER_AVERAGING_S
from hwregress.hardware.gpu_health import gpu_health


class NvmlLookupError(RuntimeError):
    """No NVML handle matches the CUDA device by MIG UUID, PCI bus id or UUID; the message lists each attempt."""


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


def mig_uuid(index: int, props: Any, visible_devices: str | None = None) -> str | None:
    """The MIG UUID (``"MIG-<uuid>"``, NVML's spelling) of CUDA device ``index`` when it is a MIG instance, else None.

    From ``CUDA_VISIBLE_DEVICES`` (``visible_devices``; None reads the environment) when it lists MIG UUIDs (CUDA
    numbers the listed devices in order), else from torch's properties: a UUID already spelled ``MIG-...``, or
    the device's UUID when its name says MIG (CUDA names an instance ``"<GPU> MIG 1g.10gb"``; its UUID is then
    the instance's: cuDeviceGetUuid_v2, "If the device is in MIG mode, returns its MIG UUID", CUDA Driver API).
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "") if visible_devices is None else visible_devices
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    if index < len(entries) and all(e.startswith(MIG_UUID_PREFIX) for e in entries[:index + 1]):
        return entries[index]
    uuid = str(getattr(props, "uuid", None) or "")
    if uuid.startswith(MIG_UUID_PREFIX):
        return uuid
    if uuid and "MIG" in str(getattr(props, "name", "")).split():
        return MIG_UUID_PREFIX + uuid.removeprefix("GPU-")
    return None


def power_averaging_s(nvml: Any, handle: Any) -> float:
    """Seconds over which ``nvmlDeviceGetPowerUsage`` averages on this device: 0 (instantaneous) before Ampere,
    ``POWER_AVERAGING_S`` from Ampere on and wherever the architecture cannot be read (a MIG device handle, an
    old driver), where assuming the average only loosens what a reading is held to ("On Ampere (except GA100)
    or newer GPUs, the API returns power averaged over 1 sec interval", nvmlDeviceGetPowerUsage)."""
    try:
        architecture = int(nvml.nvmlDeviceGetArchitecture(handle))
        ampere = int(nvml.NVML_DEVICE_ARCH_AMPERE)
    except Exception:  # NVMLError_NotSupported, a pynvml without the query
        return POWER_AVERAGING_S
    unknown = int(getattr(nvml, "NVML_DEVICE_ARCH_UNKNOWN", 0xFFFFFFFF))
    return 0.0 if architecture < ampere and architecture != unknown else POWER_AVERAGING_S


class NvmlDevice:
    """The NVML handle of one CUDA device and guarded queries.

    The handle is looked up by PCI bus id, then by UUID, never by index: NVML numbers every GPU of the
    machine while CUDA numbers only those in ``CUDA_VISIBLE_DEVICES``, so NVML index 1 can be another
    GPU than ``cuda:1``, and its telemetry would be another GPU's, silently. A MIG instance (:func:`mig_uuid`)
    is looked up by its MIG UUID first (``nvmlDeviceGetHandleByUUID`` accepts "the UUID of the target GPU or
    MIG instance"), then among the MIG devices of the GPU at its PCI address (its bus id is the whole GPU's),
    and only then as the whole GPU, which ``lookup`` then says.

    Attributes:
        handle: the NVML device handle; ``lookup`` how it was found (``"pci bus id 0000...:18:00.0"``).
        power_averaging_s: seconds each power reading averages over (:func:`power_averaging_s`).

    Raises:
        NvmlLookupError: neither the MIG UUID, the bus id nor the UUID names an NVML device.
    """

    power_averaging_s: float = POWER_AVERAGING_S

    def __init__(self, device: str) -> None:
        import pynvml
        import torch

        self.nvml = pynvml
        self.errors: dict[str, str] = {}
        pynvml.nvmlInit()
        try:
            index = torch.device(device).index
            index = torch.cuda.current_device() if index is None else index
            props = torch.cuda.get_device_properties(index)
            self.handle, self.lookup = self._handle_for(device, props, mig_uuid(index, props))
        except Exception:
            self.close()
            raise
        self.power_averaging_s = power_averaging_s(pynvml, self.handle)

    def _handle_for(self, device: str, props: Any, mig: str | None) -> tuple[Any, str]:
        n, bus = self.nvml, pci_bus_id(props)
        ways: list[tuple[str, str | None, Callable[[str], Any]]]
        if mig:
            ways = [("mig uuid", mig, n.nvmlDeviceGetHandleByUUID),
                    (f"mig uuid {mig} among the MIG devices of the GPU at pci bus id", bus,
                     lambda key: self._mig_instance(key, mig)),
                    ("pci bus id", bus, n.nvmlDeviceGetHandleByPciBusId)]  # last: the whole GPU, not the instance
        else:
            ways = [("pci bus id", bus, n.nvmlDeviceGetHandleByPciBusId),
                    ("uuid", nvml_uuid(props), n.nvmlDeviceGetHandleByUUID)]
        whole_gpu = f" (the whole GPU holding MIG instance {mig})" if mig else ""
        attempts = []
        for how, key, find in ways:
            if key is None:
                attempts.append(f"{how}: torch reports none")
                continue
            try:
                return find(key), f"{how} {key}" + (whole_gpu if how == "pci bus id" else "")
            except Exception as error:  # NVMLError_NotFound, NVMLError_InvalidArgument, ...
                attempts.append(f"{how} {key}: {type(error).__name__}: {error}")
        raise NvmlLookupError(
            f"no NVML device matches {device} ({'; '.join(attempts)}); GPU telemetry is off rather than read "
            "by NVML index, which ignores CUDA_VISIBLE_DEVICES and may name another GPU"
        )

    def _mig_instance(self, bus: str, uuid: str) -> Any:
        """The MIG device handle with ``uuid`` among those of the GPU at PCI address ``bus`` (empty slots skipped).

        Raises:
            LookupError: no MIG device of that GPU has ``uuid``.
        """
        n = self.nvml
        gpu = n.nvmlDeviceGetHandleByPciBusId(bus)
        for slot in range(int(n.nvmlDeviceGetMaxMigDeviceCount(gpu))):
            try:
                instance = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu, slot)
            except Exception:  # NVMLError_NotFound: no instance in this slot
                continue
            found = n.nvmlDeviceGetUUID(instance)
            if (found.decode() if isinstance(found, bytes) else str(found)) == uuid:
                return instance
        raise LookupError(f"no MIG device with UUID {uuid} on the GPU at {bus}")

    def health(self, our_pids: set[int] | None = None) -> dict[str, Any]:
        """The GPU's state now (:func:`hwregress.hardware.gpu_health.gpu_health`), ``our_pids``: "us" on the GPU."""
        return gpu_health(self.handle, self.nvml, our_pids)

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

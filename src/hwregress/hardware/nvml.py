"""The NVML bindings: the NVML handle of one CUDA device, found by PCI bus id or UUID (never by index), and
its guarded queries; the device's PCI address and UUID in NVML's formats from torch's device properties.

NVML units: utilization in %, memory in bytes, power in mW, total energy in mJ, temperature in deg C, clocks in
MHz. Reference: NVIDIA NVML API Reference Guide, "Device Queries". ``pynvml`` (package nvidia-ml-py) and torch are
imported when a handle is opened, so the helpers here load without either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hwregress.hardware.health import gpu_health


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


class NvmlDevice:
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

"""A fake ``pynvml`` module: a machine with several GPUs, each with its own PCI bus id, UUID and
readings, so a self-test can tell which GPU's telemetry was read.

Followed from ``pynvml.py`` (nvidia-ml-py, installed in the venv): ``nvmlDeviceGetHandleByUUID`` accepts a GPU
or a MIG UUID and returns a device or MIG device handle; ``nvmlDeviceGetMaxMigDeviceCount`` /
``nvmlDeviceGetMigDeviceHandleByIndex`` enumerate a GPU's MIG devices (NotFound for an empty slot);
``nvmlDeviceIsMigDeviceHandle`` / ``nvmlDeviceGetDeviceHandleFromMigDeviceHandle``; ``nvmlDeviceGetArchitecture``
returns an ``NVML_DEVICE_ARCH_*`` value; ``nvmlDeviceGetComputeRunningProcesses`` and
``nvmlDeviceGetMPSComputeRunningProcesses`` (v3) return objects with ``pid`` and ``usedGpuMemory``.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any


# pynvml spells its errors and functions in camel case; the fake keeps its names
class NVMLError_NotFound(Exception):
    """Raised by the fake lookups, like pynvml's error of that name."""


class NVMLError_NotSupported(Exception):
    """Raised where the fake GPU does not support a query, like pynvml's error of that name."""


@dataclass
class FakeGpu:
    """One physical GPU (or, in a GPU's ``mig_devices``, one MIG instance) as NVML sees it. Power in mW, energy
    counter in mJ (NVML's units). ``power_readings_mw``: successive power readings (then the last one repeats);
    empty: ``power_mw``. ``architecture``: an ``NVML_DEVICE_ARCH_*`` value, None: the query is not supported.
    ``processes`` / ``mps_processes``: pids NVML lists as compute processes / MPS compute clients."""

    bus_id: str
    uuid: str
    power_mw: int
    energy_step_mj: int = 1500
    energy_mj: int = 10_000_000
    lookups: list[str] = field(default_factory=list)
    architecture: int | None = None
    power_readings_mw: list[int] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    mps_processes: list[int] = field(default_factory=list)
    mig_devices: list[FakeGpu] = field(default_factory=list)
    parent: FakeGpu | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for instance in self.mig_devices:
            instance.parent = self


class FakeNvml(types.ModuleType):
    """Install with ``monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus))``; ``gpus`` are in
    NVML's index order (every GPU of the machine, whatever CUDA_VISIBLE_DEVICES says).

    Args:
        gpus: the machine's GPUs.
        mig_uuid_lookup: False models a driver whose ``nvmlDeviceGetHandleByUUID`` does not accept MIG UUIDs.
        missing: names of functions this pynvml lacks (an older nvidia-ml-py): reading them raises AttributeError.
    """

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_DEVICE_ARCH_VOLTA = 5
    NVML_DEVICE_ARCH_TURING = 6
    NVML_DEVICE_ARCH_AMPERE = 7
    NVML_DEVICE_ARCH_ADA = 8
    NVML_DEVICE_ARCH_HOPPER = 9
    NVML_DEVICE_ARCH_UNKNOWN = 0xFFFFFFFF

    def __init__(self, gpus: list[FakeGpu], mig_uuid_lookup: bool = True, missing: tuple[str, ...] = ()) -> None:
        super().__init__("pynvml")
        self.gpus = gpus
        self.mig_uuid_lookup = mig_uuid_lookup
        self.missing = missing
        self.index_lookups: list[int] = []
        self.inits = self.shutdowns = 0

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and name in object.__getattribute__(self, "__dict__").get("missing", ()):
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        return super().__getattribute__(name)

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> FakeGpu:
        for gpu in self.gpus:
            if gpu.bus_id.lower() == str(bus_id).lower():
                gpu.lookups.append("pci")
                return gpu
        raise NVMLError_NotFound(f"no GPU at {bus_id}")

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeGpu:
        instances = [m for gpu in self.gpus for m in gpu.mig_devices] if self.mig_uuid_lookup else []
        for gpu in [*self.gpus, *instances]:
            if gpu.uuid == uuid:
                gpu.lookups.append("uuid")
                return gpu
        raise NVMLError_NotFound(f"no GPU with UUID {uuid}")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self.index_lookups.append(index)
        return self.gpus[index]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:
        return 7 if handle.mig_devices else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, index: int) -> FakeGpu:
        if index >= len(handle.mig_devices):
            raise NVMLError_NotFound(f"no MIG device at index {index}")
        handle.mig_devices[index].lookups.append("mig index")
        return handle.mig_devices[index]

    def nvmlDeviceIsMigDeviceHandle(self, handle: FakeGpu) -> int:
        return int(handle.parent is not None)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: FakeGpu) -> FakeGpu:
        if handle.parent is None:
            raise NVMLError_NotFound("not a MIG device handle")
        return handle.parent

    def nvmlDeviceGetArchitecture(self, handle: FakeGpu) -> int:
        if handle.architecture is None:
            raise NVMLError_NotSupported("Not Supported")
        return handle.architecture

    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> types.SimpleNamespace:
        return types.SimpleNamespace(busId=handle.bus_id)

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return handle.uuid

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=90, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> types.SimpleNamespace:
        return types.SimpleNamespace(used=2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        if handle.power_readings_mw:
            return handle.power_readings_mw.pop(0) if len(handle.power_readings_mw) > 1 else handle.power_readings_mw[0]
        return handle.power_mw

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        return 60

    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, clock: int) -> int:
        return 1980 if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeGpu) -> int:
        return 0

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeGpu) -> int:
        handle.energy_mj += handle.energy_step_mj
        return handle.energy_mj

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> list[types.SimpleNamespace]:
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in handle.processes]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: FakeGpu) -> list[types.SimpleNamespace]:
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in handle.mps_processes]

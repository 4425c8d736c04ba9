"""A fake ``pynvml`` module: a machine with several GPUs, each with its own PCI bus id, UUID and
readings, so a self-test can tell which GPU's telemetry was read."""

from __future__ import annotations

import types
from dataclasses import dataclass, field


# pynvml spells its errors and functions in camel case; the fake keeps its names
class NVMLError_NotFound(Exception):
    """Raised by the fake lookups, like pynvml's error of that name."""


@dataclass
class FakeGpu:
    """One physical GPU as NVML sees it. Power in mW, energy counter in mJ (NVML's units)."""

    bus_id: str
    uuid: str
    power_mw: int
    energy_step_mj: int = 1500
    energy_mj: int = 10_000_000
    lookups: list[str] = field(default_factory=list)


class FakeNvml(types.ModuleType):
    """Install with ``monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus))``; ``gpus`` are in
    NVML's index order (every GPU of the machine, whatever CUDA_VISIBLE_DEVICES says)."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, gpus: list[FakeGpu]) -> None:
        super().__init__("pynvml")
        self.gpus = gpus
        self.index_lookups: list[int] = []
        self.inits = self.shutdowns = 0

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
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                gpu.lookups.append("uuid")
                return gpu
        raise NVMLError_NotFound(f"no GPU with UUID {uuid}")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self.index_lookups.append(index)
        return self.gpus[index]

    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> types.SimpleNamespace:
        return types.SimpleNamespace(busId=handle.bus_id)

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return handle.uuid

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=90, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> types.SimpleNamespace:
        return types.SimpleNamespace(used=2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
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

"""The NVML handle against the CUDA device it must describe.

hwregress reads a GPU's telemetry through the NVML handle it finds by MIG UUID, PCI bus id or UUID
(:class:`hwregress.hardware.nvml.NvmlDevice`), never by index. The handle's own PCI address and UUID (or MIG UUID)
must be those torch reports for the device under test: otherwise power, clocks and throttling would be another
GPU's.
"""

from __future__ import annotations

from typing import Any

import torch

from hwregress.check.result import CheckResult, judged, skipped
from hwregress.hardware.facts import device_kind
from hwregress.hardware.nvml import NvmlDevice, mig_uuid, nvml_uuid, pci_bus_id

NAME = "nvml-handle"
COMPARED = "the NVML handle's PCI bus id and UUID against torch's for the device under test"


def check(device: str) -> CheckResult:
    """Run the NVML handle check on ``device`` (see the module doc); skipped off CUDA or without NVML."""
    if device_kind(device) != "cuda":
        return skipped(NAME, device, COMPARED, "not a CUDA device: no NVML telemetry to match")
    index = torch.device(device).index or 0
    props = torch.cuda.get_device_properties(index)
    try:
        nvml = NvmlDevice(device)
    except Exception as error:  # no driver library, or no handle matches: the check's finding
        return judged(NAME, device, False, COMPARED, {"error": f"{type(error).__name__}: {error}"},
                      "no NVML handle for this device: GPU telemetry (power, clocks, throttling) is off; install the "
                      "driver's NVML library or check CUDA_VISIBLE_DEVICES")
    try:
        found = _handle_identity(nvml)
        lookup = nvml.lookup
    finally:
        nvml.close()
    want_uuid = mig_uuid(index, props) or nvml_uuid(props)
    figures = {"lookup": lookup, "torch_bus_id": pci_bus_id(props), "nvml_bus_id": found["bus_id"],
               "torch_uuid": want_uuid, "nvml_uuid": found["uuid"]}
    same_bus = (found["bus_id"] or "").upper() == (pci_bus_id(props) or "").upper()
    same_uuid = want_uuid is None or found["uuid"] == want_uuid
    return judged(NAME, device, same_bus and same_uuid, COMPARED, figures,
                  "the telemetry would be another GPU's: hwregress.hardware.nvml.NvmlDevice's lookup (MIG UUID, bus "
                  "id, UUID) found the wrong handle")


def _handle_identity(nvml: NvmlDevice) -> dict[str, Any]:
    """The PCI bus id and UUID NVML reports for its own handle (a MIG instance: its MIG UUID and its GPU's bus)."""
    n, handle = nvml.nvml, nvml.handle
    bus = nvml.query("pci", lambda: n.nvmlDeviceGetPciInfo(handle).busId)
    uuid = nvml.query("uuid", lambda: n.nvmlDeviceGetUUID(handle))
    return {"bus_id": _text(bus), "uuid": _text(uuid)}


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)

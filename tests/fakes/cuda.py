"""Fake CUDA device queries: a table of device properties and capabilities by CUDA index, installed
over ``torch.cuda`` with monkeypatch so code that asks about ``cuda:N`` runs on the CPU."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch


def fake_properties(name: str = "NVIDIA H100 80GB HBM3", capability: tuple[int, int] = (9, 0),
                    bus: int = 0x18, uuid: str | None = None, sms: int = 132, **extra: Any) -> types.SimpleNamespace:
    """Properties shaped like ``torch.cuda.get_device_properties``: integer PCI ids, a UUID string."""
    return types.SimpleNamespace(name=name, major=capability[0], minor=capability[1], multi_processor_count=sms,
                                 total_memory=80 * 2**30, pci_domain_id=0, pci_bus_id=bus, pci_device_id=0,
                                 uuid=uuid if uuid is not None else f"uuid-{bus:02x}", **extra)


def _index(device: Any, current: int) -> int:
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        return current if device.index is None else device.index
    return current if device is None else int(device)


def install(monkeypatch: pytest.MonkeyPatch, devices: dict[int, types.SimpleNamespace], current: int = 0) -> None:
    """Make ``torch.cuda`` answer for ``devices`` (CUDA index -> fake properties); ``is_bf16_supported``
    answers True as torch's does when it counts emulation."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(devices))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)

    def properties(device: Any = None) -> types.SimpleNamespace:
        return devices[_index(device, current)]

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: properties(device).name)
    monkeypatch.setattr(torch.cuda, "get_device_capability",
                        lambda device=None: (properties(device).major, properties(device).minor))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)

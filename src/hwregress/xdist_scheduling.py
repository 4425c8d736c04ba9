"""A pytest-xdist scheduler that gives every device to exactly one worker.

All tests of a device form one scope of xdist's ``LoadScopeScheduling``, so they run on one worker, one
at a time, while other devices' tests run on other workers; tests without a device spread freely.
The device is read from the test id, which hwregress parametrizes as ``[<device>-...]``.

Why not ``--dist loadgroup`` with ``xdist_group`` marks: it passes groups by rewriting node ids on the
workers, which pytest 9.2 no longer honours (pytest-xdist issue #1386): the groups are dropped silently
and one device's timing tests run concurrently on several workers.

Imported only when pytest-xdist is installed.
"""

from __future__ import annotations

import re

from xdist.scheduler import LoadScopeScheduling

# the parameter id starts with the device: [cpu-resnet18-...], [cuda:1-...], [mps-...]
_DEVICE_IN_ID = re.compile(r"\[(cpu|mps|cuda:\d+)(?:-|\])")


def device_scope(nodeid: str) -> str | None:
    """The device a node id's parameters name, None if it names none.

    >>> device_scope("bench_tests/test_throughput.py::test_throughput[cuda:1-resnet50-train-bs32-fp32]")
    'cuda:1'
    """
    match = _DEVICE_IN_ID.search(nodeid)
    return match.group(1) if match else None


class DeviceScheduling(LoadScopeScheduling):
    """``LoadScopeScheduling`` whose scope is the device (the node id itself for device-less tests)."""

    def _split_scope(self, nodeid: str) -> str:
        device = device_scope(nodeid)
        return f"device:{device}" if device is not None else nodeid

"""pytest-xdist integration: a scheduler that gives every device to exactly one worker.

All tests of a device form one scope of xdist's ``LoadScopeScheduling``, so they run on one worker, one at a
time, while other devices' tests run on other workers; tests without a device spread freely. The device is
read from the test id, which hwregress parametrizes as ``[<device>-...]``.

Why not ``--dist loadgroup`` with ``xdist_group`` marks: it passes groups by rewriting node ids on the
workers, which pytest 9.2 no longer honours (pytest-xdist issue #1386): the groups are dropped silently and
one device's timing tests run concurrently on several workers.

:class:`XdistHooks` is registered on the controller only when pytest-xdist is present (its hook specs exist
only then); the scheduler class is imported lazily for the same reason.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

DEVICE_SCHEDULING_KEY = pytest.StashKey[bool]()
# the parameter id starts with the device: [cpu-resnet18-...], [cuda:1-...], [mps-...]
_DEVICE_IN_ID = re.compile(r"\[(cpu|mps|cuda:\d+)(?:-|\])")


def device_scope(nodeid: str) -> str | None:
    """The device a node id's parameters name, None if it names none.

    >>> device_scope("bench_tests/test_throughput.py::test_throughput[cuda:1-resnet50-train-bs32-fp32]")
    'cuda:1'
    """
    match = _DEVICE_IN_ID.search(nodeid)
    return match.group(1) if match else None


def is_worker(config: pytest.Config) -> bool:
    """True inside an xdist worker process."""
    return hasattr(config, "workerinput")


def session_temp(request: pytest.FixtureRequest) -> Path:
    """A folder every process of this session shares (xdist workers: the run's base temp), fresh per session."""
    base = request.getfixturevalue("tmp_path_factory").getbasetemp()
    return base.parent if is_worker(request.config) else base


@contextlib.contextmanager
def holding_devices(request: pytest.FixtureRequest, devices: Iterable[str]) -> Iterator[None]:
    """Hold the session-wide lock of each CUDA device in ``devices`` (taken in sorted order) while the block runs.

    The scheduler gives each device to one worker, but a job over several GPUs (data-parallel scaling, the node's
    all-reduce) runs from the worker of its first GPU while the others' workers measure on theirs: every CUDA test
    holds its own device's lock, and such a job also takes the locks of the other GPUs it uses, waiting for their
    running tests to end. Without xdist there is one process and nothing to lock."""
    if not is_worker(request.config):
        yield
        return
    folder = session_temp(request) / "hwregress-device-locks"
    folder.mkdir(parents=True, exist_ok=True)
    locks = [FileLock(str(folder / f"{device.replace(':', '')}.lock"))
             for device in sorted(set(devices)) if device.startswith("cuda")]
    with contextlib.ExitStack() as held:
        for lock in locks:
            held.enter_context(lock)
        yield


def choose_scheduling(config: pytest.Config) -> None:
    """With ``-n`` and no ``--dist`` of the user's, schedule by device (see the module docstring)."""
    numprocesses = getattr(config.option, "numprocesses", None)
    if numprocesses and getattr(config.option, "dist", "no") == "no":
        config.option.dist = "load"
        config.stash[DEVICE_SCHEDULING_KEY] = True


class XdistHooks:
    """Controller-side xdist hooks."""

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if not config.stash.get(DEVICE_SCHEDULING_KEY, False):
            return None  # the user chose a --dist mode: respect it
        from xdist.scheduler import LoadScopeScheduling

        class DeviceScheduling(LoadScopeScheduling):
            """``LoadScopeScheduling`` whose scope is the device (the node id itself for device-less tests)."""

            def _split_scope(self, nodeid: str) -> str:
                device = device_scope(nodeid)
                return f"device:{device}" if device is not None else nodeid

        return DeviceScheduling(config, log)


def register(config: pytest.Config) -> None:
    """Register :class:`XdistHooks` on the controller when pytest-xdist is installed."""
    if not is_worker(config) and config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(), "hwregress-xdist")

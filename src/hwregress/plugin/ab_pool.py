"""Where an A/B session's tests get their workers: fresh pairs of stack workers (A's, B's) for a device, a pair per
few pairs of windows (:mod:`hwregress.ab.processes`: the process is the unit of the verdict), each ended with its
block. Under pytest-xdist every device's tests run on one xdist worker (:mod:`hwregress.plugin.xdist`), so one window
runs on a device at a time. A stack found unable to run a worker at all (:class:`hwregress.ab.workers.StackUnusable`)
or whose worker died or hung starting up (at ``hello``) is remembered, so the device's later tests fail at once with
that first error instead of starting it again (a hang would cost each of them the whole ``--ab-timeout``).
Torch-free."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from hwregress.ab.stacks import Stack
from hwregress.ab.workers import PairStarter, StackUnusable, started_pair

POOL_KEY = pytest.StashKey["WorkerPool"]()


class WorkerPool:
    """The session's source of worker pairs, by device.

    Args:
        stacks: stack A and stack B.
        timeout_s: the longest one request to a worker may take (s).
        workload_modules: the session's ``--workloads`` modules, imported by each worker.
    """

    def __init__(self, stacks: tuple[Stack, Stack], timeout_s: float, workload_modules: Iterable[str] = ()) -> None:
        self.stacks = stacks
        self.timeout_s = timeout_s
        self.workload_modules = list(workload_modules)
        self._unusable: dict[str, str] = {}

    def starter(self, device: str) -> PairStarter:
        """What starts a fresh pair of ``device``'s workers (:func:`hwregress.ab.workers.started_pair`).

        Raises:
            StackUnusable: a stack was found unable to run a worker on ``device`` earlier this session.
        """
        if device in self._unusable:
            raise StackUnusable(self._unusable[device])
        return lambda: started_pair(self.stacks, device, self.timeout_s, self.workload_modules)

    def mark_unusable(self, device: str, message: str, test_id: str) -> None:
        """Remember that a stack cannot run a worker on ``device`` (``message``: the error, found at ``test_id``); a
        device already marked keeps its first error."""
        self._unusable.setdefault(device, f"{message}\n(found at this session's A/B test {test_id} on {device}; the "
                                          "device's later A/B tests are not started)")


def register(config: pytest.Config, stacks: tuple[Stack, Stack], timeout_s: float,
             workload_modules: Iterable[str]) -> WorkerPool:
    """An A/B session's pool in this process, stashed under :data:`POOL_KEY`."""
    pool = config.stash[POOL_KEY] = WorkerPool(stacks, timeout_s, workload_modules)
    return pool

"""The A/B worker pairs of one pytest process: one pair of stack workers (A's, B's) per device, started at that
device's first A/B test and kept for the session, so each test pays for its model's build and warmup but not for two
interpreters' start and torch's import. Under pytest-xdist every device's tests run on one worker process
(:mod:`hwregress.plugin.xdist`), so a device has one pair in the whole session, and exactly one window runs on it at a
time. A pair whose worker died or hung is ended and the device's next test starts a fresh one; a stack that cannot
run a worker at all (:class:`hwregress.ab.workers.StackUnusable`) is remembered, so the device's later tests fail at
once with the same error. The pool is a pytest plugin that ends every worker at the session's end. Torch-free."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import pytest

from hwregress.ab.stacks import Stack
from hwregress.ab.workers import StackUnusable, StackWorker, WorkerError

WorkerPair = tuple[StackWorker, StackWorker]
POOL_KEY = pytest.StashKey["WorkerPool"]()


class WorkerPool:
    """The worker pairs of this process, by device.

    Args:
        stacks: stack A and stack B.
        timeout_s: the longest one request to a worker may take (s).
        workload_modules: the session's ``--workloads`` modules, imported by each worker.
    """

    def __init__(self, stacks: tuple[Stack, Stack], timeout_s: float, workload_modules: Iterable[str] = ()) -> None:
        self.stacks = stacks
        self.timeout_s = timeout_s
        self.workload_modules = list(workload_modules)
        self._pairs: dict[str, WorkerPair] = {}
        self._unusable: dict[str, str] = {}

    def pair(self, device: str) -> WorkerPair:
        """``device``'s started pair, starting it on first use.

        Raises:
            StackUnusable: a stack of this pool was found unable to run a worker on ``device`` earlier this session.
            WorkerError: an interpreter could not be executed (the other worker is ended).
        """
        if device in self._unusable:
            raise StackUnusable(f"{self._unusable[device]} (found at this session's first A/B test on {device})")
        if device not in self._pairs:
            self._pairs[device] = self._started(device)
        return self._pairs[device]

    def _started(self, device: str) -> WorkerPair:
        a, b = (StackWorker(stack, device, self.timeout_s, self.workload_modules) for stack in self.stacks)
        a.start()
        try:
            b.start()
        except WorkerError:
            a.close()
            raise
        return a, b

    def end(self, device: str) -> None:
        """End ``device``'s pair (after a worker died or hung); its next test starts a fresh one."""
        for worker in self._pairs.pop(device, ()):
            with contextlib.suppress(OSError, WorkerError):
                worker.close()

    def mark_unusable(self, device: str, message: str) -> None:
        """Remember that a stack cannot run a worker on ``device`` (``message``: the error) and end its pair."""
        self._unusable[device] = message
        self.end(device)

    def close(self) -> None:
        """End every pair; idempotent."""
        for device in list(self._pairs):
            self.end(device)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self) -> None:
        self.close()

    def pytest_unconfigure(self) -> None:
        self.close()


def register(config: pytest.Config, stacks: tuple[Stack, Stack], timeout_s: float,
             workload_modules: Iterable[str]) -> WorkerPool:
    """Start an A/B session's pool in this process (not in an xdist controller, which runs no test): stashed under
    :data:`POOL_KEY` and registered as a plugin that ends its workers at the session's end."""
    pool = config.stash[POOL_KEY] = WorkerPool(stacks, timeout_s, workload_modules)
    config.pluginmanager.register(pool, "hwregress-ab-pool")
    return pool

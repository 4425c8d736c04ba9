"""One rank's place in a job and its heartbeat: :class:`RankContext`, which the worker builds and the families
(``ddp_window``, ``collectives``, ``colocation``) report through, and the self-test faults it injects. Below the
worker and the families alike, so the worker may dispatch to them without their importing it back."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from hwregress.scaleout.job import JobSpec, write_status

# Self-test faults (never set in real runs): the rank named by the variable dies by SIGKILL, or stops making
# progress, at the start of its second timed round; or fails to allocate at its first warmup step.
KILL_RANK_VARIABLE = "HWREGRESS_SELFTEST_KILL_RANK"
HANG_RANK_VARIABLE = "HWREGRESS_SELFTEST_HANG_RANK"
OOM_RANK_VARIABLE = "HWREGRESS_SELFTEST_OOM_RANK"


class RankContext:
    """This rank's place in the job and its heartbeat."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.rank = int(os.environ["RANK"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.node_rank = int(os.environ.get("HWREGRESS_NODE_RANK", os.environ.get("GROUP_RANK", "0")))

    @property
    def device(self) -> str:
        """The device of this rank: a co-located job's shared device; else this node's GPU for the local rank
        (``spec.devices``), or ``cpu``."""
        if self.spec.kind == "colocated":
            return self.spec.device
        return self.spec.devices[self.local_rank] if self.spec.device_kind == "cuda" else "cpu"

    def status(self, phase: str, **extra: Any) -> None:
        write_status(self.spec.out_dir, self.rank, phase, node_rank=self.node_rank, device=self.device, **extra)

    def on_round(self, index: int, rounds: int | None = None) -> None:
        """Heartbeat before timed round ``index`` (0-based); the self-test faults strike at index 1."""
        planned = f" of {rounds}" if rounds and index < rounds else " (an extension round: the window was noisy)"
        self.status(f"timed round {index + 1}" + (planned if rounds else ""))
        if index == 1:
            _inject_fault(self.rank)

    def on_warmup(self) -> None:
        self.status("warmup")
        if os.environ.get(OOM_RANK_VARIABLE) == str(self.rank):
            import torch

            raise getattr(torch, "OutOfMemoryError", MemoryError)(
                f"self-test: out of memory injected on rank {self.rank}")


def _inject_fault(rank: int) -> None:
    if os.environ.get(KILL_RANK_VARIABLE) == str(rank):
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(HANG_RANK_VARIABLE) == str(rank):
        while True:
            time.sleep(3600)

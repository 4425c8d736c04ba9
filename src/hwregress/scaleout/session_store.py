"""The nodes of a multi-node session meet before each job: node 0's pytest process hosts a key-value store
(``torch.distributed.TCPStore``) at ``--rdzv-endpoint`` for the whole session, and every node's session checks in
there before it starts a job's launcher. Node 0 names the job's run id, its test and what the job runs; the others
check they are about to run the same, and nobody starts until every node has arrived, so a node can never join
the rendezvous of a job that another node is still tearing down (each job's rendezvous lives at the endpoint's
port + 1)."""

from __future__ import annotations

import datetime
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from hwregress.scaleout.topology import Topology, parse_endpoint

POLL_S = 0.1
# node 0 may run jobs of its own between joint ones (T(1), co-located groups): the others wait that long too
STORE_TIMEOUT_FACTOR = 3


class NodeMismatch(RuntimeError):
    """The nodes are not running the same tests, or the same jobs, in the same order."""


class SessionStoreError(RuntimeError):
    """The session store cannot be opened or reached, or a node did not arrive in time."""


class SessionStore:
    """The session's meeting point (see the module docstring).

    Raises:
        SessionStoreError: node 0 cannot listen at the endpoint (port taken) or another node cannot reach it.
    """

    def __init__(self, topology: Topology, timeout_s: float) -> None:
        import torch.distributed as dist

        self.host, self.port = parse_endpoint(topology.rdzv_endpoint or "", "--rdzv-endpoint")
        self.topology = topology
        self.timeout_s = timeout_s * STORE_TIMEOUT_FACTOR
        self.jobs = 0
        role = "listen at" if topology.writes_records else "reach node 0 at"
        try:
            self.store: Any = dist.TCPStore(self.host, self.port, None, topology.writes_records,
                                            datetime.timedelta(seconds=self.timeout_s), wait_for_workers=False)
        except (RuntimeError, OSError) as error:
            raise SessionStoreError(
                f"node {topology.node_rank} could not {role} --rdzv-endpoint={topology.rdzv_endpoint}: {error}. The "
                "port and the next one must be free on node 0 and reachable from every node (firewall, the address "
                "of node 0's interface that the others route to)") from None

    def begin_job(self, test_id: str, agreement: dict[str, Any],
                  watch: Callable[[int, int], None] | None = None) -> str:
        """Check in for the session's next job (``test_id`` running the job ``agreement`` describes) and wait for
        every node; returns the job's run id. ``watch``, if given, is called with (nodes arrived, nodes) at each poll.

        Raises:
            NodeMismatch: node 0 runs another test or another job here (the message names the difference).
            SessionStoreError: a node did not arrive within the timeout, or the store went away.
        """
        index = self.jobs
        self.jobs += 1
        prefix = f"hwregress/job/{index}"
        try:
            if self.topology.writes_records:
                run_id = f"hwregress-{uuid.uuid4().hex[:12]}"
                self.store.set(f"{prefix}/job", json.dumps({"test": test_id, "agreement": agreement}, sort_keys=True))
                self.store.set(f"{prefix}/run_id", run_id)
            else:
                self._check_same_job(prefix, index, test_id, agreement)
                run_id = self.store.get(f"{prefix}/run_id").decode()
            self.store.add(f"{prefix}/arrived", 1)
            self._wait_for_all(prefix, watch)
        except (RuntimeError, OSError) as error:
            if isinstance(error, (NodeMismatch, SessionStoreError)):
                raise
            raise SessionStoreError(f"job {index + 1} of the session at --rdzv-endpoint={self.topology.rdzv_endpoint}: "
                                    f"{error} (did node 0 stop, or is it still busy beyond "
                                    f"{self.timeout_s:g} s?)") from None
        return run_id

    def report_outcome(self, outcome: dict[str, Any]) -> None:
        """This node's outcome of the current job (``{"ok": bool, "kind": "oom"|"failed"|"hung"|None, "error": str}``),
        for node 0, which writes the record, to read."""
        key = f"hwregress/job/{self.jobs - 1}/outcome/node{self.topology.node_rank}"
        try:
            self.store.set(key, json.dumps(outcome))
        except (RuntimeError, OSError):
            pass  # node 0 is gone: its own session reports the job

    def other_outcomes(self, wait_s: float) -> dict[int, dict[str, Any]]:
        """The other nodes' outcomes of the current job, by node rank, waiting up to ``wait_s`` for them to arrive
        (a node whose ranks failed on their own reports as soon as its launcher returns)."""
        prefix = f"hwregress/job/{self.jobs - 1}/outcome"
        others = [node for node in range(self.topology.nnodes) if node != self.topology.node_rank]
        deadline = time.monotonic() + wait_s
        found: dict[int, dict[str, Any]] = {}
        while True:
            for node in others:
                key = f"{prefix}/node{node}"
                if node not in found and self.store.check([key]):
                    found[node] = json.loads(self.store.get(key).decode())
            if len(found) == len(others) or time.monotonic() > deadline:
                return found
            time.sleep(POLL_S)

    def _check_same_job(self, prefix: str, index: int, test_id: str, agreement: dict[str, Any]) -> None:
        expected = json.loads(self.store.get(f"{prefix}/job").decode())
        differences = ([f"test: node 0 runs {expected['test']}, this node {test_id}"] if expected["test"] != test_id
                       else [])
        differences += [f"{key}: node 0 {expected['agreement'].get(key)!r}, this node {value!r}"
                        for key, value in sorted(agreement.items()) if expected["agreement"].get(key) != value]
        if differences:
            self.store.set(f"{prefix}/mismatch", f"node {self.topology.node_rank}: " + "; ".join(differences))
            raise NodeMismatch(f"job {index + 1} of the session differs from node 0's ({'; '.join(differences)}); run "
                               "the same pytest command (same tests and options, no -n) on every node")

    def _wait_for_all(self, prefix: str, watch: Callable[[int, int], None] | None = None) -> None:
        deadline = time.monotonic() + self.timeout_s
        while (arrived := self.store.add(f"{prefix}/arrived", 0)) < self.topology.nnodes:
            if watch is not None:
                watch(arrived, self.topology.nnodes)
            if self.store.check([f"{prefix}/mismatch"]):
                raise NodeMismatch("another node runs a different job here "
                                   f"({self.store.get(f'{prefix}/mismatch').decode()}); run the same pytest "
                                   "command on every node")
            if time.monotonic() > deadline:
                raise SessionStoreError(
                    f"waited {self.timeout_s:g} s for all {self.topology.nnodes} nodes at "
                    f"{self.topology.rdzv_endpoint}; {self.store.add(f'{prefix}/arrived', 0)} arrived. Is every node "
                    "running the same command with "
                    "its own --node-rank?")
            time.sleep(POLL_S)

"""The nodes of a multi-node session meet before each job: node 0's pytest process hosts a key-value store
(``torch.distributed.TCPStore``) at ``--rdzv-endpoint`` for the whole session, and every node's session checks in
there before it starts a job's launcher. Node 0 names the job's run id and test; the others check they are about
to run the same test, and nobody starts until every node has arrived, so a node can never join the rendezvous of
a job that another node is still tearing down (each job's rendezvous lives at the endpoint's port + 1)."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

from hwregress.dist.topology import Topology, parse_endpoint

POLL_S = 0.1


class NodeMismatch(RuntimeError):
    """The nodes are not running the same tests in the same order."""


class SessionStore:
    """The session's meeting point (see the module docstring)."""

    def __init__(self, topology: Topology, timeout_s: float) -> None:
        import torch.distributed as dist

        host, port = parse_endpoint(topology.rdzv_endpoint or "", "--rdzv-endpoint")
        self.topology = topology
        self.timeout_s = timeout_s
        self.jobs = 0
        self.store: Any = dist.TCPStore(host, port, None, topology.writes_records,
                                        datetime.timedelta(seconds=timeout_s), wait_for_workers=False)

    def begin_job(self, test_id: str) -> str:
        """Check in for the session's next job (running ``test_id``) and wait for every node; returns its run id.

        Raises:
            NodeMismatch: node 0 runs another test at this point of the session (the message names both).
            TimeoutError: a node did not arrive within the timeout.
        """
        index = self.jobs
        self.jobs += 1
        prefix = f"hwregress/job/{index}"
        if self.topology.writes_records:
            run_id = f"hwregress-{uuid.uuid4().hex[:12]}"
            self.store.set(f"{prefix}/test", test_id)
            self.store.set(f"{prefix}/run_id", run_id)
        else:
            expected = self.store.get(f"{prefix}/test").decode()
            if expected != test_id:
                self.store.set(f"{prefix}/mismatch", f"node {self.topology.node_rank} runs {test_id}")
                raise NodeMismatch(f"job {index + 1} of the session: node 0 runs {expected}, node "
                                   f"{self.topology.node_rank} runs {test_id}; run the same pytest command (same tests, "
                                   "same options, no -n) on every node")
            run_id = self.store.get(f"{prefix}/run_id").decode()
        self.store.add(f"{prefix}/arrived", 1)
        self._wait_for_all(prefix)
        return run_id

    def _wait_for_all(self, prefix: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while self.store.add(f"{prefix}/arrived", 0) < self.topology.nnodes:
            if self.store.check([f"{prefix}/mismatch"]):
                raise NodeMismatch(f"another node runs a different test here: {self.store.get(f'{prefix}/mismatch').decode()}; "
                                   "run the same pytest command on every node")
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {self.timeout_s:g} s (--dist-timeout) for all {self.topology.nnodes} nodes at "
                                   f"{self.topology.rdzv_endpoint}; {self.store.add(f'{prefix}/arrived', 0)} arrived. Is "
                                   "every node running the same command with its own --node-rank?")
            time.sleep(POLL_S)

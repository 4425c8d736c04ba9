"""Where a job's ranks run: nodes, this node's rank, the rendezvous endpoint; world sizes and threads per rank."""

from __future__ import annotations

import os
from dataclasses import dataclass

LOCAL_RENDEZVOUS = "127.0.0.1:0"  # one node: the c10d store on a free port of the loopback, as torchrun --standalone


@dataclass(frozen=True)
class Topology:
    """The nodes of a session's distributed jobs (``--nnodes``, ``--node-rank``, ``--rdzv-endpoint``).

    Attributes:
        nnodes: nodes that take part in every job (1: this machine alone).
        node_rank: this node's rank, 0 .. nnodes-1; node 0 hosts the rendezvous and writes the records.
        rdzv_endpoint: ``HOST:PORT`` of node 0's rendezvous (c10d); None on one node (a free local port).
    """

    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None

    def __post_init__(self) -> None:
        if self.nnodes < 1:
            raise ValueError(f"--nnodes must be >= 1, got {self.nnodes}")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"--node-rank must be in 0..{self.nnodes - 1} for --nnodes {self.nnodes}, "
                             f"got {self.node_rank}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError(f"--nnodes {self.nnodes} needs --rdzv-endpoint HOST:PORT (node 0's address and a free "
                             "port, the same on every node)")
        if self.rdzv_endpoint:
            parse_endpoint(self.rdzv_endpoint, "--rdzv-endpoint")

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1

    @property
    def writes_records(self) -> bool:
        """Node 0's session records the measurements; the others record that they took part."""
        return self.node_rank == 0

    def job_endpoint(self) -> str:
        """The rendezvous of one job: the loopback's free port on one node; on several, node 0's host at the
        given port + 1 (the given port carries the session's own store, see :mod:`hwregress.scaleout.session_store`)."""
        if not self.multi_node:
            return LOCAL_RENDEZVOUS
        host, port = parse_endpoint(self.rdzv_endpoint or "", "--rdzv-endpoint")
        return f"[{host}]:{port + 1}" if ":" in host else f"{host}:{port + 1}"


def parse_endpoint(text: str, source: str) -> tuple[str, int]:
    """``"10.0.0.1:29500"`` -> ``("10.0.0.1", 29500)``; IPv6 in brackets (``[::1]:29500``).

    Raises:
        ValueError: no port, or a port outside 1..65534 (the next port carries the jobs); names ``source``.
    """
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65534:
        raise ValueError(f"{source}={text!r}: expected HOST:PORT with a port in 1..65534 (node 0's address, e.g. "
                         "10.0.0.1:29500; the port and the next one must be free on node 0)")
    return host, int(port_text)


def default_world_sizes(device_kind: str, visible_gpus: int, nnodes: int = 1) -> list[int]:
    """Every node with 1, 2, 4, ... ranks (powers of two up to its GPUs, and all of them; on the CPU 1 and 2 ranks,
    gloo, the cores split between the ranks), times the nodes: ``default_world_sizes("cuda", 8, 3)`` is
    ``[3, 6, 12, 24]``, so every size splits evenly over the nodes."""
    per_node = max(1, visible_gpus) if device_kind == "cuda" else 2
    sizes = []
    size = 1
    while size < per_node:
        sizes.append(size)
        size *= 2
    return [nnodes * ranks for ranks in [*sizes, per_node]]


def ranks_per_node(world_size: int, nnodes: int) -> int:
    """Ranks each node runs.

    Raises:
        ValueError: ``world_size`` is not a multiple of ``nnodes``.
    """
    if world_size % nnodes:
        raise ValueError(f"world size {world_size} does not split evenly over {nnodes} nodes; "
                         f"use multiples of {nnodes} in --world-sizes")
    return world_size // nnodes


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (which a container or ``taskset`` narrows), else the
    machine's count."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def threads_per_rank(ranks_on_node: int, cores: int | None = None) -> int:
    """CPU ranks share the node's cores: ``cores // ranks`` intra-op threads each (at least 1), so W ranks never
    oversubscribe the machine and W=1 gets every core. ``cores`` defaults to :func:`usable_cores`."""
    cores = cores or usable_cores()
    return max(1, cores // max(1, ranks_on_node))


FORCE = "--oversubscribe (ini: hwregress_oversubscribe = true)"


def oversubscription(world_sizes: list[int], nnodes: int, device_kind: str, slots: int) -> str | None:
    """Why the first of ``world_sizes`` puts more ranks on a node than it has ``slots`` for, None when every size
    fits: on ``cuda`` a slot is a selected GPU (NCCL runs one rank per GPU: a larger size is skipped as unsupported),
    on the CPU a usable core (gloo ranks beyond the cores share them, and every rank's window measures the contention).
    The sentence names the size, the ranks per node, the limit and how to force it (:data:`FORCE`)."""
    beyond = next((size for size in world_sizes if size // nnodes > slots), None)
    if beyond is None:
        return None
    where = "on this node, beyond its" if nnodes == 1 else f"on each of {nnodes} nodes, beyond this node's"
    needs = f"world size {beyond} needs {beyond // nnodes} ranks {where}"
    if device_kind == "cuda":
        return (f"{needs} {_count(slots, 'selected GPU')} (NCCL: one rank per GPU); use world sizes up to "
                f"{slots * nnodes}, select more GPUs with --devices, or {FORCE} to keep them (skipped as unsupported)")
    return (f"{needs} {_count(slots, 'usable CPU core')} (gloo); use world sizes up to {slots * nnodes}, or {FORCE} "
            "to run them anyway")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"

"""A guard for CPU windows: a batch that fits in virtual memory but not in RAM gets the whole session killed by
the kernel's OOM killer (docs/measured.md, 'Memory'). Before the window the step is probed at two
small batch sizes, its host-memory footprint is extrapolated linearly to the batch under test, and a batch that
would not fit in the memory really available (the lower of the system's available memory and the cgroup's
headroom) ends as out-of-memory before it runs.

Only batches above :data:`GUARDED_BATCH` are probed: the probes' own allocations slow the measurements that
follow them in the process (docs/measured.md, 'Memory'), and a batch of 16 or fewer cannot exhaust a host that
could build the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

CGROUP_ROOT = Path("/sys/fs/cgroup")
SAFETY_FRACTION = 0.8  # use at most this share of the available memory: RSS estimates are approximate
PROBE_BATCHES = (1, 2)
GUARDED_BATCH = 16  # batches up to this size are not probed (see the module docstring)


@dataclass(frozen=True)
class Headroom:
    """Host memory a test may still use, bytes, and where the figure comes from (for messages)."""

    available_bytes: int
    source: str


def host_headroom(cgroup_root: Path = CGROUP_ROOT) -> Headroom:
    """The lower of psutil's available system memory and the memory cgroup's limit minus its usage
    (cgroup v2 ``memory.max``/``memory.current``, or v1 ``memory.limit_in_bytes``/``memory.usage_in_bytes``)."""
    system = Headroom(int(psutil.virtual_memory().available), "available system memory")
    cgroup = _cgroup_headroom(cgroup_root)
    return cgroup if cgroup is not None and cgroup.available_bytes < system.available_bytes else system


def _cgroup_headroom(root: Path) -> Headroom | None:
    for limit_name, usage_name in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        limit, usage = _read_int(root / limit_name), _read_int(root / usage_name)
        if limit is not None and usage is not None and limit < 2**60:  # v1 reports "no limit" as ~2^63
            return Headroom(max(limit - usage, 0), f"memory cgroup headroom ({root / limit_name})")
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) and garbage read as unknown


def extrapolate(footprints: dict[int, int], batch_size: int) -> int:
    """Linear extrapolation of a step's peak host-memory growth (bytes) from probes at small batch sizes:
    ``f(b) = f(b1) + (b - b1) * (f(b2) - f(b1)) / (b2 - b1)``, the per-sample slope never below 0.

    Raises:
        ValueError: fewer than two probes.
    """
    if len(footprints) < 2:
        raise ValueError(f"need footprints at two batch sizes, got {sorted(footprints)}")
    (b1, f1), (b2, f2) = sorted(footprints.items())[:2]
    per_sample = max((f2 - f1) / (b2 - b1), 0.0)
    return int(max(f1, 0) + (batch_size - b1) * per_sample)


def refusal(measure_footprint: Callable[[int], int], batch_size: int, headroom: Headroom) -> str | None:
    """Why batch ``batch_size`` must not run on the host, or None when it fits.

    Args:
        measure_footprint: runs one step at a batch size and returns its peak host-memory growth, bytes.
        batch_size: the batch under test; at or below :data:`GUARDED_BATCH` nothing is probed.
        headroom: what the host has left (:func:`host_headroom`).
    """
    if batch_size <= GUARDED_BATCH:
        return None
    predicted = extrapolate({b: measure_footprint(b) for b in PROBE_BATCHES}, batch_size)
    budget = int(headroom.available_bytes * SAFETY_FRACTION)
    if predicted <= budget:
        return None
    return (f"out of memory at batch {batch_size} on cpu (predicted): the step would need ~{predicted / 2**30:.2f} GiB "
            f"of host memory, extrapolated from batches {PROBE_BATCHES}, but {SAFETY_FRACTION:.0%} of the "
            f"{headroom.source} is {budget / 2**30:.2f} GiB; ended before the kernel's OOM killer "
            "could end the session")

"""Same-session references, measured once per session and shared by every process: the CPU side of a GPU/CPU
speedup, and T(1) of a data-parallel scaling efficiency.

Under ``pytest -n N`` each worker that runs a speedup test needs the CPU throughput of the same model,
batch and dtype. Measured in every worker, the CPU halves ran concurrently on the same cores and each
measured a fraction of the machine. :func:`measured_once` measures it once: the first process takes a
file lock, measures and writes the samples; the others wait on the lock and read them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import torch
from filelock import FileLock

from hwregress.hardware.identity import device_identity

CACHE_FORMAT = 1


def host_cpu_identity() -> str:
    """What tells this host's CPU apart, as one string: vendor, model name, family/model/stepping,
    logical cores and torch's intra-op threads, e.g.
    ``"AuthenticAMD | AMD EPYC | family 26 model 2 stepping 1 | 2 logical cores | 2 torch threads"``.
    Model names alone are not identities ("AMD EPYC" covers CPUs 2x apart)."""
    facts = device_identity("cpu")  # hwregress.hardware.identity: /proc/cpuinfo, lscpu, then py-cpuinfo
    return (f"{facts.get('cpu_vendor')} | {facts.get('cpu_brand')} | family {facts.get('cpu_family')} model "
            f"{facts.get('cpu_model')} stepping {facts.get('cpu_stepping')} | {os.cpu_count()} logical cores | "
            f"{torch.get_num_threads()} torch threads")


def cache_path(key: str, cache_dir: Path) -> Path:
    """The cache file of ``key`` on this host: ``cache_dir/cpu-reference-<sha256 of identity and key>.json``."""
    digest = hashlib.sha256(f"{host_cpu_identity()}\n{key}".encode()).hexdigest()[:24]
    return cache_dir / f"cpu-reference-{digest}.json"


def measured_once(key: str, measure: Callable[[], list[float]], cache_dir: Path) -> list[float]:
    """The reference samples of ``key`` (e.g. ``"resnet50/train/bs64/fp32"``), measured by
    ``measure()`` at most once per ``cache_dir`` across threads and processes.

    ``cache_dir`` must be shared by the session's processes and fresh per session (e.g. a folder under
    pytest's shared base temp), since the samples are valid only for this session's load. Concurrent
    callers block on a ``filelock.FileLock`` while the first one measures; if ``measure`` raises, nothing
    is cached and the next caller measures.

    Returns:
        the samples, as ``measure`` returned them (throughput per round, say).

    Raises:
        whatever ``measure`` raises; ValueError when a cache file holds another key or host (a hash
        collision or a hand-edited file), naming the file.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_path(key, cache_dir)
    identity = host_cpu_identity()
    with FileLock(str(path) + ".lock"):
        if path.exists():
            return _read(path, key, identity)
        samples = [float(s) for s in measure()]
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"format": CACHE_FORMAT, "key": key, "host": identity, "samples": samples}))
        temporary.replace(path)
        return samples


def _read(path: Path, key: str, identity: str) -> list[float]:
    content = json.loads(path.read_text())
    if content.get("key") != key or content.get("host") != identity or content.get("format") != CACHE_FORMAT:
        raise ValueError(f"{path}: holds the reference of {content.get('key')!r} on {content.get('host')!r}, "
                         f"not {key!r} on {identity!r}; delete the file")
    return [float(s) for s in content["samples"]]

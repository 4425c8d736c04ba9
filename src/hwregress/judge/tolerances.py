"""What counts as a change: the tolerances a session judges with (:class:`Tolerances`), the throughput tolerance a
comparison starts from (:func:`starting_tolerance`) and a peak memory's ceiling (:func:`memory_limits`). Shared by the
judge (:mod:`hwregress.judge.compare`), a window's verdict check, the day-one fleet verdicts and ``baselines diff``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Sessions a baseline must hold before thresholds tighten below the cap: one session says nothing about how far
# the next process's median may move (2-core development VM: up to 28% between processes, 2-5% within one).
MIN_SESSIONS = 3


@dataclass(frozen=True)
class Tolerances:
    """What counts as a change.

    Attributes:
        throughput: relative throughput loss tolerated on accelerators (fraction); the noise bound may raise it.
        cpu_throughput: the same on the CPU, where processes move more between sessions (measured on the 2-core
            development VM, three sessions recorded then three unchanged ones: session medians 6-11% below the
            baseline's while each baseline's own history varied 1-3%).
        max_threshold: no noise or history bound raises the throughput threshold past this (fraction).
        memory: relative peak-memory growth tolerated where the peak is exact (the CUDA caching allocator's), fraction.
        sampled_memory: the same where the peak is sampled RSS growth (CPU, MPS), which moves between unchanged
            sessions (the 2-core VM, one day: alexnet train bs8 768 or 921 MiB, +20%; resnet18 train 441 to 558 MiB).
        memory_slack_bytes: absolute growth tolerated on top, for RSS-sampled (CPU, MPS) memory only: the
            CUDA allocator's peak is exact, and a slack there would let a small model grow 2-6x unseen.
        accuracy_margin: absolute accuracy drop tolerated against the baseline (fraction).
        device_accuracy_margin: |accuracy on device - accuracy on CPU| tolerated (fraction).
        alpha: significance level of the Mann-Whitney test.
        z: standard errors of baseline noise that the threshold must exceed.
    """

    throughput: float = 0.05
    cpu_throughput: float = 0.15
    max_threshold: float = 0.25
    memory: float = 0.10
    sampled_memory: float = 0.25
    memory_slack_bytes: int = 64 * 2**20
    accuracy_margin: float = 0.02
    device_accuracy_margin: float = 0.03
    alpha: float = 0.01
    z: float = 3.0


def starting_tolerance(baseline: Mapping[str, Any], on_cpu: bool, tolerances: Tolerances,
                       given: float | None = None) -> tuple[float, str | None]:
    """The tolerance a throughput comparison against ``baseline`` starts from, before the noise and history
    bounds raise it: ``given`` (a user's explicit figure) else the device's (``tolerances.cpu_throughput`` on
    the CPU, ``tolerances.throughput`` elsewhere), raised to ``tolerances.max_threshold`` while the baseline holds
    fewer than :data:`MIN_SESSIONS` sessions (the drift between sessions is not known yet: only a gross change
    counts). Returns it with the note that says it is provisional (None when it is not). The tests and
    ``baselines diff`` both judge through this one rule."""
    sessions = len(baseline.get("history") or ()) or 1
    tolerance = given if given is not None else tolerances.cpu_throughput if on_cpu else tolerances.throughput
    if sessions >= MIN_SESSIONS:
        return tolerance, None
    return max(tolerance, tolerances.max_threshold), (
        f"provisional threshold: the baseline holds {sessions} session(s); until {MIN_SESSIONS} are recorded "
        "(--update-baselines) only changes beyond --max-threshold count")


def is_cpu_entry(entry: Mapping[str, Any]) -> bool:
    """Whether a baselines entry was recorded on a CPU: its hardware identity describes a CPU and no GPU."""
    identity = entry.get("identity") or {}
    return isinstance(identity, Mapping) and "cpu_brand" in identity and "gpu_name" not in identity


def memory_limits(exact: bool, tolerances: Tolerances) -> tuple[float, float]:
    """``(tolerance, slack bytes)`` of a peak-memory ceiling, ``base x (1 + tolerance) + slack``: an exact peak (the
    CUDA caching allocator's) gets ``tolerances.memory`` and no slack, a sampled RSS peak (CPU, MPS)
    ``tolerances.sampled_memory`` and ``tolerances.memory_slack_bytes``."""
    if exact:
        return tolerances.memory, 0.0
    return tolerances.sampled_memory, float(tolerances.memory_slack_bytes)

"""Visits: a launch-bound window measured in several processes at several times, and judged on the fastest
(issue 39 part 2). Torch-free.

Why. A launch-bound window's speed is its host thread's (it dispatches every kernel), and on the lent GPU machines
that speed came in modes: resnet50 infer bs1 ran 234 samples/s in one session of four and 270-287 in the others, every
round of the slow session slow (``baselines/nvidia-h200.json``), and gpt2's prefill and decode bs1 alike
(docs/measured.md, 'Measured on an H200'). Within a window the rounds agree; between processes and over seconds they
do not. One window a session makes the session's figure one draw of the host's mode, so the baseline's sessions
spread 13-16% apart, the thresholds rose to 18-25% and a 15% slowdown went unseen.

What. The test's own window (in the pytest process, with its profile and telemetry) and ``count - 1`` visits in the
session's visit workers, fresh processes of this interpreter started once per device, each a draw of whatever a process
keeps; the plugin takes the workers' visits between the session's other tests, so they also fall at other times
(:mod:`hwregress.plugin.visits`). Every visit is a fixed window of the plan's rounds (no looks, no extension). The
judged figure is the fastest visit's rounds (the highest median): what the machine runs when nothing slows its host,
the same figure in the baseline and in the session judged against it. The other visits are reported beside it, with
how many ran slow.

What it guarantees, and where it does not (``scripts/visits_simulation.py``,
``tests/measure/test_visits_simulation.py``): under a host that runs a quarter of its processes, or of its time, 15%
slow, four visits in four processes at times farther apart than its slow phases give false regressions at most alpha and
catch a 10% slowdown with 90% probability, where one window a session gives ~12% false regressions. Slow phases longer
than the visits' spread, or a host slow in every process, are not averaged out: the record keeps each visit's time and
process so the report shows it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_VISITS = 4  # on CUDA, where a launch-bound window's host is known to run in modes (docs/measured.md)
AUTO_KINDS = ("cuda",)  # device kinds whose launch-bound tests are visited by default
LAUNCH_BOUND_MODES = ("infer", "prefill", "decode")
SLOW_SHARE = 0.10  # a visit whose median is more than 10% below the fastest's ran slow
HOST_FACTS = ("thread_involuntary_switches", "thread_migrations", "thread_cpu_before", "thread_cpu_after",
              "host_speed_before_ns", "host_speed_after_ns", "steal_fraction", "other_cpu_fraction", "cpu_freq_mhz")


def launch_bound(mode: str | None, batch_size: Any) -> bool:
    """Whether a window of ``mode`` at ``batch_size`` is launch-bound on an accelerator: one input's inference, prompt
    pass or decode step, whose kernels are too small for the device to outrun the host that launches them."""
    return mode in LAUNCH_BOUND_MODES and batch_size == 1


def visits_for(setting: int | None, device_kind: str, mode: str | None, batch_size: Any) -> int:
    """How many visits a window gets: 1 (its own window alone) unless it is :func:`launch_bound`; then ``setting``
    (``--visits``), or where none is given :data:`DEFAULT_VISITS` on :data:`AUTO_KINDS` and 1 elsewhere."""
    if not launch_bound(mode, batch_size):
        return 1
    if setting is not None:
        return setting
    return DEFAULT_VISITS if device_kind in AUTO_KINDS else 1


@dataclass(frozen=True)
class Visit:
    """One visit's window.

    Attributes:
        process: who ran it: ``"pytest"`` (the test's own process) or ``"visit worker N"``.
        pid: that process's id.
        started_s: when the window started, seconds on the session's clock (``time.monotonic`` of this host).
        samples: throughput per timed round, in the test's unit (samples/s or tokens/s).
        latency_ms: the window's judged latency (a decode window's inter-token latency p50, ms), else None.
        host: the host's facts over the window (:data:`HOST_FACTS` of
            :class:`hwregress.hardware.health.CpuHealthProbe`).
    """

    process: str
    pid: int
    started_s: float
    samples: Sequence[float]
    latency_ms: float | None = None
    host: Mapping[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        ordered = sorted(self.samples)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0

    def to_dict(self) -> dict[str, Any]:
        """The visit as JSON-able figures (its samples kept as its median and round count)."""
        return {"process": self.process, "pid": self.pid, "started_s": round(self.started_s, 3),
                "median": self.median, "rounds": len(self.samples), "latency_ms": self.latency_ms,
                "host": {key: self.host.get(key) for key in HOST_FACTS if key in self.host}}


def fastest(visits: Sequence[Visit]) -> Visit:
    """The visit with the highest median (the first of equals).

    Raises:
        ValueError: no visit, or one without samples.
    """
    if not visits or any(not visit.samples for visit in visits):
        raise ValueError(f"{len(visits)} visit(s), each needs samples; a launch-bound window needs at least one")
    return max(visits, key=lambda visit: visit.median)


def slow_visits(visits: Sequence[Visit], share: float = SLOW_SHARE) -> list[Visit]:
    """The visits whose median lies more than ``share`` below the fastest's."""
    best = fastest(visits).median
    return [visit for visit in visits if visit.median < (1.0 - share) * best]


def visit_figures(visits: Sequence[Visit]) -> dict[str, Any]:
    """What a record keeps of its visits: ``count``, ``judged`` (the index of the fastest), ``visits`` (each one's
    :meth:`Visit.to_dict`, in the order taken), ``spread_s`` (seconds from the first visit's start to the last's),
    ``slow`` (how many ran more than :data:`SLOW_SHARE` below the fastest) and ``slowest_ratio`` (the slowest
    median over the fastest's)."""
    best = fastest(visits)
    starts = [visit.started_s for visit in visits]
    return {"count": len(visits), "judged": list(visits).index(best), "visits": [v.to_dict() for v in visits],
            "spread_s": round(max(starts) - min(starts), 3), "slow": len(slow_visits(visits)),
            "slowest_ratio": min(visit.median for visit in visits) / best.median if best.median > 0 else None}

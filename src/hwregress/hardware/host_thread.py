"""The host as the thread that runs a window sees it: its involuntary context switches and migrations between CPUs,
the CPU it last ran on, and the host's speed now (a fixed pure-Python loop timed), for
:class:`hwregress.hardware.health.CpuHealthProbe`. Linux only where it says so; each read raises where it cannot be
made, and the probe turns that into an error of its one field."""

from __future__ import annotations

import time

HOST_SPEED_LOOP = 20_000  # iterations of host_speed_ns's loop: ~0.3-1 ms on a 2-4 GHz core
HOST_SPEED_REPEATS = 5


def host_speed_ns(loop: int = HOST_SPEED_LOOP, repeats: int = HOST_SPEED_REPEATS) -> float:
    """The host's speed now: ns per iteration of a fixed pure-Python loop, the fastest of ``repeats`` timings (the
    fastest is the least disturbed: what the core can do at this moment). Comparable within one interpreter and
    machine only; larger is slower."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter_ns()
        total = 0
        for i in range(loop):
            total += i & 7
        best = min(best, time.perf_counter_ns() - started)
    return best / loop


def involuntary_switches() -> int:
    """Involuntary context switches of the calling thread so far (Linux ``RUSAGE_THREAD``).

    Raises:
        AttributeError: no ``RUSAGE_THREAD`` here (not Linux).
    """
    import resource

    return int(resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw)


def migrations() -> int:
    """Migrations of the calling thread between CPUs so far (``se.nr_migrations`` of ``/proc/thread-self/sched``).

    Raises:
        OSError: no such file; KeyError: the kernel does not list the field (built without scheduler statistics).
    """
    with open("/proc/thread-self/sched", encoding="utf-8") as sched:
        fields = {name.strip(): value.strip() for name, value in (line.split(":", 1) for line in sched if ":" in line)}
    return int(fields["se.nr_migrations"])


def last_cpu() -> int:
    """The CPU the calling thread last ran on (field 39 of ``/proc/thread-self/stat``).

    Raises:
        OSError: no such file.
    """
    with open("/proc/thread-self/stat", encoding="utf-8") as stat:
        text = stat.read()
    return int(text.rsplit(")", 1)[1].split()[36])  # fields after "(comm)" start at field 3

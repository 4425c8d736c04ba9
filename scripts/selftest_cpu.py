"""Where the self-tests' time goes: each test's wall time and the CPU time of its process tree, to tell a test that
computes (its processes busy: fewer or cheaper processes cut it) from one that waits (a sleep, a timeout, a JVM's
start: a shorter wait cuts it, and a core is idle meanwhile).

As a pytest plugin it appends one JSON line per test to the file named by ``HWREGRESS_SELFTEST_CPU`` (default
``selftest_cpu.jsonl``): ``{"id", "wall", "cpu"}``, seconds from the test's setup to its teardown. ``cpu`` is the
change over the test of the user + system time of the pytest process (the xdist worker), of every live descendant
and of the children each of them has reaped (:func:`hwregress.hardware.health.tree_cpu_seconds`, as the contention
check reads its own process tree): the test's own work, its subprocesses', the zygote's forked sessions' and their
ranks and workers'. A descendant that is not reaped inside the tree (a
process that outlives its parent: Spark's JVMs, it seems) is not counted, so for such tests the idle time is an upper
bound. With ``-n 2`` each worker's tree is its own, so the figures of parallel tests do not mix.

As a script it prints the table by room (``tests/<room>/``) and the tests that waited the most.

Usage:
    HWREGRESS_SELFTEST_CPU=/tmp/cpu.jsonl python -m pytest tests -n 2 -p scripts.selftest_cpu
    python scripts/selftest_cpu.py /tmp/cpu.jsonl [--top 20]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from hwregress.hardware.health import tree_cpu_seconds

OUTPUT_VARIABLE = "HWREGRESS_SELFTEST_CPU"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cpu, wall = tree_cpu_seconds(psutil.Process()), time.monotonic()
    yield
    line = {"id": item.nodeid, "wall": time.monotonic() - wall, "cpu": tree_cpu_seconds(psutil.Process()) - cpu}
    with open(os.environ.get(OUTPUT_VARIABLE, "selftest_cpu.jsonl"), "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


def by_room(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """``{room: (wall s, cpu s)}`` summed over the room's tests, the room being the folder under ``tests/``."""
    rooms: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        parts = row["id"].split("::")[0].split("/")
        room = rooms[parts[1] if len(parts) > 2 else parts[0]]
        room[0] += row["wall"]
        room[1] += row["cpu"]
    return {name: (wall, cpu) for name, (wall, cpu) in rooms.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lines", type=Path, help="the JSON lines the plugin wrote")
    parser.add_argument("--top", type=int, default=20, help="how many of the tests that waited the most to list")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.lines.read_text(encoding="utf-8").splitlines() if line.strip()]
    wall, cpu = sum(r["wall"] for r in rows), sum(r["cpu"] for r in rows)
    print(f"{len(rows)} tests: {wall:.0f} s of worker time, {cpu:.0f} s of CPU in their process trees")
    print(f"{'room':<12} {'wall s':>8} {'cpu s':>8} {'waited s':>9}")
    for room, (room_wall, room_cpu) in sorted(by_room(rows).items(), key=lambda item: -item[1][0]):
        print(f"{room:<12} {room_wall:8.0f} {room_cpu:8.0f} {max(0.0, room_wall - room_cpu):9.0f}")
    print(f"\nthe {args.top} tests that waited the most (wall - cpu):")
    for row in sorted(rows, key=lambda r: r["cpu"] - r["wall"])[:args.top]:
        print(f"{row['wall']:7.1f} s wall {row['cpu']:7.1f} s cpu  {row['id']}")


if __name__ == "__main__":
    main()

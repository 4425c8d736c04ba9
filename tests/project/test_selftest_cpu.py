"""scripts/selftest_cpu.py: each test's wall time beside its process tree's CPU time, from a real pytest session, and
the table by room."""

from __future__ import annotations

import json
import os

from support.project import REPO

from scripts.selftest_cpu import OUTPUT_VARIABLE, by_room

INNER_TESTS = """
import subprocess
import sys
import time


def test_computes():
    started = time.process_time()
    while time.process_time() - started < 0.3:  # ends only once this process has used 0.3 s of CPU
        pass


def test_waits():
    time.sleep(0.5)


def test_a_child_computes():  # a subprocess's CPU, reaped by the test's process, counts for the test
    subprocess.run([sys.executable, "-c", "import time\\nt = time.process_time()\\n"
                    "while time.process_time() - t < 0.3: pass"], check=True)
"""


def test_a_session_under_the_plugin_writes_each_tests_wall_and_process_tree_cpu(pytester, monkeypatch):
    lines = pytester.path / "cpu.jsonl"
    monkeypatch.setenv(OUTPUT_VARIABLE, str(lines))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(test_inner=INNER_TESTS)
    # the tool alone: not the hwregress plugin (its report folder, its store) nor pytest-benchmark
    result = pytester.runpytest_subprocess("-p", "scripts.selftest_cpu", "-p", "no:cacheprovider",
                                           "-p", "no:hwregress.plugin", "-p", "no:benchmark")
    result.assert_outcomes(passed=3)
    rows = {row["id"].rsplit("::", 1)[1]: row for row in map(json.loads, lines.read_text().splitlines())}
    assert set(rows) == {"test_computes", "test_waits", "test_a_child_computes"}
    # each used 0.3 s of CPU by its own clock; the kernel's counts psutil reads are in ticks (10 ms here)
    assert rows["test_computes"]["cpu"] >= 0.25 and rows["test_a_child_computes"]["cpu"] >= 0.25
    waits = rows["test_waits"]
    assert waits["wall"] >= 0.5 and waits["cpu"] < 0.3  # a sleep is wall time, not CPU


def test_rooms_are_the_folders_under_tests():
    rows = [{"id": "tests/spark/test_a.py::test_x", "wall": 10.0, "cpu": 2.0},
            {"id": "tests/spark/test_b.py::test_y[1]", "wall": 5.0, "cpu": 1.0},
            {"id": "tests/judge/test_c.py::test_z", "wall": 1.0, "cpu": 1.5},
            {"id": "test_top.py::test_t", "wall": 0.5, "cpu": 0.5}]
    assert by_room(rows) == {"spark": (15.0, 3.0), "judge": (1.0, 1.5), "test_top.py": (0.5, 0.5)}


def test_a_test_file_directly_under_tests_is_in_the_room_tests():
    assert by_room([{"id": "tests/test_x.py::test_t", "wall": 1.0, "cpu": 0.5}]) == {"tests": (1.0, 0.5)}

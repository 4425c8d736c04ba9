"""What a large history costs to read: builds a synthetic history file of real-sized rows and measures, each in a
fresh process, the wall time and peak memory (max RSS) of reading it alone and of ``python -m hwregress history``
over it (the figures in docs/history.md).

    python scripts/history_read_cost.py [--rows 60000] [--tests 200] [--dir /tmp/history-cost] [--profile]

Rows are shaped as a CPU session writes them (identity, environment, health, about 1.7 KB each: 60,000 rows make
about 100 MB); ``--tests`` tests share the rows, one row per test per session, a day apart, medians with 1% noise.
``--profile`` prints the top of a cProfile of the history command instead of measuring.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

KEY = "amd-epyc-7b13-f25m1-2t"
START = _dt.datetime(2024, 1, 1, 2, 0, tzinfo=_dt.timezone.utc)
IDENTITY = {"cpu_amx_bf16": False, "cpu_amx_int8": False, "cpu_amx_tile": False, "cpu_asimd": False,
            "cpu_avx2": True, "cpu_avx512_bf16": True, "cpu_avx512_fp16": False, "cpu_avx512_vnni": True,
            "cpu_avx512bw": True, "cpu_avx512f": True, "cpu_brand": "AMD EPYC 7B13", "cpu_family": 25, "cpu_fma": True,
            "cpu_l2_cache_bytes": 2097152, "cpu_l3_cache_bytes": 33554432, "cpu_logical_cores": 2, "cpu_max_mhz": None,
            "cpu_model": 1, "cpu_physical_cores": 2, "cpu_stepping": 1, "cpu_sve": False, "cpu_sve2": False,
            "cpu_vendor": "AuthenticAMD", "memory_gib": 24, "torch_threads": 2}
ENVIRONMENT = {"cuda": None, "cudnn": None, "cudnn_benchmark": None, "driver": None, "platform": "linux-x86_64",
               "python": "3.11.7", "torch": "2.13.0+cpu", "torchvision": "0.28.0"}
READ_ONLY = ("import sys; from hwregress.store.history import read_history; "
             "read = read_history(sys.argv[1]); print(len(read.rows), len(read.warnings))")


def row(session: int, test: int, median: float) -> dict[str, Any]:
    """One history row as a CPU session writes it (``hwregress.store.history_row.row_from_record``)."""
    spread = median * 0.02
    return {
        "v": 1, "session": f"runner-{session:05d}-20240101T020000Z", "test_id":
        f"bench_tests/test_throughput.py::test_throughput[cpu-model{test:03d}-train-bs{1 + test % 64}-fp32]",
        "time": (START + _dt.timedelta(days=session)).isoformat(), "hardware_key": KEY, "device": "cpu",
        "device_name": "AMD EPYC 7B13", "family": "throughput", "model": f"model{test:03d}", "mode": "train",
        "batch_size": 1 + test % 64, "dtype": "fp32", "identity": IDENTITY, "hwregress_version": "0.1.0",
        "environment": ENVIRONMENT, "packages": "df1c888cc936ed73", "unit": "samples/s", "median": median,
        "q1": median - spread, "q3": median + spread, "iqr": 2 * spread, "n": 8, "verdict": "pass",
        "ratio": median / 100.0, "threshold": 0.05, "baseline_median": 100.0,
        "baseline_recorded_at": START.isoformat(), "telemetry": {"cpu_util_pct": 98.5},
        "health": {"cpu_freq_mhz": 2596.122, "other_cpu_fraction": 0.0, "steal_fraction": 0.0}, "diagnosis": [],
    }


def build(directory: Path, rows: int, tests: int, seed: int = 1) -> Path:
    """``directory/<KEY>.jsonl`` with ``rows`` rows (whole sessions of ``tests`` rows each, the last maybe part)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{KEY}.jsonl"
    noise = np.random.default_rng(seed).standard_normal(rows)
    with path.open("w", encoding="utf-8") as stream:
        for index in range(rows):
            session, test = divmod(index, tests)
            stream.write(json.dumps(row(session, test, 100.0 * (1 + 0.01 * float(noise[index]))), sort_keys=True)
                         + "\n")
    return path


def measure(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of ``command`` run in a child process, its stdout discarded."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited with {os.waitstatus_to_exitcode(status)}")
    return time.perf_counter() - started, usage.ru_maxrss / 1024  # Linux: ru_maxrss in KiB


def _profile(directory: Path) -> None:
    """The top of a cProfile of ``python -m hwregress history`` over ``directory``, in this process."""
    import cProfile
    import pstats

    from hwregress.cli import main as cli_main

    with open(os.devnull, "w") as devnull:
        stdout, sys.stdout = sys.stdout, devnull
        try:
            profile = cProfile.Profile()
            profile.runcall(cli_main, ["history", "--dir", str(directory)])
        finally:
            sys.stdout = stdout
    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--tests", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/history-cost"))
    parser.add_argument("--profile", action="store_true", help="cProfile the history command instead of measuring")
    args = parser.parse_args()
    path = build(args.dir, args.rows, args.tests)
    print(f"{path}: {args.rows} rows, {path.stat().st_size / 1e6:.1f} MB", flush=True)
    if args.profile:
        _profile(args.dir)
        return
    baseline_s, baseline_mib = measure([sys.executable, "-c", "import hwregress.store.history"])
    read_s, read_mib = measure([sys.executable, "-c", READ_ONLY, str(path)])
    history_s, history_mib = measure([sys.executable, "-m", "hwregress", "history", "--dir", str(args.dir)])
    print(f"| what | wall s | peak RSS MiB |\n| --- | --- | --- |\n"
          f"| import only | {baseline_s:.1f} | {baseline_mib:.0f} |\n"
          f"| read_history | {read_s:.1f} | {read_mib:.0f} |\n"
          f"| python -m hwregress history | {history_s:.1f} | {history_mib:.0f} |")
    print(f"(peak RSS of this script's children: {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f}"
          " MiB)")


if __name__ == "__main__":
    main()

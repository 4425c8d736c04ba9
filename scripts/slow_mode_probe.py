"""Why does a launch-bound window land in a slow mode? A probe for a lent GPU (or the CPU): several fresh processes,
each timing many short windows of one launch-bound case in turn, every window with its host facts (the thread's
involuntary switches and migrations, its CPU, the host's speed before and after: :mod:`hwregress.hardware.host_thread`).

It prints, per process, its windows' medians; how far windows spread within a process and how far the processes'
medians spread (a process-mode host: the second large, the first small; a host with phases in time: both alike); and
the rank correlation (Spearman, scipy) of a window's speed with the host's speed and with its involuntary switches
(a slow host: window speed follows the host's). The whole record goes to ``--out`` as JSON.

Usage: ``PYTHONPATH=src:. python scripts/slow_mode_probe.py --device cuda:0 --model resnet50 --processes 4
--windows 15 --out probe.json`` (about processes x (start + windows x 0.6 s)).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

FACTS = ("thread_involuntary_switches", "thread_migrations", "thread_cpu_before", "thread_cpu_after",
         "host_speed_before_ns", "host_speed_after_ns", "steal_fraction", "other_cpu_fraction")


def child(device: str, model: str, mode: str, context: int | None, windows: int, rounds: int,
          round_s: float) -> None:
    """Time ``windows`` windows here; one JSON line each on stdout."""
    import os

    from hwregress import workloads
    from hwregress.measure.llm.window import run_llm
    from hwregress.measure.precision.numerics import LLM_MODES
    from hwregress.measure.timing import TimingPlan, default_timer
    from hwregress.measure.window import RunOptions, run_model

    workload = workloads.get(model)
    plan = TimingPlan(warmup_steps=3, rounds=rounds, min_round_s=round_s, max_rel_iqr=math.inf)
    for index in range(windows):
        started = time.monotonic()
        if mode in LLM_MODES:
            measurement = run_llm(workload, device, mode, 1, "fp32", context or workload.seq_len or 1, plan,
                                  profile=False).measurement
        else:
            measurement = run_model(workload, device, mode, 1, "fp32", default_timer(device),
                                    RunOptions(plan, profile_steps=0), context)
        samples = measurement.throughput_samples
        print(json.dumps({"pid": os.getpid(), "window": index, "started_s": started,
                          "median": statistics.median(samples), "samples": samples,
                          "host": {key: measurement.health.get(key) for key in FACTS},
                          "telemetry": measurement.telemetry.get("metrics", {})}), flush=True)


def robust_spread(values: list[float]) -> float:
    """MAD x 1.4826 / median."""
    middle = statistics.median(values)
    return 1.4826 * statistics.median([abs(v - middle) for v in values]) / middle if middle > 0 else 0.0


def summary(windows: list[dict[str, Any]]) -> list[str]:
    """The lines the probe prints (see the module doc)."""
    from scipy import stats

    by_process: dict[int, list[dict[str, Any]]] = {}
    for window in windows:
        by_process.setdefault(window["pid"], []).append(window)
    lines = ["| process | windows | medians (in order) |", "| --- | ---: | --- |"]
    for pid, mine in by_process.items():
        medians = ", ".join(f"{window['median']:.1f}" for window in mine)
        lines.append(f"| {pid} | {len(mine)} | {medians} |")
    within = statistics.median([robust_spread([w["median"] for w in mine]) for mine in by_process.values()])
    between = robust_spread([statistics.median([w["median"] for w in mine]) for mine in by_process.values()])
    lines.append(f"\nwindows' spread within a process (median over processes): {within:.1%}; the processes' medians' "
                 f"spread: {between:.1%}")
    speeds = [w["median"] for w in windows]
    for fact in ("host_speed_before_ns", "thread_involuntary_switches", "thread_migrations"):
        paired = [(s, w["host"].get(fact)) for s, w in zip(speeds, windows, strict=True)
                  if isinstance(w["host"].get(fact), (int, float))]
        if len(paired) >= 5 and len({value for _, value in paired}) > 1:
            rho, p = stats.spearmanr([s for s, _ in paired], [value for _, value in paired])
            lines.append(f"window speed against {fact}: Spearman rho {rho:.2f} (p = {p:.2g}, {len(paired)} windows)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--mode", default="infer", choices=("infer", "prefill", "decode"))
    parser.add_argument("--context", type=int, default=None)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--windows", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-s", type=float, default=0.1)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.device, args.model, args.mode, args.context, args.windows, args.rounds, args.round_s)
        return
    windows: list[dict[str, Any]] = []
    command = [sys.executable, __file__, "--child", "--device", args.device, "--model", args.model, "--mode",
               args.mode, "--windows", str(args.windows), "--rounds", str(args.rounds), "--round-s", str(args.round_s),
               *(["--context", str(args.context)] if args.context else [])]
    for _ in range(args.processes):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode:
            print(done.stderr[-2000:], file=sys.stderr)
            sys.exit(done.returncode)
        windows += [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "windows": windows}, indent=1))
    print("\n".join(summary(windows)))


if __name__ == "__main__":
    main()

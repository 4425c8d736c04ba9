"""Measure the bisection's guarantee over many seeds (hwregress.bisect.simulation): per ladder of 16 candidates (a
step of 10%, 30%, 5% and none), how often the search names the planted culprit (or, for no step, says "no regression
between the endpoints"), its probes and pairs, and TorchBench's one-score-per-commit rule on the same ladders; then the
10% ladder with 1, 2 and 3 devices (probes a round, hwregress.bisect.search.bisect_in_rounds): rounds and wall time in
pairs.

Usage: python scripts/bisect_simulation.py [SEEDS] > docs/data/bisect_simulation_<date>.md
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter

from hwregress.bisect.search import CULPRIT, NO_REGRESSION
from hwregress.bisect.simulation import Noise, one_score_per_commit, simulated_bisection, wall_pairs

CANDIDATES = 16
STEPS = ((0.10, 10_000), (0.30, 20_000), (0.0, 30_000), (0.05, 40_000))  # (step, first seed)


def outcome(status: str, named: int | None, culprit: int) -> str:
    if status == CULPRIT:
        return "right culprit" if named == culprit else "wrong culprit"
    return status


def main(seeds: int) -> None:
    started = time.perf_counter()
    noise = Noise()
    print(f"# Bisection by simulation: {seeds} seeds per ladder of {CANDIDATES} candidates\n")
    print(f"`python scripts/bisect_simulation.py {seeds}`; noise: unit N(0, {noise.unit_sigma}), window "
          f"N(0, {noise.window_sigma}), session N(0, {noise.session_sigma}) (log units; "
          "hwregress.bisect.simulation).\n")
    print("| step | outcomes | median probes | most probes | median pairs |")
    print("| --- | --- | ---: | ---: | ---: |")
    for step, first in STEPS:
        runs = [simulated_bisection(CANDIDATES, step, first + seed) for seed in range(seeds)]
        counts = Counter(outcome(found.status, found.culprit, culprit) for found, culprit in runs)
        probes = [len(found.probes) for found, _ in runs]
        pairs = [sum(p.outcome.pairs for p in found.probes if p.outcome) for found, _ in runs]
        shown = ", ".join(f"{name} {count}" for name, count in counts.most_common())
        print(f"| {step:.0%} | {shown} | {statistics.median(probes):g} | {max(probes)} | "
              f"{statistics.median(pairs):g} |")
    named = [one_score_per_commit(CANDIDATES, 0.10, 50_000 + seed) for seed in range(seeds)]
    right = sum(found == culprit for found, culprit in named)
    print(f"\nOne score per commit (TorchBench's rule, 5% threshold), 10% step: right culprit {right} of {seeds}.")
    print("\nThe 10% ladder with probes at once, one per device (the same seeds as above):\n")
    print("| devices | outcomes | median rounds | median probes | median wall time (pairs) |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for width in (1, 2, 3):
        runs = [simulated_bisection(CANDIDATES, 0.10, 10_000 + seed, width=width) for seed in range(seeds)]
        counts = Counter(outcome(found.status, found.culprit, culprit) for found, culprit in runs)
        shown = ", ".join(f"{name} {count}" for name, count in counts.most_common())
        print(f"| {width} | {shown} | {statistics.median(len(f.rounds) for f, _ in runs):g} | "
              f"{statistics.median(len(f.probes) for f, _ in runs):g} | "
              f"{statistics.median(wall_pairs(f) for f, _ in runs):g} |")
    print(f"\nA step's {NO_REGRESSION!r} is a miss too; {seeds} seeds per ladder took "
          f"{time.perf_counter() - started:.0f} s.")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)

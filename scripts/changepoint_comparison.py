"""Compare the two maintained change-point detectors the history could use, on synthetic session series.

    pip install signal-processing-algorithms   # not a dependency of hwregress: only this script needs it
    python scripts/changepoint_comparison.py [--series 200] [--seed 1]

Detectors:
- ``ruptures PELT``: :func:`hwregress.judge.changepoints.change_points` (PELT, L1 cost on log medians, penalty
  3 sigma ln k), what hwregress uses.
- ``E-Divisive``: MongoDB's ``signal_processing_algorithms.energy_statistics.e_divisive`` (Matteson &
  James 2014) with the defaults its change-point service uses (p = 0.05, 100 permutations), on the same log
  medians.

Series (relative normal noise around 100): a 10% step at session 20 of 40 at 2% noise (hit: exactly one
change, at 20 +- 1), pure noise of 3% and 5% over 40 sessions (false alarm: any change), and a slow 1% per
session drift over 15 sessions at 1% noise (how many changes each detector cuts a ramp into). Prints one
Markdown table row per detector, with the mean time per series.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np

from hwregress.judge.changepoints import change_points


def _e_divisive(values: Sequence[float]) -> list[int]:
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

    return sorted(int(index)
                  for index in e_divisive(np.log(np.asarray(values, dtype=float)), pvalue=0.05, permutations=100))


def _pelt(values: Sequence[float]) -> list[int]:
    return [change.index for change in change_points(values)]


def _series(rng: np.random.Generator, n: int, noise: float, step_at: int | None = None, step: float = 0.0,
            drift: float = 0.0) -> np.ndarray:
    values = 1.0 + noise * rng.standard_normal(n)
    if step_at is not None:
        values[step_at:] *= 1.0 - step
    return 100.0 * values * (1.0 - drift) ** np.arange(n)


def evaluate(detect: Callable[[Sequence[float]], list[int]], count: int, seed: int) -> dict[str, float]:
    """Rates over ``count`` series of each kind (fractions) and the mean seconds per series."""
    rng = np.random.default_rng(seed)
    started, calls = time.perf_counter(), 0
    hits = false_3 = false_5 = 0
    for _ in range(count):
        found = detect(_series(rng, 40, 0.02, step_at=20, step=0.10))
        hits += len(found) == 1 and abs(found[0] - 20) <= 1
        false_3 += bool(detect(_series(rng, 40, 0.03)))
        false_5 += bool(detect(_series(rng, 40, 0.05)))
        calls += 3
    ramp_cuts = [len(detect(_series(rng, 15, 0.01, drift=0.01))) for _ in range(count // 2)]
    calls += len(ramp_cuts)
    return {"step found at 20+-1": hits / count, "false @3%": false_3 / count, "false @5%": false_5 / count,
            "changes in a 1%/session ramp": float(np.mean(ramp_cuts)),
            "ms per series": 1000.0 * (time.perf_counter() - started) / calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    detectors = {"ruptures PELT (hwregress)": _pelt, "E-Divisive (signal-processing-algorithms)": _e_divisive}
    header = None
    for name, detect in detectors.items():
        row = evaluate(detect, args.series, args.seed)
        if header is None:
            header = ["detector", *row]
            print("| " + " | ".join(header) + " |\n|" + " --- |" * len(header))
        cells = [f"{v:.1%}" if k.startswith(("step", "false")) else f"{v:.2f}" if "ramp" in k else f"{v:.1f}"
                 for k, v in row.items()]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

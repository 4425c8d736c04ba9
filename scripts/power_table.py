"""Detection power and A/A false-alarm rate of ``hwregress.judge.stats.compare`` on synthetic data.

Each trial draws, around a level of 1000 (any unit, higher is better):

* a baseline window of ``--rounds`` samples with relative noise ``sigma``,
* a history of ``--history`` session medians of that baseline, each off the level by the same noise,
* a current window of ``--rounds`` samples at ``level * (1 - slowdown)`` with the same noise,

and counts how often ``compare`` calls it a regression (slowdown > 0) or anything but "none" (the A/A
column, slowdown 0). Relative noise is ``1 + sigma * N(0, 1)`` (``--noise normal``) or
``exp(sigma * N(0, 1))`` (``--noise lognormal``). Seeded: the same arguments print the same table.

Usage: ``python scripts/power_table.py [--trials 1000] [--seed 20261123] [--noise normal]``
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from hwregress.judge import stats

LEVEL = 1000.0
NOISES = (0.01, 0.03, 0.10)
SLOWDOWNS = (0.05, 0.10, 0.20, 0.50)


def relative_noise(rng: np.random.Generator, sigma: float, size: int, model: str) -> np.ndarray:
    """Multiplicative noise factors, shape (size,): ``1 + sigma N`` or ``exp(sigma N)``."""
    draws = rng.standard_normal(size)
    return np.exp(sigma * draws) if model == "lognormal" else 1.0 + sigma * draws


def rate(rng: np.random.Generator, sigma: float, slowdown: float, args: argparse.Namespace) -> float:
    """Fraction of ``args.trials`` trials that ``compare`` flags (a regression, or any change for A/A)."""
    flagged = 0
    for _ in range(args.trials):
        baseline = LEVEL * relative_noise(rng, sigma, args.rounds, args.noise)
        history = LEVEL * relative_noise(rng, sigma, args.history, args.noise)
        current = LEVEL * (1 - slowdown) * relative_noise(rng, sigma, args.rounds, args.noise)
        direction = stats.compare(current, baseline, args.tolerance, history=history).direction
        flagged += direction == "regression" if slowdown else direction != "none"
    return flagged / args.trials


def table(args: argparse.Namespace) -> str:
    """The Markdown table: one row per noise level, A/A false alarms then detection per slowdown."""
    rng = np.random.default_rng(args.seed)
    header = ["noise (sd/mean)", "A/A false alarms"] + [f"{s:.0%} slower detected" for s in SLOWDOWNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for sigma in NOISES:
        cells = [f"{sigma:.0%}", f"{rate(rng, sigma, 0.0, args):.1%}"]
        cells += [f"{rate(rng, sigma, s, args):.1%}" for s in SLOWDOWNS]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"{args.trials} trials per cell, seed {args.seed}, {args.noise} relative noise, {args.rounds} "
                 f"rounds each side, history of {args.history} session medians, tolerance {args.tolerance:.0%}, "
                 f"threshold cap {stats.DEFAULT_MAX_THRESHOLD:.0%}, alpha 0.01, z 3.")
    return "\n".join(lines)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--noise", choices=("normal", "lognormal"), default="normal")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--history", type=int, default=8)
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args(argv)
    if args.trials < 1 or args.rounds < 2 or args.history < 0:
        parser.error(f"need --trials >= 1, --rounds >= 2, --history >= 0 (got {args.trials}, {args.rounds}, "
                     f"{args.history})")
    return args


if __name__ == "__main__":
    print(table(parse()))

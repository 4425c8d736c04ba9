"""How often the history's status is right, on synthetic session series (the README's history table).

    python scripts/history_power.py [--series 200] [--seed 1]

Each series is a run of session medians with relative normal noise around 100 samples/s, times one day apart,
analysed by :func:`hwregress.judge.trends.analyze` at its default tolerance (5%). Rows after a step carry the verdict
``regression`` (the per-run threshold saw it); drifting rows all ``pass``; the baseline is the first session's
level (or absent: judged against the series itself). Prints one Markdown row per scenario: the share of series
with each status, and for steps the share whose change point lies within one session of the true one.
"""

from __future__ import annotations

import argparse
import datetime as _dt
from collections import Counter
from typing import Any

import numpy as np

from hwregress.judge.trends import STATUSES, analyze

START = _dt.datetime(2026, 1, 1, tzinfo=_dt.timezone.utc)


def _rows(medians: np.ndarray, baseline: float | None, flagged_from: int | None) -> list[dict[str, Any]]:
    return [{"test_id": "t", "hardware_key": "k", "unit": "samples/s",
             "time": (START + _dt.timedelta(days=i)).isoformat(),
             "median": float(m), "baseline_median": baseline,
             "verdict": "regression" if flagged_from is not None and i >= flagged_from else "pass"}
            for i, m in enumerate(medians)]


def scenario(rng: np.random.Generator, count: int, sessions: int, noise: float, step_at: int | None = None,
             step: float = 0.0, drift: float = 0.0, baseline: bool = True) -> tuple[Counter, float | None]:
    """Status counts over ``count`` series, and the share of steps located within one session (None: no step)."""
    statuses: Counter = Counter()
    located = 0
    for _ in range(count):
        medians = 100.0 * (1.0 + noise * rng.standard_normal(sessions)) * (1.0 - drift) ** np.arange(sessions)
        if step_at is not None:
            medians[step_at:] *= 1.0 - step
        trend = analyze(_rows(medians, 100.0 if baseline else None, step_at))
        statuses[trend.status] += 1
        located += step_at is not None and any(abs(c.change.index - step_at) <= 1 for c in trend.changes)
    return statuses, (located / count if step_at is not None else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    cases = [("10% step at 20 of 40, 2% noise", dict(sessions=40, noise=0.02, step_at=20, step=0.10)),
             ("5% step at 20 of 40, 2% noise", dict(sessions=40, noise=0.02, step_at=20, step=0.05)),
             *[(f"no change, 40 sessions, {n:.0%} noise", dict(sessions=40, noise=n))
               for n in (0.02, 0.03, 0.05, 0.10)],
             ("no change, 40 sessions, 3% noise, no baseline", dict(sessions=40, noise=0.03, baseline=False)),
             ("1%/session drift over 15, 1% noise", dict(sessions=15, noise=0.01, drift=0.01)),
             ("1%/session drift over 15, 2% noise", dict(sessions=15, noise=0.02, drift=0.01)),
             ("0.5%/session drift over 20, 1% noise", dict(sessions=20, noise=0.01, drift=0.005))]
    print("| series | " + " | ".join(STATUSES[:-1]) + " | change point at the step ±1 |\n|"
          + " --- |" * (len(STATUSES) + 1))
    for name, kwargs in cases:
        counts, located = scenario(rng, args.series, **kwargs)
        shares = " | ".join(f"{counts[s] / args.series:.1%}" for s in STATUSES[:-1])
        print(f"| {name} | {shares} | {'–' if located is None else f'{located:.1%}'} |", flush=True)


if __name__ == "__main__":
    main()

"""The guarantee of visits (issue 39 part 2): on a host whose processes, or whose phases in time, run a quarter slow by
15% (the H200's launch-bound tests: docs/measured.md), a launch-bound test judged on the fastest of 4 visits makes
false regressions at most alpha and catches a 10% slowdown with 90% probability, its stated MDS below 10%, through the
real timing loop, lifecycle, verdict and reach (``scripts/visits_simulation.py``: 3 recorded sessions, one judged;
visits 30 s apart). The same simulation of one window a session (the code before visits) fails it.

Measured with this code (seed 39, 2,000 trials a cell; docs/data/visits_simulation.md has the whole table): one window
a session made 11.7% (process modes) and 6.6% (phases) false regressions and caught a 10% slowdown in 58% and 56% of
the trials; four visits made 0.35% on both and caught it in 98.9% and 99.3%, the stated MDS 6.2%. Here 1,500 trials a
cell (Monte-Carlo SE at alpha 0.26%, so the false-regression bound is alpha + 3 SE = 1.77%; at 90% power 0.77%)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scripts.visits_simulation import DEFAULTS, MODELS, simulate

TRIALS = 1500
SEED = 39
ALPHA = DEFAULTS.alpha


def _bound(rate: float, trials: int) -> float:
    return 3 * math.sqrt(rate * (1 - rate) / trials)


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_four_visits_are_false_regressions_at_most_alpha_and_catch_ten_percent(model):
    unchanged = simulate(model, 4, TRIALS, SEED)
    assert unchanged.regressions <= ALPHA + _bound(ALPHA, TRIALS), dict(unchanged.verdicts)
    slower = simulate(model, 4, TRIALS, SEED, slowdown=0.10)
    assert slower.regressions >= 0.90 - _bound(0.90, TRIALS), dict(slower.verdicts)
    assert np.median(slower.mds) <= 0.10 and np.median(unchanged.mds) <= 0.10


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_one_window_a_session_fails_the_same_guarantee(model):
    trials = 500
    unchanged = simulate(model, 1, trials, SEED)
    assert unchanged.regressions > ALPHA + _bound(ALPHA, trials), dict(unchanged.verdicts)

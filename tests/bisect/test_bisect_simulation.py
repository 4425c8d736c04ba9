"""The bisection's guarantee, by seeded simulation through the real decision loop (hwregress.bisect.simulation):
every probe is an A/B run by hwregress.ab.session.judged_at_looks (the balanced AB/BA order, process pairs as units,
the signed-rank test and the Hodges-Lehmann interval at the planned looks of hwregress.bisect.budget) on pairs drawn
from the noise the CPU A/B measured, and the search is hwregress.bisect.search's.

Over 20 seeds per ladder of 16 candidates (a 10% step at a seeded candidate, a 30% step, no step) the culprit is
found in at least 19 and the flat ladder gives "no regression between the endpoints" in at least 19, with at most
log2(16) + 3 = 7 probes in the median (1,000 seeds each: docs/bisect.md). The rule it replaces, TorchBench's one
score per commit against a fixed threshold, finds the 10% culprit far less often: the last test fails on it.
"""

from __future__ import annotations

import math
import statistics

from hwregress.bisect.search import CULPRIT, NO_REGRESSION
from hwregress.bisect.simulation import one_score_per_commit, simulated_bisection, wall_pairs

CANDIDATES = 16
SEEDS = 20
MEDIAN_PROBES = math.log2(CANDIDATES) + 3


def test_a_ten_percent_step_is_found_in_19_of_20_seeds_within_the_median_probes():
    runs = [simulated_bisection(CANDIDATES, 0.10, seed) for seed in range(SEEDS)]
    assert sum(f.status == CULPRIT and f.culprit == c for f, c in runs) >= 19, [(f.status, f.culprit, c)
                                                                                for f, c in runs]
    assert statistics.median(len(f.probes) for f, _ in runs) <= MEDIAN_PROBES


def test_a_thirty_percent_step_is_found_in_19_of_20_seeds_within_the_median_probes():
    runs = [simulated_bisection(CANDIDATES, 0.30, 100 + seed) for seed in range(SEEDS)]
    assert sum(f.status == CULPRIT and f.culprit == c for f, c in runs) >= 19
    assert statistics.median(len(f.probes) for f, _ in runs) <= MEDIAN_PROBES


def test_a_flat_ladder_is_no_regression_between_the_endpoints_in_19_of_20_seeds():
    runs = [simulated_bisection(CANDIDATES, 0.0, 200 + seed) for seed in range(SEEDS)]
    assert sum(f.status == NO_REGRESSION for f, _ in runs) >= 19, [f.status for f, _ in runs]
    assert all(len(f.probes) == 1 for f, _ in runs)


def test_one_score_per_commit_would_miss_the_ten_percent_culprit_that_the_probes_find():
    named = [one_score_per_commit(CANDIDATES, 0.10, seed) for seed in range(SEEDS)]
    assert sum(found == culprit for found, culprit in named) < 19  # the old rule fails the guarantee the probes keep


def test_three_devices_find_the_ten_percent_culprit_as_often_in_fewer_rounds_and_less_wall_time():
    one = [simulated_bisection(CANDIDATES, 0.10, seed) for seed in range(SEEDS)]
    three = [simulated_bisection(CANDIDATES, 0.10, seed, width=3) for seed in range(SEEDS)]
    assert sum(f.status == CULPRIT and f.culprit == c for f, c in three) >= 19
    assert statistics.median(len(f.rounds) for f, _ in three) <= 3 < statistics.median(len(f.rounds) for f, _ in one)
    assert statistics.median(wall_pairs(f) for f, _ in three) < statistics.median(wall_pairs(f) for f, _ in one)
    assert all(len(members) <= 3 for f, _ in three for members in f.rounds)

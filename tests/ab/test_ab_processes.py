"""The process pair as the unit of the A/B verdict (hwregress.ab.processes): a failed window drops its whole process
pair, the units are the process pairs' mean log-ratios, and a seeded simulation of A/A tests whose worker processes
each keep their own speed, judged through the real code (hwregress.ab.session.judge_pairs) with and without the
process as the unit."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from hwregress.ab.order import balanced_order
from hwregress.ab.pairs import Pair
from hwregress.ab.processes import kept_processes, unit_log_ratios
from hwregress.ab.session import PairPlan, judge_pairs
from hwregress.store.verdicts import Verdict


def test_a_failed_window_drops_every_pair_of_its_process_pair_saying_which_failed():
    pairs = [Pair(0, "AB", 10, 11, process=0), Pair(1, "BA", 10, None, b_error="OutOfMemoryError: x", process=0),
             Pair(2, "BA", 10, 9, process=1), Pair(3, "AB", 10, 10, process=1)]
    kept, dropped = kept_processes(pairs)
    assert [pair.index for pair in kept] == [2, 3] and [pair.index for pair in dropped] == [0, 1]
    assert all("process pair 0" in pair.dropped and "stack B's window of pair 1 failed (OutOfMemoryError: x)"
               in pair.dropped for pair in dropped)


def test_the_units_are_the_process_pairs_mean_log_ratios_then_pairs_without_a_process():
    pairs = [Pair(0, "AB", 10, 20, process=0), Pair(1, "BA", 10, 5, process=0),
             Pair(2, "AB", 10, 11, process=1), Pair(3, "BA", 10, 11, process=1),
             Pair(4, "AB", 10, 12), Pair(5, "BA", 10, 8)]
    assert unit_log_ratios(pairs) == pytest.approx([0.0, math.log(1.1), math.log(1.2), math.log(0.8)])


def test_pairs_without_a_process_are_kept_in_balance_as_before():
    pairs = [Pair(0, "AB", 10, 11), Pair(1, "BA", 10, None, b_error="boom"), Pair(2, "BA", 10, 9),
             Pair(3, "AB", 10, 10)]
    kept, dropped = kept_processes(pairs)
    assert [pair.index for pair in kept] == [0, 2] and [pair.index for pair in dropped] == [1, 3]


# --- A/A tests whose processes keep their own speed ------------------------------------------------------------

TRIALS = 2000
PLAN = PairPlan(steps=1, seed=0, threshold=0.0, looks=(20, 40))  # threshold 0: the levels alone stand guard
PROCESS_SD = 0.03  # log speed of one worker process for its life (the VM: per-run medians 0.92-1.05)
WINDOW_SD = 0.01  # log noise of one window


def _aa_test(rng: np.random.Generator, with_processes: bool) -> Verdict | None:
    """One A/A test through judge_pairs: every process pair's two workers each draw their own speed; the verdict of
    the first look that decides, None if none does."""
    order = balanced_order(PLAN.looks[-1], int(rng.integers(1 << 30)))
    pairs: list[Pair] = []
    for process in range(PLAN.looks[-1] // PLAN.pairs_per_process):
        speed_a, speed_b = rng.normal(0.0, PROCESS_SD, 2)
        for index in range(process * PLAN.pairs_per_process, (process + 1) * PLAN.pairs_per_process):
            a, b = np.exp([speed_a + rng.normal(0, WINDOW_SD), speed_b + rng.normal(0, WINDOW_SD)]) * 100.0
            pairs.append(Pair(index, order[index], float(a), float(b), process=process))
    if not with_processes:
        pairs = [replace(pair, process=None) for pair in pairs]
    for look, count in enumerate(PLAN.looks, start=1):
        comparison, _, _ = judge_pairs(pairs[:count], PLAN, look)
        if comparison is not None and comparison.verdict is not None:
            return comparison.verdict
    return None


@pytest.mark.slow
def test_aa_tests_of_processes_with_their_own_speed_are_false_changes_at_most_alpha_with_the_process_as_unit():
    rng = np.random.default_rng(29)
    found = {design: [_aa_test(rng, design) for _ in range(TRIALS)] for design in (True, False)}
    rates = {(design, verdict): found[design].count(verdict) / TRIALS
             for design in found for verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)}
    standard_error = math.sqrt(PLAN.alpha * (1 - PLAN.alpha) / TRIALS)  # 0.22% at alpha 0.01
    for verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT):  # each one-sided at alpha / K per look
        assert rates[(True, verdict)] <= PLAN.alpha + 3 * standard_error, rates
        # every pair a unit (the judging before the process pair was the unit: the same function on pairs without a
        # process): the processes' own speeds read as changes, 5.4% regressions and 5.9% improvements at seed 29
        assert rates[(False, verdict)] > 3 * PLAN.alpha, rates

"""The serving A/B's decision loop (hwregress.ab.session.judged_at_looks, with server pairs) on given pairs: the server
pairs it starts, the looks it takes, the pairs it drops; and, in seeded simulations through it, how often it calls an
injected +20% decode slowdown a regression and two identical stacks one.

The simulated noise is the measured one: three real A/A sessions of the CPU default, each against one pair of servers
for all its 20 pairs (llama_small, 4 requests/s, 32 requests a window, transformers serve on the 2-core VM:
docs/data/serving_ab_2026-11-30.md). A session's mean log-ratio is its pair of servers' own offset (+3.3%, +0.5% and
-3.9%); what is left, each pair's residual, is the noise of a window. A simulated pair of servers draws its offset
from a normal of the three offsets' spread, and each of its pairs a residual from the pooled ones."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest

from hwregress.ab.pairs import Pair
from hwregress.ab.session import PairPlan, judge_pairs, judged_at_looks
from hwregress.plugin.families.serving_ab import UNIT_OF_VERDICT
from hwregress.store.verdicts import Verdict

SESSIONS = json.loads((Path(__file__).parent / "data" / "serving_aa_log_ratios.json").read_text())["sessions"]
OFFSETS = [statistics.mean(ratios) for ratios in SESSIONS.values()]
OFFSET_SD = statistics.stdev(OFFSETS)  # 0.037
RESIDUALS = [ratio - statistics.mean(ratios) for ratios in SESSIONS.values() for ratio in ratios]
PLAN = PairPlan(steps=1, seed=0, threshold=0.05, looks=(20, 40), pairs_per_process=2)  # an A/B session's defaults
TRIALS = 2000


def _server_pairs(log_ratio):
    """A server_pair whose pairs give B/A ``exp(log_ratio(process, index))`` (A at 50 tokens/s/user), recording which
    server pair ran which pairs."""
    ran: list[list[int]] = []

    def server_pair(process, planned):
        ran.append([index for index, _ in planned])
        return [Pair(index, order, 50.0, 50.0 * math.exp(log_ratio(process, index)), process=process)
                for index, order in planned]

    server_pair.ran = ran
    return server_pair


def test_each_server_pair_runs_its_pairs_and_a_clear_slowdown_ends_at_the_first_look():
    slower = _server_pairs(lambda process, index: math.log(0.7) + 0.01 * (-1) ** index)
    outcome = judged_at_looks(slower, PLAN, UNIT_OF_VERDICT)
    assert outcome.verdict == Verdict.REGRESSION and outcome.looks == [20] and outcome.units == 10 == outcome.processes
    assert slower.ran == [[2 * p, 2 * p + 1] for p in range(10)]  # a fresh pair of servers every 2 pairs
    assert [pair.process for pair in outcome.pairs] == [i // 2 for i in range(20)]
    assert outcome.comparison.ratio == pytest.approx(0.7, rel=0.02)
    alike = judged_at_looks(_server_pairs(lambda process, index: 0.3 * (-1) ** process), PLAN, UNIT_OF_VERDICT)
    assert alike.verdict == Verdict.UNSTABLE and alike.looks == [20, 40] and alike.units == 20


def test_a_failed_window_drops_every_pair_of_its_server_pair_with_the_reason():
    def server_pair(process, planned):
        return [Pair(index, order, 50.0, None if index == 3 else 35.0,
                     b_error="2 of 32 requests failed: ReadTimeout" if index == 3 else None, process=process)
                for index, order in planned]

    outcome = judged_at_looks(server_pair, PLAN, UNIT_OF_VERDICT)
    assert outcome.verdict == Verdict.REGRESSION and outcome.units == 9
    assert [pair.index for pair in outcome.dropped] == [2, 3]
    assert all("ReadTimeout" in pair.dropped for pair in outcome.dropped)


def _simulated(shift: float, seed: int) -> Verdict:
    """One serving A/B through the real loop: each pair of servers with its own offset, each pair a residual."""
    draw = random.Random(seed)
    offsets: dict[int, float] = {}

    def log_ratio(process, index):
        offset = offsets.setdefault(process, draw.gauss(0.0, OFFSET_SD))
        # a draw repeats a measured residual, and tied |log-ratios| send SciPy's signed-rank test from its exact null
        # to a permutation test 100x slower: a jitter of 1e-6 breaks the ties
        return shift + offset + draw.choice(RESIDUALS) + draw.gauss(0.0, 1e-6)

    return judged_at_looks(_server_pairs(log_ratio), PLAN, UNIT_OF_VERDICT).verdict


def test_a_20_percent_decode_slowdown_is_a_regression_in_at_least_19_of_20_simulated_sessions():
    # a decode 20% slower: every token 1.2x later, tokens/s/user / 1.2
    verdicts = [_simulated(math.log(1 / 1.2), seed) for seed in range(TRIALS)]
    caught = verdicts.count(Verdict.REGRESSION) / TRIALS
    error = math.sqrt(0.95 * 0.05 / TRIALS)  # the Monte-Carlo standard error at the bound: 0.5 points
    assert caught - 3 * error >= 0.95, f"regression in {caught:.1%} of {TRIALS}"


def test_two_identical_stacks_are_called_a_regression_in_at_most_alpha_of_simulated_sessions():
    verdicts = [_simulated(0.0, seed) for seed in range(TRIALS)]
    false = verdicts.count(Verdict.REGRESSION) / TRIALS
    error = math.sqrt(0.01 * 0.99 / TRIALS)  # 0.2 points at alpha 0.01
    assert false <= PLAN.alpha + 3 * error, f"regression in {false:.1%} of {TRIALS} A/A sessions"


def test_one_pair_of_servers_for_every_pair_would_call_identical_stacks_different_too_often():
    # the first design (each pair a unit, one pair of servers for the whole test): its offset is in every pair, and
    # nothing of the verdict's rule knows it
    draw = random.Random(0)
    wrong = 0
    for _ in range(TRIALS):
        offset = draw.gauss(0.0, OFFSET_SD)
        pairs = [Pair(i, "AB" if i % 2 else "BA", 50.0, 50.0 * math.exp(offset + draw.choice(RESIDUALS)
                                                                          + draw.gauss(0.0, 1e-6)))
                 for i in range(20)]
        comparison, _, _ = judge_pairs(pairs, PLAN, 1)
        wrong += comparison.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)
    assert wrong / TRIALS > 10 * PLAN.alpha  # measured 0.20, half of them regressions (the alpha is 0.01)

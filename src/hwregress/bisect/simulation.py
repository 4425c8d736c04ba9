"""A bisection simulated through the real decision loop: ladders of candidates with a planted step, probes that are
A/B tests run by :func:`hwregress.ab.session.judged_at_looks` on pairs drawn from a noise model, and the search of
:mod:`hwregress.bisect.search`. What the self-tests prove the guarantee with (tests/bisect), and what
``scripts/bisect_simulation.py`` measures over many seeds; a user may size a bisection's budget with it.

The noise model: each unit (a process pair of the A/B) carries an offset of its own, N(0, ``unit_sigma``) in log
units, and each window N(0, ``window_sigma``). The defaults, 0.03 and 0.02, give a unit's mean log-ratio a spread of
about 0.036: what the CPU A/B's intervals of 10 process pairs imply (docs/data/ab_2026-11-27.md). TorchBench's rule
for comparison (:func:`one_score_per_commit`) draws one session per score, whose level moves against another
session's by ``session_sigma`` (log SD; the CPU tier's unchanged sessions: 0.045-0.089, the same data).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hwregress.ab.pairs import Pair
from hwregress.ab.session import judged_at_looks
from hwregress.bisect.budget import DEFAULT_LOOKS, DEFAULT_THRESHOLD, probe_plan
from hwregress.bisect.search import Bisection, CandidateSkipped, ProbeOutcome, ProbeRunner, bisect_in_rounds


@dataclass(frozen=True)
class Noise:
    """The noise model (module doc), log units."""

    unit_sigma: float = 0.03
    window_sigma: float = 0.02
    session_sigma: float = 0.06


def ladder_levels(count: int, step: float, culprit: int) -> list[float]:
    """The throughput of each of ``count`` candidates: 1 before ``culprit``, ``1 - step`` from it on (a fraction:
    0.1 is a 10% slowdown)."""
    return [1.0 if index < culprit else 1.0 - step for index in range(count)]


def simulated_probes(levels: list[float], rng: np.random.Generator, noise: Noise = Noise(),
                     threshold: float = DEFAULT_THRESHOLD, looks: tuple[int, ...] = DEFAULT_LOOKS) -> ProbeRunner:
    """Probes of candidates of throughput ``levels``: each an A/B of candidate against reference through
    :func:`hwregress.ab.session.judged_at_looks` on pairs drawn from ``noise`` with ``rng``, planned by
    :func:`hwregress.bisect.budget.probe_plan` (``threshold``, ``looks``; a seed drawn per probe)."""

    def run(candidate: int, reference: int) -> ProbeOutcome:
        def unit(process: int, planned: list[tuple[int, str]]) -> list[Pair]:
            offset = rng.normal(0.0, noise.unit_sigma)
            return [Pair(index, order, a=levels[reference] * math.exp(rng.normal(0.0, noise.window_sigma)),
                         b=levels[candidate] * math.exp(offset + rng.normal(0.0, noise.window_sigma)),
                         process=process)
                    for index, order in planned]

        plan = probe_plan(int(rng.integers(2**31)), threshold, looks)
        result = judged_at_looks(unit, plan, "process pair")
        comparison = result.comparison
        return ProbeOutcome(str(result.verdict), comparison.ratio if comparison else None,
                            comparison.ratio_low if comparison else None,
                            comparison.ratio_high if comparison else None, pairs=len(result.pairs))

    return run


def simulated_bisection(count: int, step: float, seed: int, noise: Noise = Noise(),
                        threshold: float = DEFAULT_THRESHOLD, width: int = 1) -> tuple[Bisection, int]:
    """One search of a ladder of ``count`` candidates with a ``step`` slowdown at a candidate drawn from ``seed``
    (1 to ``count - 1``), ``width`` probes a round (devices); returns the search's end and the planted culprit."""
    rng = np.random.default_rng(seed)
    culprit = int(rng.integers(1, count))
    probes = simulated_probes(ladder_levels(count, step, culprit), rng, noise, threshold)

    def run_round(jobs: list[tuple[int, int]]) -> list[ProbeOutcome | CandidateSkipped]:
        return [probes(candidate, reference) for candidate, reference in jobs]

    return bisect_in_rounds(count, run_round, width), culprit


def wall_pairs(found: Bisection) -> int:
    """A search's wall time in pairs: each round as long as its longest probe (the probes of a round run at once,
    each on a device of its own, every pair taking the same time)."""
    return sum(max(found.probes[i].outcome.pairs if found.probes[i].outcome else 0 for i in members)
               for members in found.rounds if members)


def one_score_per_commit(count: int, step: float, seed: int, noise: Noise = Noise(),
                         threshold: float = DEFAULT_THRESHOLD) -> tuple[int | None, int]:
    """TorchBench's rule on the same ladder: a score per candidate, each a session of its own (its level drawn from
    ``noise.session_sigma``), bad where it lies below the good endpoint's score by more than ``threshold``; a binary
    search on those calls. Returns the culprit it names (None where the endpoints' scores did not differ) and the
    planted one."""
    rng = np.random.default_rng(seed)
    culprit = int(rng.integers(1, count))
    levels = ladder_levels(count, step, culprit)

    def score(index: int) -> float:
        return levels[index] * math.exp(rng.normal(0.0, noise.session_sigma))

    good_score = score(0)

    def bad(index: int) -> bool:
        return score(index) < good_score * (1 - threshold)

    if not bad(count - 1):
        return None, culprit
    good, worse = 0, count - 1
    while worse - good > 1:
        middle = (good + worse) // 2
        good, worse = (good, middle) if bad(middle) else (middle, worse)
    return worse, culprit

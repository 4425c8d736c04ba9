"""Launch-bound windows on a host with slow modes, judged with and without visits, through the real code (issue 39
part 2; :mod:`hwregress.measure.visits`).

Each trial records a baseline of 3 sessions and judges one more of the same machine (times ``1 - slowdown``):

* a session measures ``visits`` windows of the real timing loop (:func:`hwregress.measure.timing.measure`) with a fake
  round timer whose rounds last ``steps x WORK / throughput`` at the host's speed of that moment (the looks
  simulation's ``ModelTimer``); with one visit
  (the code before visits) a judged window takes its planned looks against the baseline
  (:func:`hwregress.judge.window_verdict.window_check`), with more each visit is a fixed window of the plan's rounds;
* the session's figure is the fastest visit's rounds (:func:`hwregress.measure.visits.fastest`; the only one with one
  visit), recorded by the real lifecycle (:func:`hwregress.judge.lifecycle.make_entry`) and judged by the real
  verdict (:func:`hwregress.judge.compare.judge`), whose reach (:mod:`hwregress.judge.reach`) states the MDS.

Host noise models (throughput per round ``LEVEL x mode x (1 + 0.02 N)``, a slow mode ``1 - GAP`` = 0.85; the
in-mode spread and the gap are the H200's: resnet50 infer bs1's rounds 2-4% apart within a session, one session of
four 16% below the others):

* ``process``: each process runs the session in the slow mode with probability ``P_SLOW`` = 0.25 (the pytest process
  and each visit worker draw once);
* ``phases``: the host alternates fast and slow phases in time (a Markov chain: fast phases last 15 s on average,
  slow ones 5 s, a quarter of the time slow), whatever the process; a session starts at a random moment and its
  visits are ``gap_s`` apart (the session's other tests between them).

Usage: ``python scripts/visits_simulation.py [--trials 2000] [--seed 39] [--visits 1,4] [--models process,phases]
[--slowdown 0,0.1] [--gap-s 30]``
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from hwregress.judge import window_verdict
from hwregress.judge.compare import Measured, judge
from hwregress.judge.lifecycle import make_entry
from hwregress.judge.tolerances import Tolerances
from hwregress.measure.timing import TimingPlan, in_work_units, measure
from hwregress.measure.visits import Visit, fastest
from hwregress.store.results import TestRecord
from scripts.looks_simulation import ModelTimer, judged_figures

LEVEL = 280.0  # samples/s, resnet50 infer bs1's fast mode on the H200
GAP = 0.15  # the slow mode's loss
P_SLOW = 0.25  # the share of processes, or of time, in the slow mode
FAST_PHASE_S, SLOW_PHASE_S = 15.0, 5.0  # the phases model's mean phase lengths (a quarter of the time slow)
WITHIN = 0.02  # relative sd of a round within a mode
WORK = 1.0  # samples per step
ROUND_S = 0.1
PLAN = TimingPlan(warmup_steps=1, rounds=10, min_round_s=ROUND_S, budget_s=30.0, confirm_s=10.0)
FIXED = replace(PLAN, max_rel_iqr=math.inf)  # a visit: the plan's rounds, never extended
IDENTITY = {"gpu_name": "simulated"}
MODELS = ("process", "phases")
BASELINE_SESSIONS = 3
DEFAULTS = Tolerances()


class Host:
    """The host's mode over a session: drawn per process (``process``) or a Markov chain in time (``phases``)."""

    def __init__(self, model: str, rng: np.random.Generator) -> None:
        if model not in MODELS:
            raise ValueError(f"unknown noise model {model!r}; one of {', '.join(MODELS)}")
        self.model, self.rng = model, rng
        self.slow = rng.random() < P_SLOW

    def new_process(self) -> None:
        if self.model == "process":
            self.slow = self.rng.random() < P_SLOW

    def advance(self, seconds: float) -> None:
        """Move the phases model's clock by ``seconds`` (the phase left is memoryless: exponential)."""
        if self.model != "phases":
            return
        while True:
            left = self.rng.exponential(SLOW_PHASE_S if self.slow else FAST_PHASE_S)
            if left >= seconds:
                return
            seconds -= left
            self.slow = not self.slow

    def rounds(self, factor: float) -> Iterator[float]:
        """Throughput per round from now on, times ``factor``; the clock moves a round's time each."""
        while True:
            yield factor * LEVEL * ((1.0 - GAP) if self.slow else 1.0) * (1.0 + WITHIN * self.rng.standard_normal())
            self.advance(ROUND_S)


def _samples(timing: object) -> list[float]:
    return [WORK / seconds for seconds in timing.step_seconds]  # type: ignore[attr-defined]


def session(model: str, rng: np.random.Generator, visits: int, gap_s: float, factor: float = 1.0,
            check: window_verdict.LookCheck | None = None) -> tuple[list[float], object]:
    """One session's judged samples (the fastest visit's rounds) and the looks of its window (one visit only)."""
    host = Host(model, rng)
    host.advance(rng.uniform(0.0, 120.0))  # the session starts at a random moment of the host's phases
    taken, looks = [], None
    for index in range(visits):
        if index:
            host.new_process()
            host.advance(gap_s)
        plan = PLAN if visits == 1 else FIXED
        timing = measure(lambda: None, ModelTimer(host.rounds(factor), factor, LEVEL, WORK), plan,
                         settled=in_work_units(check, WORK) if visits == 1 else None)
        looks = timing.looks
        taken.append(Visit("pytest" if index == 0 else f"visit worker {index}", index, index * gap_s,
                           _samples(timing)))
    return list(fastest(taken).samples), looks


def _record(samples: list[float], visits: int) -> TestRecord:
    record = TestRecord("sim", hardware_key="sim", device="cuda:0", model="sim", mode="infer", batch_size=1,
                        dtype="fp32", samples=samples, environment={"torch": "2.11.0"})
    record.identity = dict(IDENTITY)
    record.details["visits"] = {"count": visits}
    return record


@dataclass
class Result:
    """One cell: its trials' verdicts, thresholds and stated MDSs."""

    model: str
    visits: int
    slowdown: float
    trials: int
    verdicts: Counter
    thresholds: list[float]
    mds: list[float]

    @property
    def regressions(self) -> float:
        return self.verdicts["regression"] / self.trials

    def standard_error(self, rate: float) -> float:
        """The Monte-Carlo standard error of a rate ``rate`` over these trials."""
        return math.sqrt(rate * (1 - rate) / self.trials)


def simulate(model: str, visits: int, trials: int, seed: int, slowdown: float = 0.0, gap_s: float = 30.0,
             tolerances: Tolerances = DEFAULTS) -> Result:
    """``trials`` seeded trials: a baseline of :data:`BASELINE_SESSIONS` sessions recorded, then one session
    ``slowdown`` slower judged, each of ``visits`` visits ``gap_s`` apart."""
    verdicts: Counter = Counter()
    thresholds, reaches = [], []
    for trial in range(trials):
        rng = np.random.default_rng([seed, MODELS.index(model), visits, trial])
        entry = None
        for _ in range(BASELINE_SESSIONS):
            entry = make_entry(_record(session(model, rng, visits, gap_s)[0], visits), entry)
        check = window_verdict.window_check(entry, IDENTITY, tolerances, on_cpu=False)
        samples, looks = session(model, rng, visits, gap_s, 1.0 - slowdown, check)
        measured = Measured("sim", samples, "samples/s", True, {"torch": "2.11.0"}, identity=IDENTITY,
                            looks=looks if visits == 1 else None)
        judgement = judge(measured, entry, tolerances)
        verdicts[str(judgement.verdict)] += 1
        figures = judged_figures(judgement)
        thresholds.append(figures.threshold or 0.0)
        if figures.reach is not None and figures.reach.mds is not None:
            reaches.append(figures.reach.mds)
    return Result(model, visits, slowdown, trials, verdicts, thresholds, reaches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=39)
    parser.add_argument("--visits", default="1,4", help="visit counts to compare (1: the code before visits)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--slowdown", default="0,0.1", help="the judged session's slowdowns (fractions)")
    parser.add_argument("--gap-s", type=float, default=30.0, help="seconds between a test's visits")
    args = parser.parse_args()
    print(f"visits {args.gap_s:g} s apart; {args.trials} trials a cell, seed {args.seed}")
    print("| host | visits | slowdown | regressions | MC SE | threshold, median | stated MDS, median | seconds |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for model in args.models.split(","):
        for visits in (int(v) for v in args.visits.split(",")):
            for slowdown in (float(s) for s in args.slowdown.split(",")):
                started = time.perf_counter()
                result = simulate(model, visits, args.trials, args.seed, slowdown, args.gap_s)
                mds = f"{np.median(result.mds):.1%}" if result.mds else "none"
                print(f"| {model} | {visits} | {slowdown:.0%} | {result.regressions:.2%} | "
                      f"{result.standard_error(result.regressions):.2%} | {np.median(result.thresholds):.1%} | "
                      f"{mds} | {time.perf_counter() - started:.0f} |", flush=True)


if __name__ == "__main__":
    main()

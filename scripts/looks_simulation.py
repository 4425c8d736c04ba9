"""A/A false regressions of the timing loop and the verdict, simulated through the real code (issue 28 part 2).

Each trial records a baseline and judges one more session of the same machine, all drawn from one noise model:

* 3 to 5 recording sessions, each a window of the real timing loop (:func:`hwregress.measure.timing.measure`, no
  baseline: the planned rounds and the noise rule) pooled into an entry by the real lifecycle
  (:func:`hwregress.judge.lifecycle.make_entry`, as ``--update-baselines=force`` records every session);
* one session judged against that entry: the real loop with the check the plugin passes it
  (:func:`hwregress.judge.window_verdict.window_check`), then the real verdict (:func:`hwregress.judge.compare.judge`).

The step does nothing; a fake round timer returns the round's seconds from the model's throughput of that round
(``steps x WORK / throughput``); the calibration step runs at the model's level (times the judged session's
``1 - slowdown``), so every window has rounds of about ``min_round_s`` (0.1 s: 5 steps of 20 ms at the level).
Noise models, throughput per round around ``LEVEL``:

* ``normal``: ``LEVEL x (1 + 0.05 N)``, independent rounds;
* ``lognormal``: a log-normal delay added to each round, round time ``x (1 + 0.05 exp(N))``: most rounds near the
  fastest, a long tail of slow ones (1 in 100 rounds 1.5 times the fastest), as preemptions make it;
* ``drift``: ``LEVEL x exp(d_t + 0.01 N)``, ``d_t`` an AR(1) of 0.99 per round with a stationary sd of 1.5%, each
  session starting from the stationary law: a level that wanders slowly within a session and differs between them;
* ``bimodal``: a host with slow phases, rounds at 252 or 182 samples/s (the speeds mobilenet_v3_small ran at ten rounds
  apart in one process) x ``(1 + 0.02 N)``, the phase a Markov chain of mean 20 fast rounds and 5 slow rounds (2 s
  and 0.5 s), each session starting from its stationary law (a fifth of the rounds slow).

The verdict of a trial is a false regression when it is ``regression``. Judged as on an accelerator (tolerance 5%,
the tightest), ``--cpu`` as on the CPU (15%). Seeded: the same arguments print the same figures. The same script
measures the loop of any hwregress version with either check (the bootstrap ``verdict_settled`` of before issue 28,
or the planned looks): run it with that version first on ``PYTHONPATH``.

Usage: ``python scripts/looks_simulation.py [--trials 10000] [--seed 28] [--models normal,...] [--slowdown 0]
[--test-alone] [--cpu] [--drift-sd 0.015]``
"""

from __future__ import annotations

import argparse
import inspect
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from hwregress.judge import window_verdict
from hwregress.judge.compare import Measured, judge
from hwregress.judge.lifecycle import make_entry
from hwregress.judge.tolerances import Tolerances
from hwregress.measure.timing import TimingPlan, in_work_units, measure
from hwregress.store.results import TestRecord

LEVEL = 252.0  # samples/s
SLOW_LEVEL = 182.0  # the bimodal host's slow phase
WORK = 5.04  # samples per step: 20 ms a step at LEVEL, so 5 steps a 0.1-s round
PLAN = TimingPlan(warmup_steps=1, rounds=10, min_round_s=0.1, budget_s=30.0, confirm_s=10.0)
IDENTITY = {"cpu_vendor": "AuthenticAMD", "cpu_brand": "AMD EPYC", "cpu_family": 25, "cpu_model": 17}
MODELS = ("normal", "lognormal", "drift", "bimodal")
DEFAULTS = Tolerances()
ALPHA = DEFAULTS.alpha


DRIFT_SD = 0.015  # the drift model's stationary sd of log throughput


def throughputs(model: str, rng: np.random.Generator, factor: float = 1.0,
                drift_sd: float = DRIFT_SD) -> Iterator[float]:
    """One session's throughput per round (samples/s) under ``model`` (see the module doc), times ``factor``."""
    if model == "normal":
        while True:
            yield factor * LEVEL * (1 + 0.05 * rng.standard_normal())
    elif model == "lognormal":
        while True:
            yield factor * LEVEL / (1 + 0.05 * math.exp(rng.standard_normal()))
    elif model == "drift":
        rho, sd = 0.99, drift_sd
        level = sd * rng.standard_normal()
        while True:
            yield factor * LEVEL * math.exp(level + 0.01 * rng.standard_normal())
            level = rho * level + sd * math.sqrt(1 - rho**2) * rng.standard_normal()
    elif model == "bimodal":
        stay_fast, stay_slow = 1 - 1 / 20, 1 - 1 / 5
        slow = rng.random() < (1 - stay_fast) / ((1 - stay_fast) + (1 - stay_slow))
        while True:
            yield factor * (SLOW_LEVEL if slow else LEVEL) * (1 + 0.02 * rng.standard_normal())
            slow = rng.random() >= (stay_slow if slow else stay_fast)
    else:
        raise ValueError(f"unknown noise model {model!r}; one of {', '.join(MODELS)}")


class ModelTimer:
    """A round timer whose rounds last ``steps x work / throughput`` with the session's next throughput; the
    calibration step (the first call, one step) runs at ``level x factor`` (a slower session's warmup is slower too)."""

    def __init__(self, session: Iterator[float], factor: float = 1.0, level: float = LEVEL,
                 work: float = WORK) -> None:
        self.session = session
        self.factor = factor
        self.level, self.work = level, work
        self.calibrated = False

    def time_round(self, run_steps: Callable[[], None], steps: int) -> float:
        run_steps()
        if not self.calibrated:
            self.calibrated = True
            return steps * self.work / (self.level * self.factor)
        return steps * self.work / next(self.session)


def _samples(timing: object) -> list[float]:
    return [WORK / seconds for seconds in timing.step_seconds]  # type: ignore[attr-defined]


def judged_figures(judgement: object) -> object:
    """The figures of a judgement: its ``figures`` (this code), or the record an older judge wrote them onto."""
    return getattr(judgement, "figures", None) or judgement.record  # type: ignore[attr-defined]


def _record(samples: list[float]) -> TestRecord:
    record = TestRecord("sim", hardware_key="sim", device="cuda:0", model="sim", mode="infer", batch_size=8,
                        dtype="fp32", samples=samples, environment={"torch": "2.13.0"})
    record.identity = dict(IDENTITY)
    return record


def _new_api() -> bool:
    """Whether the installed hwregress has planned looks (issue 28) or the bootstrap check of before."""
    return hasattr(window_verdict, "look_decision")


def recorded_entry(model: str, rng: np.random.Generator, drift_sd: float = DRIFT_SD) -> dict:
    """A baseline entry of 3 to 5 sessions of ``model``, each a window without a baseline, pooled by the lifecycle."""
    entry = None
    for _ in range(int(rng.integers(3, 6))):
        timing = measure(lambda: None, ModelTimer(throughputs(model, rng, drift_sd=drift_sd)), PLAN)
        entry = make_entry(_record(_samples(timing)), entry)
    assert entry is not None
    return entry


@dataclass
class Trial:
    """One judged session: its verdict, timed rounds, and whether a regression came by the gross-drop path (the ratio
    below ``1 - max(threshold, cap)``: no significance test, no alpha spent)."""

    verdict: str
    rounds: int
    gross: bool = False


def judged_session(model: str, rng: np.random.Generator, entry: dict, on_cpu: bool, factor: float = 1.0,
                   tolerances: Tolerances = DEFAULTS, drift_sd: float = DRIFT_SD) -> Trial:
    """One session of ``model`` (its throughput times ``factor``) judged against ``entry`` with ``tolerances`` through
    the loop and the verdict of the installed hwregress."""
    timer = ModelTimer(throughputs(model, rng, factor, drift_sd), factor)
    if _new_api():
        check = window_verdict.window_check(entry, IDENTITY, tolerances, on_cpu)
        timing = measure(lambda: None, timer, PLAN, settled=in_work_units(check, WORK))
        looks = {"looks": timing.looks}
    else:
        check = window_verdict.window_check(entry, IDENTITY, tolerances, on_cpu, PLAN.confirm_s)
        timing = measure(lambda: None, timer, PLAN, settled=in_work_units(check, WORK))
        looks = {}
    samples = _samples(timing)
    measured = Measured("sim", samples, "samples/s", timing.stable, {"torch": "2.13.0"}, identity=IDENTITY,
                        on_cpu=on_cpu, **looks)
    judgement = judge(measured, entry, tolerances)
    figures = judged_figures(judgement)
    gross = (str(judgement.verdict) == "regression" and figures.ratio is not None and figures.threshold is not None
             and figures.ratio < 1 - max(figures.threshold, tolerances.max_threshold))
    return Trial(str(judgement.verdict), len(samples), gross)


@dataclass
class Result:
    """A model's trials: how many, the verdicts, the timed rounds per judged session."""

    model: str
    trials: int
    verdicts: Counter
    rounds: list[int]
    gross: int = 0  # regressions by the gross-drop path

    @property
    def false_regressions(self) -> float:
        return self.verdicts["regression"] / self.trials

    @property
    def standard_error(self) -> float:
        """The Monte-Carlo standard error of a rate of ``ALPHA`` over these trials."""
        return math.sqrt(ALPHA * (1 - ALPHA) / self.trials)


TEST_ALONE = Tolerances(throughput=0.0, cpu_throughput=0.0, z=0.0)
"""No tolerance and no noise or history bound: a regression is any drop the Mann-Whitney test finds significant (or a
gross one), so the looks' significance levels alone stand between a noisy A/A session and a false regression."""


def simulate(model: str, trials: int, seed: int, on_cpu: bool = False, slowdown: float = 0.0,
             tolerances: Tolerances = DEFAULTS, drift_sd: float = DRIFT_SD) -> Result:
    """``trials`` seeded trials of ``model``: a baseline recorded, then one session ``slowdown`` slower judged with
    ``tolerances``."""
    verdicts: Counter = Counter()
    rounds = []
    gross = 0
    for trial in range(trials):
        rng = np.random.default_rng([seed, MODELS.index(model), trial])
        entry = recorded_entry(model, rng, drift_sd)
        judged = judged_session(model, rng, entry, on_cpu, 1.0 - slowdown, tolerances, drift_sd)
        verdicts[judged.verdict] += 1
        rounds.append(judged.rounds)
        gross += judged.gross
    return Result(model, trials, verdicts, rounds, gross)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--cpu", action="store_true", help="judge as on the CPU (15%% tolerance)")
    parser.add_argument("--slowdown", type=float, default=0.0, help="the judged session this much slower (fraction)")
    parser.add_argument("--test-alone", action="store_true",
                        help="judge without tolerance, noise or history bound: the significance test alone decides")
    parser.add_argument("--drift-sd", type=float, default=DRIFT_SD, help="the drift model's stationary sd (log)")
    args = parser.parse_args()
    print(f"hwregress {'with planned looks' if _new_api() else 'before planned looks (bootstrap check)'}; "
          f"{inspect.getsourcefile(measure)}")
    print("| model | trials | regressions | of them gross | MC SE at alpha | verdicts | "
          "timed rounds: median (90th pct) | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for model in args.models.split(","):
        started = time.perf_counter()
        result = simulate(model, args.trials, args.seed, args.cpu, args.slowdown,
                          TEST_ALONE if args.test_alone else DEFAULTS, args.drift_sd)
        spent = time.perf_counter() - started
        verdicts = ", ".join(f"{verdict} {count}" for verdict, count in result.verdicts.most_common())
        print(f"| {model} | {result.trials} | {result.false_regressions:.2%} | {result.gross} | "
              f"{result.standard_error:.2%} | "
              f"{verdicts} | {np.median(result.rounds):.0f} ({np.percentile(result.rounds, 90):.0f}) | "
              f"{spent:.0f} |", flush=True)


if __name__ == "__main__":
    main()

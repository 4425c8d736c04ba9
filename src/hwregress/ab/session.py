"""One A/B test: the pairs of windows of two stacks' workers, run in the balanced order and judged at planned looks.

:func:`run_ab` says hello to both workers (each reporting the other's settings too, so both fingerprints show them),
prepares the case in both, then runs pairs in :func:`hwregress.ab.order.balanced_order`: in each pair the first-named
stack's window, then the other's, one window at a time. After each planned look's count of pairs it keeps the pairs
in balance (:func:`hwregress.ab.pairs.kept_in_balance`) and asks :func:`hwregress.ab.paired.paired_decision` at that
look's level (alpha / K: :func:`hwregress.judge.looks.look_alpha`); the first look that decides ends the test, and a
test still undecided after the last look is ``unstable``. A window the worker answers with an error (an
out-of-memory) leaves that side of the pair empty with the error, and the pair is dropped; a worker that dies or
hangs ends the test by raising (:class:`hwregress.ab.workers.WorkerDied`, ``WorkerTimedOut``): the caller, which
owns the workers' ``with`` blocks, ends them and reports the test failed with the worker's stderr.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from hwregress.ab.order import balanced_order
from hwregress.ab.paired import PairedComparison, paired_compare, paired_reach
from hwregress.ab.pairs import Pair, kept_in_balance, log_ratios
from hwregress.ab.protocol import Case
from hwregress.ab.stacks import fingerprint_difference
from hwregress.ab.workers import StackWorker, WorkerFailed
from hwregress.judge.looks import look_alpha
from hwregress.judge.reach import Reach
from hwregress.judge.stats import DEFAULT_MAX_THRESHOLD
from hwregress.store.verdicts import Verdict

DEFAULT_LOOKS = (10, 20, 40)
DEFAULT_ALPHA = 0.01
DEFAULT_WINDOW_S = 0.1  # s, a calibrated window lasts at least this long (the session's --min-round-time)
MAX_CALIBRATED_STEPS = 100_000


@dataclass(frozen=True)
class PairPlan:
    """How one A/B test runs its pairs and judges them.

    Attributes:
        steps: timed steps per window (>= 1; each window also runs one untimed step first); None: calibrated after the
            warmup so that a window lasts at least ``window_s`` in the faster stack (:func:`calibrated_steps`).
        seed: the seed of the pairs' order (:func:`hwregress.ab.order.balanced_order`).
        threshold: the relative change that counts (fraction in [0, 1): 0.05 is 5%).
        looks: the planned cumulative pair counts at which the pairs are judged: each even (so that the order is
            balanced there), >= 2, increasing; the last is the most pairs the test runs.
        alpha: the significance level of the whole test, spent as alpha / K at each of the K looks.
        max_threshold: the gross-drop cap (fraction), or None for no gross-drop rule.

    Raises:
        ValueError: a bad field; the message names the field, the value and the fix.
    """

    steps: int | None
    seed: int
    threshold: float
    looks: tuple[int, ...] = DEFAULT_LOOKS
    alpha: float = DEFAULT_ALPHA
    max_threshold: float | None = DEFAULT_MAX_THRESHOLD
    window_s: float = DEFAULT_WINDOW_S

    def __post_init__(self) -> None:
        if self.steps is not None and (isinstance(self.steps, bool) or not isinstance(self.steps, int)
                                       or self.steps < 1):
            raise ValueError(f"A/B plan steps {self.steps!r}: a window times 1 or more steps; give an int >= 1, or "
                             "None to calibrate")
        if not self.window_s > 0:
            raise ValueError(f"A/B plan window_s {self.window_s!r}: a window lasts a positive time; give e.g. 0.1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"A/B plan seed {self.seed!r} is not an int; give e.g. 0")
        if not 0 <= self.threshold < 1:
            raise ValueError(f"A/B plan threshold {self.threshold!r} is not a fraction in [0, 1); give e.g. 0.05")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"A/B plan alpha {self.alpha!r} is not a significance level in (0, 0.5); give e.g. 0.01")
        if self.max_threshold is not None and not 0 < self.max_threshold < 1:
            raise ValueError(f"A/B plan max_threshold {self.max_threshold!r} is not a fraction in (0, 1); give e.g. "
                             "0.25, or None")
        _check_looks(tuple(self.looks))
        object.__setattr__(self, "looks", tuple(self.looks))

    def alpha_at(self, look: int) -> float:
        """The significance level of look ``look`` (1 to K): ``alpha / K``."""
        return look_alpha(look, len(self.looks), self.alpha)


def _check_looks(looks: tuple[int, ...]) -> None:
    fix = "give increasing even pair counts, e.g. (10, 20, 40)"
    if not looks:
        raise ValueError(f"A/B plan looks (): no look at the pairs is planned; {fix}")
    for previous, count in zip((0, *looks), looks, strict=False):
        if isinstance(count, bool) or not isinstance(count, int) or count < 2 or count % 2:
            raise ValueError(f"A/B plan look {count!r} of {looks} is not an even pair count >= 2 (only an even count "
                             f"keeps the AB/BA order balanced); {fix}")
        if count <= previous:
            raise ValueError(f"A/B plan look {count} of {looks} does not come after {previous}: the looks are "
                             f"cumulative pair counts; {fix}")


@dataclass
class ABResult:
    """What one A/B test found: B against A.

    Attributes:
        verdict: regression, improvement, pass (decided at a look) or unstable (undecided after the last look).
        comparison: the comparison at the look that ended the test (ratio B/A, bounds, p-values); None when fewer
            than 2 pairs were kept there.
        reach: the minimum detectable slowdown of the kept log-ratios at that look's level.
        pairs: every pair run, in time order, with its order and both throughputs (samples/s; None: failed).
        dropped: the pairs left out of the verdict at the last look taken, each with its reason.
        looks: the pair counts at which the pairs were judged, in order; the last ended the test.
        alpha: the level of the look that ended the test (alpha / K).
        fingerprints: ``{"A": ..., "B": ...}``: each worker's ``hello`` answer.
        difference: :func:`hwregress.ab.stacks.fingerprint_difference` of A's and B's, in lines.
        steps: timed steps per window (the plan's, or calibrated).
    """

    verdict: Verdict
    comparison: PairedComparison | None
    reach: Reach
    pairs: list[Pair]
    dropped: list[Pair]
    looks: list[int]
    alpha: float
    fingerprints: dict[str, dict[str, Any]] = field(default_factory=dict)
    difference: list[str] = field(default_factory=list)
    steps: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-able dict (no NaN or infinity: a value that is not finite becomes None)."""
        comparison = None if self.comparison is None else asdict(self.comparison)
        if comparison is not None:
            comparison["verdict"] = None if self.comparison.verdict is None else str(self.comparison.verdict)
        return _finite({"verdict": str(self.verdict), "comparison": comparison, "reach": asdict(self.reach),
                        "pairs": [asdict(pair) for pair in self.pairs], "dropped": [asdict(p) for p in self.dropped],
                        "looks": list(self.looks), "alpha": self.alpha, "fingerprints": self.fingerprints,
                        "difference": list(self.difference), "steps": self.steps})


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def run_ab(case: Case, workers: tuple[StackWorker, StackWorker], plan: PairPlan) -> ABResult:
    """Run one A/B test of ``case`` on ``workers`` (stack A's, stack B's: started, e.g. in ``with`` blocks, not yet
    greeted) under ``plan`` (module doc): hello and prepare in both, then pairs to the first look that decides.

    Raises:
        WorkerDied, WorkerTimedOut: a worker died or hung (its group is ended; the error names the stack and holds
            its stderr's tail).
        WorkerFailed: ``hello`` or ``prepare`` failed (an unknown model, an out-of-memory while warming up).
        StackUnusable: a stack's interpreter cannot run a worker.
    """
    fingerprints = _greet(workers)
    for worker in workers:
        worker.prepare(case)
    steps = plan.steps if plan.steps is not None else calibrated_steps(workers, plan.window_s)
    order = balanced_order(plan.looks[-1], plan.seed)
    pairs: list[Pair] = []
    taken: list[int] = []
    for look, count in enumerate(plan.looks, start=1):
        pairs += [_run_pair(index, order[index], workers, steps) for index in range(len(pairs), count)]
        taken.append(count)
        comparison, kept, dropped = _judge(pairs, plan, look)
        if comparison is not None and comparison.verdict is not None:
            break
    verdict = Verdict.UNSTABLE if comparison is None or comparison.verdict is None else comparison.verdict
    alpha = plan.alpha_at(look)
    reach = paired_reach(log_ratios(kept), plan.threshold, alpha, max_threshold=plan.max_threshold)
    return ABResult(verdict, comparison, reach, pairs, dropped, taken, alpha, fingerprints,
                    fingerprint_difference(fingerprints["A"], fingerprints["B"]), steps)


def calibrated_steps(workers: tuple[StackWorker, StackWorker], window_s: float) -> int:
    """Timed steps per window such that a window lasts at least ``window_s`` (s) in the faster stack: one window of
    one step in each worker (untimed for the verdict; it also settles each after its warmup), then
    ``ceil(window_s / faster step)``, at most :data:`MAX_CALIBRATED_STEPS`.

    Raises:
        WorkerDied, WorkerTimedOut, WorkerFailed: a worker's calibrating window failed.
    """
    step_s = min(float(worker.window(1)["seconds"]) for worker in workers)
    return max(1, min(MAX_CALIBRATED_STEPS, math.ceil(window_s / step_s)))


def _greet(workers: tuple[StackWorker, StackWorker]) -> dict[str, dict[str, Any]]:
    """Both workers' fingerprints, each reporting the other stack's settings' keys too."""
    a, b = workers
    return {"A": a.hello(env_keys=b.stack.env), "B": b.hello(env_keys=a.stack.env)}


def _run_pair(index: int, order: str, workers: tuple[StackWorker, StackWorker], steps: int) -> Pair:
    """Pair ``index``: the first-named stack's window, then the other's; a window answered with an error leaves its
    side None with the error."""
    by_label = dict(zip("AB", workers, strict=True))
    throughput: dict[str, float | None] = {}
    errors: dict[str, str | None] = {}
    for label in order:
        try:
            throughput[label], errors[label] = float(by_label[label].window(steps)["samples_per_s"]), None
        except WorkerFailed as failed:
            throughput[label], errors[label] = None, str(failed)
    return Pair(index, order, throughput["A"], throughput["B"], errors["A"], errors["B"])


def _judge(pairs: list[Pair], plan: PairPlan, look: int) -> tuple[PairedComparison | None, list[Pair], list[Pair]]:
    """The comparison of ``pairs`` at look ``look`` (None when fewer than 2 are kept), the kept and the dropped."""
    kept, dropped = kept_in_balance(pairs)
    if len(kept) < 2:
        return None, kept, dropped
    return paired_compare(log_ratios(kept), plan.threshold, plan.alpha_at(look), plan.max_threshold), kept, dropped

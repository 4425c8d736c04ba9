"""One A/B test: pairs of windows of two stacks' workers, run in the balanced order in fresh pairs of worker
processes, and judged on the process pairs at planned looks.

:func:`run_ab` runs every ``pairs_per_process`` pairs in a fresh pair of workers (the process is the unit of the
verdict: :mod:`hwregress.ab.processes`): it says hello to both (each reporting the other's settings too, so both
fingerprints show them), prepares the case in both (where the two models do not fit on the device together, one at a
time, each rebuilt before its stack's windows: :class:`DeviceShare`), calibrates the window's steps in the first
process pair, then runs the pairs in :func:`hwregress.ab.order.balanced_order`: in each pair the first-named stack's
window, then the other's, one window at a time. At each planned look it judges the process pairs' mean log-ratios
with :func:`hwregress.ab.paired.paired_compare` at that look's level (alpha / K:
:func:`hwregress.judge.looks.look_alpha`); the first look that decides ends the test, and a test still undecided
after the last look is ``unstable``. A window the worker answers with an error (an out-of-memory) leaves that side of
the pair empty with the error, and its process pair is dropped; a worker that dies or hangs ends the test by raising
(:class:`hwregress.ab.workers.WorkerDied`, ``WorkerTimedOut``) after both workers of its pair are ended.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from hwregress.ab.order import balanced_order
from hwregress.ab.paired import PairedComparison, paired_compare, paired_reach
from hwregress.ab.pairs import Pair
from hwregress.ab.processes import kept_processes, unit_log_ratios
from hwregress.ab.protocol import Case
from hwregress.ab.stacks import fingerprint_difference
from hwregress.ab.workers import PairStarter, StackWorker, WorkerFailed
from hwregress.judge.looks import look_alpha
from hwregress.judge.reach import Reach
from hwregress.judge.stats import DEFAULT_MAX_THRESHOLD
from hwregress.store.verdicts import Verdict

DEFAULT_LOOKS = (20, 40)  # pairs: 10 and 20 process pairs of 2; 2^-10 < alpha / 2 (docs/ab.md, the fewest)
DEFAULT_PAIRS_PER_PROCESS = 2
DEFAULT_ALPHA = 0.01
DEFAULT_WINDOW_S = 0.1  # s, a calibrated window lasts at least this long (the session's --min-round-time)
MAX_CALIBRATED_STEPS = 100_000


@dataclass(frozen=True)
class PairPlan:
    """How one A/B test runs its pairs and judges them.

    Attributes:
        steps: timed steps per window (>= 1; each window also runs one untimed step first); None: calibrated after the
            warmup so that a window lasts at least ``window_s`` in the faster stack (:func:`calibrated_steps`).
        pairs_per_process: pairs each fresh pair of worker processes runs (even, >= 2): the unit of the verdict is a
            process pair's mean log-ratio (:mod:`hwregress.ab.processes`).
        seed: the seed of the pairs' order (:func:`hwregress.ab.order.balanced_order`).
        threshold: the relative change that counts (fraction in [0, 1): 0.05 is 5%).
        looks: the planned cumulative pair counts at which the pairs are judged: each even (so that the order is
            balanced there), >= 2, increasing, a multiple of ``pairs_per_process``; the last is the most pairs the
            test runs.
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
    pairs_per_process: int = DEFAULT_PAIRS_PER_PROCESS

    def __post_init__(self) -> None:
        if self.steps is not None and (isinstance(self.steps, bool) or not isinstance(self.steps, int)
                                       or self.steps < 1):
            raise ValueError(f"A/B plan steps {self.steps!r}: a window times 1 or more steps; give an int >= 1, or "
                             "None to calibrate")
        if not self.window_s > 0:
            raise ValueError(f"A/B plan window_s {self.window_s!r}: a window lasts a positive time; give e.g. 0.1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"A/B plan seed {self.seed!r} is not an int; give e.g. 0")
        if self.seed < 0:
            raise ValueError(f"A/B plan seed {self.seed}: the pairs' order is seeded with abs(seed), so a negative "
                             "seed repeats a positive one's order; give a seed >= 0")
        if not 0 <= self.threshold < 1:
            raise ValueError(f"A/B plan threshold {self.threshold!r} is not a fraction in [0, 1); give e.g. 0.05")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"A/B plan alpha {self.alpha!r} is not a significance level in (0, 0.5); give e.g. 0.01")
        if self.max_threshold is not None and not 0 < self.max_threshold < 1:
            raise ValueError(f"A/B plan max_threshold {self.max_threshold!r} is not a fraction in (0, 1); give e.g. "
                             "0.25, or None")
        _check_looks(tuple(self.looks))
        object.__setattr__(self, "looks", tuple(self.looks))
        _check_pairs_per_process(self.pairs_per_process, self.looks)

    def alpha_at(self, look: int) -> float:
        """The significance level of look ``look`` (1 to K): ``alpha / K``."""
        return look_alpha(look, len(self.looks), self.alpha)


def _check_pairs_per_process(count: int, looks: tuple[int, ...]) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or count < 2 or count % 2:
        raise ValueError(f"A/B plan pairs_per_process {count!r} is not an even count >= 2 (a process pair runs as "
                         "many AB as BA pairs); give e.g. 2")
    uneven = [look for look in looks if look % count]
    if uneven:
        raise ValueError(f"A/B plan look {uneven[0]} of {looks} is not a multiple of pairs_per_process {count} (a "
                         f"look judges whole process pairs); give looks that are multiples of {count}")


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
        memory: ``"both"`` (both models on the device throughout) or ``"reload"`` (they did not fit together: one at
            a time, rebuilt before each window of its stack).
        reload_s: s, the rebuilds' time in ``"reload"`` (untimed for the verdict).
        pairs_per_process: pairs each fresh pair of workers ran.
        processes: process pairs started.
        units: units judged at the look that ended the test.
        unit: what one unit of the verdict is: a ``process pair`` of workers (:mod:`hwregress.ab.processes`), or a
            ``server pair`` (the serving family's: :mod:`hwregress.plugin.families.serving_ab`).
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
    memory: str = "both"
    reload_s: float = 0.0
    pairs_per_process: int = 2
    processes: int = 0
    units: int = 0
    unit: str = "process pair"

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-able dict (no NaN or infinity: a value that is not finite becomes None)."""
        comparison = None if self.comparison is None else asdict(self.comparison)
        if comparison is not None:
            comparison["verdict"] = None if self.comparison.verdict is None else str(self.comparison.verdict)
        return _finite({"verdict": str(self.verdict), "comparison": comparison, "reach": asdict(self.reach),
                        "pairs": [asdict(pair) for pair in self.pairs], "dropped": [asdict(p) for p in self.dropped],
                        "looks": list(self.looks), "alpha": self.alpha, "fingerprints": self.fingerprints,
                        "difference": list(self.difference), "steps": self.steps, "memory": self.memory,
                        "reload_s": self.reload_s, "pairs_per_process": self.pairs_per_process,
                        "processes": self.processes, "units": self.units, "unit": self.unit})


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def run_ab(case: Case, start_pair: PairStarter, plan: PairPlan) -> ABResult:
    """Run one A/B test of ``case`` under ``plan`` (module doc): each ``plan.pairs_per_process`` pairs in a fresh pair
    of workers from ``start_pair`` (a context manager of stack A's and stack B's started workers, ended on exit),
    hello and prepare in both, pairs in the balanced order, judged on the process pairs' mean log-ratios at the
    planned looks.

    Raises:
        WorkerDied, WorkerTimedOut: a worker died or hung (its group is ended; the error names the stack and holds
            its stderr's tail).
        WorkerFailed: ``hello`` or ``prepare`` failed (an unknown model, an out-of-memory while warming up).
        StackUnusable: a stack's interpreter cannot run a worker.
    """
    run = _Run(case, start_pair, plan)
    judged = judged_at_looks(run.process_pair, plan, "process pair")
    fingerprints = run.fingerprints
    return replace(judged, fingerprints=fingerprints, difference=fingerprint_difference(fingerprints["A"],
                                                                                         fingerprints["B"]),
                   steps=run.steps or 0, memory=run.memory, reload_s=run.reload_s)


UnitRunner = Callable[[int, list[tuple[int, str]]], list[Pair]]
"""Runs one unit of an A/B test: ``runner(unit, [(index, order), ...])`` runs those pairs in the unit's fresh pair of
processes (workers, or servers) and returns them, each with ``process`` = ``unit``."""


def judged_at_looks(run_unit: UnitRunner, plan: PairPlan, unit: str) -> ABResult:
    """Run the pairs of the plan's balanced order (:func:`hwregress.ab.order.balanced_order` of ``plan.seed``),
    ``plan.pairs_per_process`` at a time in a fresh unit each (``run_unit``), judging them at each planned look
    (``plan.looks``, at ``plan.alpha_at``) on the units' mean log-ratios (:func:`judge_pairs`) until a look decides;
    undecided after the last look is ``unstable``. The loop of every A/B test: the throughput family's worker
    process pairs (:func:`run_ab`) and the serving family's server pairs
    (:mod:`hwregress.plugin.families.serving_ab`), and their simulations.

    Returns:
        the verdict, the comparison, the reach, the pairs, the dropped, the looks taken, the level, the units
        started (``processes``) and judged, and ``unit`` (what one is); the stacks' fingerprints and the window's
        facts are the caller's to add.

    Raises:
        whatever ``run_unit`` raises (a worker or a server that died).
    """
    order = balanced_order(plan.looks[-1], plan.seed)
    pairs: list[Pair] = []
    taken: list[int] = []
    started = 0
    for look, count in enumerate(plan.looks, start=1):
        while len(pairs) < count:
            first = len(pairs)
            pairs += run_unit(started, [(i, order[i]) for i in range(first, first + plan.pairs_per_process)])
            started += 1
        taken.append(count)
        comparison, units, dropped = judge_pairs(pairs, plan, look)
        if comparison is not None and comparison.verdict is not None:
            break
    verdict = Verdict.UNSTABLE if comparison is None or comparison.verdict is None else comparison.verdict
    alpha = plan.alpha_at(look)
    reach = paired_reach(units, plan.threshold, alpha, max_threshold=plan.max_threshold, unit=unit)
    return ABResult(verdict, comparison, reach, pairs, dropped, taken, alpha, pairs_per_process=plan.pairs_per_process,
                    processes=started, units=len(units), unit=unit)


class _Run:
    """One A/B test's state across its process pairs."""

    def __init__(self, case: Case, start_pair: PairStarter, plan: PairPlan) -> None:
        self.case, self.start_pair, self.plan = case, start_pair, plan
        self.fingerprints: dict[str, dict[str, Any]] = {}
        self.steps = plan.steps
        self.memory = "both"
        self.reload_s = 0.0

    def process_pair(self, process: int, planned: list[tuple[int, str]]) -> list[Pair]:
        """The ``planned`` pairs (index, order) in a fresh pair of workers, process pair ``process``."""
        with self.start_pair() as workers:
            greeted = _greet(workers)
            self.fingerprints = self.fingerprints or greeted
            device = DeviceShare(self.case, workers, prepared_both(self.case, workers, b_first=process % 2 == 1))
            if self.steps is None:
                self.steps = calibrated_steps(device, self.plan.window_s)
            pairs = [_run_pair(index, order, device, self.steps, process) for index, order in planned]
        if device.memory == "reload":
            self.memory = "reload"
        self.reload_s += device.reload_s
        return pairs


def judge_pairs(pairs: list[Pair], plan: PairPlan, look: int) -> tuple[PairedComparison | None, list[float],
                                                                         list[Pair]]:
    """The comparison of ``pairs`` at look ``look`` on their units (:func:`hwregress.ab.processes.unit_log_ratios`:
    a process pair's mean log-ratio; None when fewer than 2 are kept), the units, and the dropped pairs."""
    kept, dropped = kept_processes(pairs)
    units = unit_log_ratios(kept)
    if len(units) < 2:
        return None, units, dropped
    return paired_compare(units, plan.threshold, plan.alpha_at(look), plan.max_threshold), units, dropped


def prepared_both(case: Case, workers: tuple[StackWorker, StackWorker], b_first: bool = False) -> str:
    """Prepare ``case`` in both workers, B's first where ``b_first`` (the process pairs alternate, so that neither
    stack is always the one built and warmed up first): ``"both"`` when both models fit on the device at once;
    ``"reload"`` when a build ran out of memory beside the other's (A's is then released and B's built alone: only one
    is on the device at a time, rebuilt before each window of its stack).

    Raises:
        WorkerFailed: a build failed otherwise, or B's ran out of memory even alone (``kind`` ``oom``).
        WorkerDied, WorkerTimedOut: a worker died or hung.
    """
    a, b = workers
    # one at a time: two warmups at once would time each other's cuDNN autotuning on a GPU, and on the 2-core VM two
    # builds side by side took twice as long as one after the other (each process's OpenMP threads wait on the other's)
    failures = [failure for failure in (_prepared(worker, case) for worker in ((b, a) if b_first else (a, b)))
                if failure is not None]
    if not failures:
        return "both"
    if any(failure.kind != "oom" for failure in failures):
        raise next(failure for failure in failures if failure.kind != "oom")
    a.release()
    b.release()
    b.prepare(case)
    return "reload"


def _prepared(worker: StackWorker, case: Case) -> WorkerFailed | None:
    """Prepare ``case`` in ``worker``; its failure, or None."""
    try:
        worker.prepare(case)
    except WorkerFailed as failed:
        return failed
    return None


class DeviceShare:
    """How the two stacks' models share the device: both loaded throughout (``memory`` ``"both"``), or one at a time
    (``"reload"``), the other's released and this one's rebuilt and warmed up before each window of a stack whose
    model is not on the device; ``reload_s`` sums the rebuilds' time (s, untimed for the verdict)."""

    def __init__(self, case: Case, workers: tuple[StackWorker, StackWorker], memory: str) -> None:
        self.case = case
        self.workers = dict(zip("AB", workers, strict=True))
        self.memory = memory
        self.loaded = "B" if memory == "reload" else None
        self.reload_s = 0.0

    def worker(self, label: str) -> StackWorker:
        """Stack ``label``'s worker with its model on the device (rebuilt first where the two do not fit).

        Raises:
            WorkerFailed: the release or the rebuild failed (an out-of-memory among them).
            WorkerDied, WorkerTimedOut: a worker died or hung.
        """
        if self.memory == "reload" and self.loaded != label:
            started = time.perf_counter()
            if self.loaded is not None:
                self.workers[self.loaded].release()
                self.loaded = None
            self.workers[label].prepare(self.case)
            self.loaded = label
            self.reload_s += time.perf_counter() - started
        return self.workers[label]


def calibrated_steps(device: DeviceShare, window_s: float) -> int:
    """Timed steps per window such that a window lasts at least ``window_s`` (s) in the faster stack: one window of
    one step in each worker (untimed for the verdict; it also settles each after its warmup), then
    ``ceil(window_s / faster step)``, at most :data:`MAX_CALIBRATED_STEPS`.

    Raises:
        WorkerDied, WorkerTimedOut, WorkerFailed: a worker's calibrating window failed.
    """
    step_s = min(float(device.worker(label).window(1)["seconds"]) for label in "AB")
    return max(1, min(MAX_CALIBRATED_STEPS, math.ceil(window_s / step_s)))


def _greet(workers: tuple[StackWorker, StackWorker]) -> dict[str, dict[str, Any]]:
    """Both workers' fingerprints, each reporting the other stack's settings' keys too."""
    a, b = workers
    return {"A": a.hello(env_keys=b.stack.env), "B": b.hello(env_keys=a.stack.env)}


def _run_pair(index: int, order: str, device: DeviceShare, steps: int, process: int) -> Pair:
    """Pair ``index``: the first-named stack's window, then the other's; a window (or the rebuild before it) answered
    with an error leaves its side None with the error."""
    throughput: dict[str, float | None] = {}
    errors: dict[str, str | None] = {}
    telemetry: dict[str, dict[str, Any] | None] = {}
    for label in order:
        try:
            answer = device.worker(label).window(steps)
            throughput[label], errors[label] = float(answer["samples_per_s"]), None
            telemetry[label] = answer.get("telemetry")
        except WorkerFailed as failed:
            throughput[label], errors[label], telemetry[label] = None, str(failed), None
    return Pair(index, order, throughput["A"], throughput["B"], errors["A"], errors["B"],
                a_telemetry=telemetry["A"], b_telemetry=telemetry["B"], process=process)



"""A throughput test's A/B form: in an A/B session (``--ab-python``, ``--ab-env``) the test's case runs as pairs of
windows in fresh pairs of stack workers (:mod:`hwregress.plugin.ab_pool`, :func:`hwregress.ab.session.run_ab`), and
its record holds B against A: the verdict, the ratio B/A and its interval, the paired minimum detectable slowdown,
every pair and both stacks' fingerprints (``record.ab``). Nothing is judged against a baseline and nothing is recorded
into one. A worker that dies or hangs fails the test with its stderr's last lines, and the device's next test starts
fresh workers; a stack that cannot run a worker, or whose worker dies or hangs starting up (at ``hello``), fails this
test and the device's later ones at once with the same error."""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import NoReturn

from hwregress.ab.processes import kept_processes
from hwregress.ab.protocol import Case
from hwregress.ab.session import ABResult, run_ab
from hwregress.ab.workers import StackUnusable, WorkerDied, WorkerError, WorkerFailed, WorkerTimedOut
from hwregress.judge.compare import reach_figures
from hwregress.plugin.ab_pool import POOL_KEY, WorkerPool
from hwregress.plugin.context import BenchContext
from hwregress.plugin.record import fail_with, skip_with
from hwregress.store.ab_figures import ABFigures, ABPairFigures
from hwregress.store.assembly import put_measured
from hwregress.store.judged import Conclusion, JudgedFigures
from hwregress.store.measured import MeasuredFigures
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict

AB_VARIANTS = "eager, contiguous train and infer windows of a fixed batch size"


def unsupported_in_ab(mode: str, compiler: str, memory_format: str, batch_size: object) -> str | None:
    """Why a throughput case has no A/B form (its workers build eager, contiguous train and infer steps of a given
    batch), or None when it has one."""
    if mode not in ("train", "infer"):
        return f"mode {mode}"
    if compiler != "eager":
        return f"compiler {compiler}"
    if memory_format != "contiguous":
        return f"memory format {memory_format}"
    if not isinstance(batch_size, int):
        return f"batch size {batch_size}"
    return None


def skip_outside_ab(what: str) -> NoReturn:
    """Skip a test an A/B session does not compare (``what``: e.g. ``"the ceiling family"``), saying what it does."""
    skip_with(Verdict.SKIPPED, f"A/B session: {what} is not compared; an A/B session compares the throughput "
                               f"family's {AB_VARIANTS} and the serving family's served models (docs/ab.md)")


def measure_ab(bench: BenchContext, record: TestRecord, device: str, case: Case) -> TestRecord:
    """Run ``case`` as an A/B test on ``device`` and fill ``record`` with B against A; a regression fails
    the test with the ratio and its interval. Returns the record.

    Raises:
        pytest's failure: a regression; a worker that died, hung or could not run; a case a stack could not build.
        pytest's skip (``oom``): a stack ran out of memory building the case.
    """
    ab = bench.settings.ab
    assert ab is not None
    pool = bench.config.stash[POOL_KEY]
    plan = ab.plan(bench.settings.plan.min_round_s, bench.settings.policy.tolerances.max_threshold)
    failure = None
    try:
        result = run_ab(case, pool.starter(device), plan)
    except WorkerError as error:
        failure = _failure(error, pool, device, record)
    if failure is not None:  # outside the except: pytest would print the error a second time, as the failure's context
        fail_with(failure)
    measured, conclusion = ab_outcome(result, ab.meta()["stacks"], plan.seed, plan.looks)
    return bench.settle(put_measured(record, measured), conclusion)


def _failure(error: WorkerError, pool: WorkerPool, device: str, record: TestRecord) -> str:
    """The failure message of ``error``, a worker's, in ``record``'s test on ``device``; a stack that cannot run a
    worker or did not start one (died or hung at ``hello``) is marked in ``pool``, so the device's later tests fail
    at once naming this error.

    Raises:
        pytest's skip (``oom``): a stack ran out of memory building the case.
    """
    if isinstance(error, StackUnusable):
        pool.mark_unusable(device, str(error), record.test_id)
        return str(error)
    if isinstance(error, (WorkerDied, WorkerTimedOut)):
        if error.op == "hello":
            pool.mark_unusable(device, str(error), record.test_id)
            return f"{error}\nthe stack did not start: the device's later A/B tests fail at once with this error"
        return f"{error}\nthe device's next A/B test starts fresh workers"
    if isinstance(error, WorkerFailed):
        if error.kind == "oom":
            skip_with(Verdict.OOM, str(error))
        return f"{error}\n{error.traceback.strip().splitlines()[-1] if error.traceback.strip() else ''}"
    return str(error)


def ab_outcome(result: ABResult, stacks: dict[str, object], seed: int, looks: tuple[int, ...],
               unit: str = "samples/s") -> tuple[MeasuredFigures, Conclusion]:
    """What ``result`` measured and what it concluded. Measured: the kept pairs' B throughputs as ``samples`` and A's
    as ``reference_samples`` (in ``unit``, higher is better), B's median as ``throughput``, and the whole A/B test as
    ``ab``. Concluded:
    the verdict, the summary line (a failure where B regressed), and as judged figures the ratio (B/A), the threshold
    (the A/B threshold, a fraction, as the single-stack verdict's), the level, the p-value of "B slower" and the
    paired reach."""
    kept, _ = kept_processes(result.pairs)
    a_values = [pair.a for pair in kept if pair.a is not None]
    b_values = [pair.b for pair in kept if pair.b is not None]
    comparison = result.comparison
    threshold = comparison.threshold if comparison is not None else result.reach.threshold
    b_throughput = statistics.median(b_values) if b_values else None
    ab = ABFigures.of({
        **({} if comparison is None else {key: value for key, value in asdict(comparison).items()
                                          if key not in ("pairs", "verdict")}),
        "pairs_kept": len(kept), "looks_planned": list(looks), "looks_taken": list(result.looks),
        "pairs_per_process": result.pairs_per_process, "processes": result.processes, "units": result.units,
        "verdict_unit": result.unit,
        "steps_per_window": result.steps, "seed": seed,
        "a_throughput": statistics.median(a_values) if a_values else None, "threshold": threshold,
        "b_throughput": b_throughput, "stacks": stacks, "fingerprints": result.fingerprints,
        "difference": result.difference, "memory": result.memory,
        "reload_s": result.reload_s if result.memory == "reload" else None,
        "pairs": _pairs_with_reasons(result)})
    measured = MeasuredFigures(unit=unit, samples=b_values, reference_samples=a_values, throughput=b_throughput,
                               rounds=len(kept), steps_per_round=result.steps, ab=ab)
    figures = JudgedFigures(ratio=comparison.ratio if comparison is not None else None,
                            p_value=comparison.p_slower if comparison is not None else None,
                            threshold=threshold, alpha=result.alpha, reach=reach_figures(result.reach))
    summary = (summary_line(result, len(kept)),)
    if result.verdict == Verdict.REGRESSION:
        return measured, Conclusion(result.verdict, failures=summary, figures=figures)
    return measured, Conclusion(result.verdict, notes=summary, figures=figures)


def _pairs_with_reasons(result: ABResult) -> list[ABPairFigures]:
    """Every pair in time order, a dropped one with why it was dropped."""
    reasons = {pair.index: pair.dropped for pair in result.dropped}
    return [ABPairFigures.of({**asdict(pair), "dropped": reasons.get(pair.index)}) for pair in result.pairs]


def summary_line(result: ABResult, kept: int) -> str:
    """``"B/A 0.617 [0.601, 0.630] on 20 of 20 pairs (10 process pairs) at alpha 0.005: B slower beyond -5% (a gross
    drop); could catch 5.7%"``: the verdict in words."""
    comparison = result.comparison
    if comparison is None:
        return f"B against A undecided: {kept} of {len(result.pairs)} pairs kept, too few to judge"
    bounds = (f" [{comparison.ratio_low:.3f}, {comparison.ratio_high:.3f}]"
              if comparison.ratio_low is not None and comparison.ratio_high is not None else "")
    band = f"{comparison.threshold:.0%}"
    what = {Verdict.REGRESSION: f"B slower beyond -{band}" + (" (a gross drop)" if comparison.gross else ""),
            Verdict.IMPROVEMENT: f"B faster beyond +{band}",
            Verdict.PASS: f"no difference beyond +-{band}",
            Verdict.UNSTABLE: f"undecided after the last look (neither a change beyond {band} nor within it shown)"}
    reach = result.reach
    caught = f"; could catch {reach.mds:.1%}" if reach.mds is not None else f"; no MDS: {reach.why_none}"
    units = (f"{result.units} process pairs" if result.unit == "process pair"
             else f"{result.units} units: {result.unit}s")
    return (f"B/A {comparison.ratio:.3f}{bounds} on {kept} of {len(result.pairs)} pairs ({units}) at alpha "
            f"{result.alpha:.2g}: {what.get(result.verdict, str(result.verdict))}{caught}")

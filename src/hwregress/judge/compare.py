"""Verdicts: a measured test against its baseline entry (throughput, peak memory, accuracy, speedup,
environment), with failure messages that state the numbers and typed figures for the record."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from hwregress.hardware.facts import fingerprint_changes, identity_changes
from hwregress.judge import stats
from hwregress.judge.compile_time import compile_time_figures
from hwregress.judge.looks import look_alpha
from hwregress.judge.reach import Reach, reach, threshold_reach
from hwregress.judge.tolerances import Tolerances, memory_limits, starting_tolerance
from hwregress.store.figures import DeclaredFigures, LookFigures, ReachFigures
from hwregress.store.judged import JudgedFigures
from hwregress.store.metrics import DIRECTIONS
from hwregress.store.verdicts import Verdict
from hwregress.summary import summarize


@dataclass(frozen=True)
class Judgement:
    """The verdict of one test and why; built once by :func:`judge`, never changed.

    Attributes:
        verdict: see :class:`hwregress.store.verdicts.Verdict`.
        failures: sentences that make the test fail (empty: the test passes).
        notes: sentences shown beside the verdict.
        figures: what the judgement found (:class:`hwregress.store.judged.JudgedFigures`: the ratio, threshold,
            p-value and the level it was judged at, the memory ratio, the baseline entry's figures, the environment
            and identity changes, the compile time against the baseline's and what each judged figure's verdict
            could catch); a record takes them through :func:`hwregress.store.assembly.put_judged`.
    """

    verdict: Verdict = Verdict.PASS
    failures: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    figures: JudgedFigures = field(default_factory=JudgedFigures)

    def failing_first(self, failures: Sequence[str] | None) -> Judgement:
        """This judgement with ``failures`` (checks the caller made beside the judge, e.g. a device's accuracy against
        the CPU's) before its own and the verdict ``regression``; itself where there are none."""
        if not failures:
            return self
        return replace(self, verdict=Verdict.REGRESSION, failures=(*failures, *self.failures))


@dataclass
class _Judging:
    """A judgement while :func:`judge` builds it: the rules below add to it, :meth:`done` freezes it."""

    verdict: Verdict = Verdict.PASS
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def done(self) -> Judgement:
        return Judgement(self.verdict, tuple(self.failures), tuple(self.notes), JudgedFigures(**self.figures))


@dataclass(frozen=True)
class Measured:
    """What one test measured, as the judge needs it."""

    test_id: str
    samples: Sequence[float]
    unit: str
    stable: bool
    environment: Mapping[str, Any]
    peak_memory_bytes: int | None = None
    accuracy: float | None = None
    speedup: float | None = None
    exact_memory: bool = False
    identity: Mapping[str, Any] = field(default_factory=dict)
    # the same-session reference a ratio divides by: a speedup's CPU side, a scaling efficiency's T(1), a co-located
    # group's solo run (throughput samples)
    reference_samples: Sequence[float] = ()
    on_cpu: bool = False
    efficiency: float | None = None  # scaling or co-location efficiency (fraction)
    latency_ms: float | None = None  # a judged latency (ms, lower is better): set only where the record's is judged
    compile_s: float | None = None  # a compiled model's compile time (s) and the cache state it was measured in
    compile_cache: str | None = None
    looks: LookFigures | None = None  # the planned looks at the window and those taken (None: no baseline steered it)
    declared: Sequence[DeclaredFigures] = ()  # the figures of metrics a project declares (hwregress.store.metrics)
    visits: int = 1  # the windows the judged figure is the fastest of (hwregress.measure.visits)


NO_BASELINE = "no baseline for this test on this hardware; record one with --update-baselines"


def judge(measured: Measured, baseline: Mapping[str, Any] | None, tolerances: Tolerances,
          strict_env: bool = False, accept_identity: bool = False) -> Judgement:
    """Compare ``measured`` with its ``baseline`` entry (None: there is none, verdict ``new``); the figures found are
    the judgement's ``figures`` (a figure not judged reads None there).

    Identity first: when the entry was recorded on hardware whose identity differs from ``measured.identity``
    in a field that changes performance, nothing is judged: verdict ``other-hardware`` with the fields that
    differ, unless ``accept_identity`` (then the differences are a note and the figures are judged).

    Throughput: see :func:`hwregress.judge.stats.compare`, at the significance level of the last look the window took
    (:func:`hwregress.judge.looks.look_alpha`; ``tolerances.alpha`` for a window without looks), written to
    ``figures.alpha``; a window looked at is ``unstable`` when its rounds show neither a regression, nor an
    improvement, nor a pass (the lower confidence bound of the ratio above ``1 - threshold``: no slowdown of the
    threshold or more), whatever its noise; one without looks is ``unstable`` when no direction was found and its
    rounds stayed noisy. Memory: fails when current peak >
    baseline peak * (1 + memory tolerance) (+ slack for sampled, inexact memory). Accuracy: fails when current <
    baseline - margin.
    Speedup: fails when current speedup < baseline speedup * (1 - threshold). Efficiency (scaling, co-location)
    likewise: current < baseline efficiency (the median of its recorded sessions) * (1 - threshold), the threshold
    widened by the same-session reference's own noise, since the efficiency divides by it, and by the efficiency's
    drift between the recorded sessions (capped at ``max_threshold``). Latency (where the record's
    ``latency_judged``): fails when current > baseline latency (the median of its recorded sessions) * (1 + threshold),
    the threshold the throughput comparison's, widened by the latency's drift between the recorded sessions (capped
    likewise). A metric a project declares (``measured.declared``, :func:`hwregress.store.metrics.register`): the same
    threshold rule against the entry's ``metrics`` (the median of its ``metric_history``), in the metric's direction
    (lower is better: fails above the baseline x (1 + threshold); higher: below x (1 - threshold)).
    Compile time is compared, never judged, and only with a baseline compile time of the same cache state
    (:func:`hwregress.judge.compile_time.compare_compile`). Each judged figure's reach (its minimum detectable
    slowdown, :mod:`hwregress.judge.reach`) is computed where it is judged, with the same threshold, cap and alpha (the
    throughput's at ``figures.alpha``, the level of the last look taken: a window judged at its looks catches only
    what that level's test can).
    """
    if baseline is None:
        return Judgement(Verdict.NEW, notes=(NO_BASELINE,))
    judgement = _Judging()
    changes = identity_changes(baseline.get("identity") or {}, measured.identity)
    judgement.figures["identity_changes"] = tuple(changes)
    if changes and not accept_identity:
        judgement.verdict = Verdict.OTHER_HARDWARE
        judgement.notes.append(f"baseline recorded on other hardware ({'; '.join(changes)}): not judged; record this "
                               "machine's baseline with --update-baselines, or compare anyway with --accept-identity")
        return judgement.done()
    if changes:
        judgement.notes.append(f"compared across hardware identities (--accept-identity): {'; '.join(changes)}")
    if measured.samples and baseline.get("samples"):
        _judge_throughput(measured, baseline, tolerances, judgement)
    _judge_memory(measured, baseline, tolerances, judgement)
    _judge_accuracy(measured, baseline, tolerances, judgement)
    _judge_speedup(measured, baseline, tolerances, judgement)
    _judge_efficiency(measured, baseline, tolerances, judgement)
    _judge_latency(measured, baseline, tolerances, judgement)
    _judge_declared(measured, baseline, tolerances, judgement)
    if measured.compile_s is not None:
        comparison, notes = compile_time_figures(measured.compile_s, measured.compile_cache, baseline)
        judgement.figures["compile_vs_baseline"] = comparison
        judgement.notes += notes
    _judge_environment(measured, baseline, strict_env, judgement)
    if baseline.get("visits", 1) != measured.visits:
        judgement.notes.append(f"the baseline's figure is the fastest of {baseline.get('visits', 1)} window(s), this "
                               f"session's of {measured.visits}: not the same figure; record the baseline afresh with "
                               "--update-baselines (the entry restarts from this session)")
    if judgement.failures and judgement.verdict in (Verdict.PASS, Verdict.IMPROVEMENT, Verdict.ENV_CHANGED,
                                                     Verdict.UNSTABLE):
        judgement.verdict = Verdict.REGRESSION
    return judgement.done()


def _judge_throughput(measured: Measured, baseline: Mapping[str, Any], tolerances: Tolerances,
                      judgement: _Judging) -> None:
    tolerance, provisional = starting_tolerance(baseline, measured.on_cpu, tolerances)
    if provisional:
        judgement.notes.append(provisional)
    looks = measured.looks
    alpha = tolerances.alpha if looks is None else look_alpha(len(looks.rounds), len(looks.planned), tolerances.alpha)
    comparison = stats.compare(measured.samples, baseline["samples"], tolerance,
                               alpha=alpha, z=tolerances.z, history=baseline.get("history", ()),
                               max_threshold=tolerances.max_threshold)
    baseline_median = summarize(baseline["samples"]).median
    judgement.figures.update(
        ratio=comparison.ratio, threshold=comparison.threshold, p_value=comparison.p_slower, alpha=alpha,
        baseline_throughput=baseline_median, wanted_threshold=comparison.wanted_threshold,
        reach=reach_figures(reach(measured.samples, baseline["samples"], baseline.get("history", ()),
                                  comparison.threshold, tolerances.max_threshold, alpha)))
    if comparison.wanted_threshold is not None:
        judgement.notes.append("noise-limited: the baseline's noise and history asked for a "
                               f"{comparison.wanted_threshold:.1%} threshold, capped at "
                               f"{comparison.threshold:.1%} (--max-threshold)")
    current_median = summarize(measured.samples).median
    if comparison.direction == "regression":
        judgement.verdict = Verdict.REGRESSION
        why = (f"tolerance {comparison.threshold:.1%}, Mann-Whitney p={comparison.p_slower:.2g} < alpha {alpha:.2g}"
               if comparison.p_slower < alpha else
               f"a drop beyond the {comparison.threshold:.1%} cap counts whatever its significance: Mann-Whitney "
               f"p={comparison.p_slower:.2g} against a baseline that holds slow sessions too")
        judgement.failures.append(
            f"{measured.test_id}: throughput regressed: {current_median:.4g} {measured.unit} vs baseline "
            f"{baseline_median:.4g} {measured.unit}, ratio {comparison.ratio:.3f} < {1 - comparison.threshold:.3f} "
            f"({why})"
        )
    elif comparison.direction == "improvement":
        judgement.verdict = Verdict.IMPROVEMENT
        judgement.notes.append(
            f"faster than the baseline: ratio {comparison.ratio:.3f} > {1 + comparison.threshold:.3f}; "
            "refresh it with --update-baselines"
        )
    elif looks is not None and comparison.p_no_slowdown >= alpha:
        judgement.verdict = Verdict.UNSTABLE
        judgement.notes.append(
            f"undecided after {len(looks.rounds)} looks ({len(measured.samples)} rounds): ratio "
            f"{comparison.ratio:.3f} shows no regression, nor that no slowdown of {comparison.threshold:.1%} or more "
            f"is hidden (Mann-Whitney p={comparison.p_no_slowdown:.2g} against {1 - comparison.threshold:.3f} x the "
            f"baseline, alpha {alpha:.2g}); more rounds (--time-budget) or a quieter machine would decide")
    elif looks is None and not measured.stable:
        judgement.verdict = Verdict.UNSTABLE
        judgement.notes.append("the window stayed noisy after extending its rounds; the verdict is not trustworthy")


def _judge_memory(measured: Measured, baseline: Mapping[str, Any], tolerances: Tolerances,
                  judgement: _Judging) -> None:
    base_peak = baseline.get("peak_memory_bytes")
    if measured.peak_memory_bytes is None or base_peak is None:
        return
    judgement.figures.update(baseline_peak_memory_bytes=base_peak,
                             memory_ratio=measured.peak_memory_bytes / base_peak if base_peak else None)
    tolerance, slack = memory_limits(measured.exact_memory, tolerances)
    ceiling = base_peak * (1 + tolerance) + slack
    if measured.peak_memory_bytes > ceiling:
        slack_text = f" + {slack / 2**20:.0f} MiB slack" if slack else ""
        judgement.failures.append(
            f"{measured.test_id}: peak memory {measured.peak_memory_bytes / 2**20:.1f} MiB exceeds the ceiling "
            f"{ceiling / 2**20:.1f} MiB (baseline {base_peak / 2**20:.1f} MiB x "
            f"(1 + {tolerance:.0%}){slack_text})"
        )


def _judge_accuracy(measured: Measured, baseline: Mapping[str, Any], tolerances: Tolerances,
                    judgement: _Judging) -> None:
    base_accuracy = baseline.get("accuracy")
    if measured.accuracy is None or base_accuracy is None:
        return
    judgement.figures["baseline_accuracy"] = base_accuracy
    if measured.accuracy < base_accuracy - tolerances.accuracy_margin:
        judgement.failures.append(
            f"{measured.test_id}: accuracy {measured.accuracy:.4f} < baseline {base_accuracy:.4f} - margin "
            f"{tolerances.accuracy_margin:.3f}"
        )


def _judge_speedup(measured: Measured, baseline: Mapping[str, Any], tolerances: Tolerances,
                   judgement: _Judging) -> None:
    base_speedup = baseline.get("speedup")
    if measured.speedup is None or base_speedup is None:
        return
    judgement.figures["baseline_speedup"] = base_speedup
    threshold = _ratio_threshold(judgement, tolerances, measured.reference_samples)  # the CPU side's noise counts too
    judgement.figures["speedup_reach"] = reach_figures(threshold_reach("speedup", measured.samples, (), threshold,
                                                                       measured.reference_samples))
    if measured.speedup < base_speedup * (1 - threshold):
        judgement.failures.append(
            f"{measured.test_id}: GPU/CPU speedup {measured.speedup:.2f}x < baseline {base_speedup:.2f}x "
            f"x (1 - {threshold:.1%})"
        )


def _judge_efficiency(measured: Measured, baseline: Mapping[str, Any], tolerances: Tolerances,
                      judgement: _Judging) -> None:
    base_efficiency = baseline.get("efficiency")
    if measured.efficiency is None or base_efficiency is None:
        return
    judgement.figures["baseline_efficiency"] = base_efficiency
    threshold = _ratio_threshold(judgement, tolerances, measured.reference_samples)
    history = baseline.get("efficiency_history") or ()
    drift = stats.history_bound(history)  # how far it moved between sessions
    threshold = max(threshold, min(drift, tolerances.max_threshold))
    judgement.figures["efficiency_reach"] = reach_figures(
        threshold_reach("efficiency", measured.samples, history, threshold, measured.reference_samples))
    if measured.efficiency < base_efficiency * (1 - threshold):
        judgement.failures.append(
            f"{measured.test_id}: efficiency {measured.efficiency:.3f} < baseline {base_efficiency:.3f} "
            f"x (1 - {threshold:.1%})"
        )


def _judge_latency(measured: Measured, baseline: Mapping[str, Any], tolerances: Tolerances,
                   judgement: _Judging) -> None:
    base_latency = baseline.get("latency_ms")
    if measured.latency_ms is None or not base_latency:
        return
    judgement.figures["baseline_latency_ms"] = base_latency
    history = baseline.get("latency_history") or ()
    threshold = _drift_threshold(judgement, baseline, measured.on_cpu, tolerances, history)
    judgement.figures["latency_reach"] = reach_figures(threshold_reach("latency", measured.samples, history, threshold))
    if measured.latency_ms > base_latency * (1 + threshold):
        judgement.failures.append(
            f"{measured.test_id}: latency p50 {measured.latency_ms:.1f} ms > baseline {base_latency:.1f} ms "
            f"x (1 + {threshold:.1%})"
        )


def _judge_declared(measured: Measured, baseline: Mapping[str, Any], tolerances: Tolerances,
                    judgement: _Judging) -> None:
    """Each declared metric with a finite value here, a direction, and a value in the entry, by the threshold rule (see
    :func:`judge`)."""
    base_values = baseline.get("metrics") if isinstance(baseline.get("metrics"), Mapping) else {}
    histories = baseline.get("metric_history") if isinstance(baseline.get("metric_history"), Mapping) else {}
    judged = []
    for figure in measured.declared:
        base = base_values.get(figure.metric)
        if (figure.value is None or not math.isfinite(figure.value) or not base
                or figure.direction not in DIRECTIONS):
            continue
        history = histories.get(figure.metric) or ()
        threshold = _drift_threshold(judgement, baseline, measured.on_cpu, tolerances, history)
        lower = figure.direction == "lower"
        found = threshold_reach(figure.metric or "", measured.samples, history, threshold,
                                direction=figure.direction)
        judged.append(DeclaredFigures(metric=figure.metric, baseline=base, threshold=threshold,
                                      reach=reach_figures(found)))
        limit = base * (1 + threshold) if lower else base * (1 - threshold)
        if (figure.value > limit) if lower else (figure.value < limit):
            unit = f" {figure.unit}" if figure.unit else ""
            judgement.failures.append(
                f"{measured.test_id}: {figure.label or figure.metric} {figure.value:.4g}{unit} "
                f"{'>' if lower else '<'} baseline {base:.4g}{unit} x (1 {'+' if lower else '-'} {threshold:.1%})")
    judgement.figures["declared"] = tuple(judged)


def _drift_threshold(judgement: _Judging, baseline: Mapping[str, Any], on_cpu: bool, tolerances: Tolerances,
                     history: Sequence[float]) -> float:
    """The threshold of a figure judged against the median of its recorded sessions (``history``): the throughput
    comparison's threshold (where none was judged: the tolerance one would start from), widened by the figure's drift
    between those sessions, capped at ``max_threshold``."""
    threshold = judgement.figures.get("threshold")
    if threshold is None:
        threshold = starting_tolerance(baseline, on_cpu, tolerances)[0]
    return max(threshold, min(stats.history_bound(history), tolerances.max_threshold))


def reach_figures(found: Reach) -> ReachFigures:
    """The record's sub-record of a :class:`hwregress.judge.reach.Reach` (its rounds as a list, as JSON holds them)."""
    return ReachFigures.of({**asdict(found), "rounds": list(found.rounds)})


def _ratio_threshold(judgement: _Judging, tolerances: Tolerances, reference_samples: Sequence[float]) -> float:
    """The threshold of a ratio of two same-session throughputs (speedup, efficiency): the throughput comparison's,
    widened by the noise of the reference it divides by (capped at ``max_threshold``)."""
    judged = judgement.figures.get("threshold")
    threshold = judged if judged is not None else tolerances.throughput
    if len(reference_samples) >= 2:
        noise = stats.noise_bound(reference_samples, len(reference_samples), tolerances.z)
        threshold = max(threshold, min(noise, tolerances.max_threshold))
    return threshold


def _judge_environment(measured: Measured, baseline: Mapping[str, Any], strict_env: bool,
                       judgement: _Judging) -> None:
    changes = fingerprint_changes(baseline.get("environment", {}), dict(measured.environment))
    judgement.figures["env_changes"] = tuple(changes)
    if not changes:
        return
    judgement.notes.append("environment changed since the baseline: " + "; ".join(changes))
    if judgement.verdict == Verdict.PASS:
        judgement.verdict = Verdict.ENV_CHANGED
    if strict_env:
        judgement.failures.append(
            f"{measured.test_id}: environment differs from the baseline's ({'; '.join(changes)}) and "
            "--strict-env is set; re-record with --update-baselines"
        )

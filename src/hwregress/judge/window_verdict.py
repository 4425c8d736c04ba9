"""The in-window verdict check: what a planned look at a timed window decides against the baseline
(:func:`look_decision`, at the level :mod:`hwregress.judge.looks` spends on the look), and that check as JSON-able
terms a scale-out job's ranks receive (:func:`window_terms`, :func:`check_from_terms`). Split from
:mod:`hwregress.judge.compare`, whose thresholds (:func:`starting_tolerance`) it applies."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from hwregress.hardware.facts import identity_changes
from hwregress.judge import stats
from hwregress.judge.looks import look_alpha
from hwregress.judge.tolerances import Tolerances, starting_tolerance
from hwregress.store.verdicts import Verdict

LookCheck = Callable[[list[float], int, int], "Verdict | None"]
"""``check(samples, look, looks)``: what look ``look`` of ``looks`` planned decides on the throughput samples so far."""


def look_decision(samples: Sequence[float], baseline: Mapping[str, Any] | None, tolerances: Tolerances,
                  on_cpu: bool, alpha: float) -> Verdict | None:
    """What a look at a window decides on ``samples`` (higher-is-better, the unit of the baseline's samples) against
    ``baseline`` at significance level ``alpha`` (the look's: :func:`hwregress.judge.looks.look_alpha`), with the
    threshold :func:`hwregress.judge.compare.judge` uses:

    - ``regression``: the one-sided Mann-Whitney test is significant at ``alpha`` and the ratio of medians lies below
      ``1 - threshold``, or the drop is gross (:func:`hwregress.judge.stats.compare`); the timing loop stops on it only
      once the window has lasted its confirmation time (:class:`hwregress.measure.timing.TimingPlan`);
    - ``pass``: the (1 - ``alpha``) lower confidence bound of the ratio lies above ``1 - threshold``
      (``Comparison.p_no_slowdown < alpha``): no slowdown of the threshold or more (an improvement passes here too);
    - ``new``: nothing to judge against (fewer than 2 samples on a side): nothing more to decide;
    - None: neither; the window goes on to its next look.
    """
    if baseline is None or len(baseline.get("samples") or ()) < 2 or len(samples) < 2:
        return Verdict.NEW
    tolerance = starting_tolerance(baseline, on_cpu, tolerances)[0]
    comparison = stats.compare(samples, baseline["samples"], tolerance, alpha=alpha, z=tolerances.z,
                               history=baseline.get("history", ()), max_threshold=tolerances.max_threshold)
    if comparison.direction == "regression":
        return Verdict.REGRESSION
    if comparison.p_no_slowdown < alpha:
        return Verdict.PASS
    return None


def window_terms(baseline: Mapping[str, Any] | None, identity: Mapping[str, Any], tolerances: Tolerances,
                 on_cpu: bool, accept_identity: bool = False) -> dict[str, Any] | None:
    """What :func:`look_decision` needs at a window's looks, as a JSON-able dict (``baseline``, ``tolerances``,
    ``on_cpu``) that a scale-out job's ranks receive in their job file; None where nothing will be judged: no entry,
    or one recorded on hardware of another identity (unless ``accept_identity``)."""
    if baseline is None or (identity_changes(baseline.get("identity") or {}, identity) and not accept_identity):
        return None
    return {"baseline": dict(baseline), "tolerances": asdict(tolerances), "on_cpu": on_cpu}


def check_from_terms(terms: Mapping[str, Any] | None) -> LookCheck | None:
    """The look check of :func:`window_terms`' dict (None stays None): :func:`look_decision` over the samples so far
    at the level of the look (:func:`hwregress.judge.looks.look_alpha` of ``tolerances.alpha``)."""
    if terms is None:
        return None
    baseline, tolerances, on_cpu = terms["baseline"], Tolerances(**terms["tolerances"]), bool(terms["on_cpu"])

    def check(samples: list[float], look: int, looks: int) -> Verdict | None:
        return look_decision(samples, baseline, tolerances, on_cpu, look_alpha(look, looks, tolerances.alpha))

    return check


def window_check(baseline: Mapping[str, Any] | None, identity: Mapping[str, Any], tolerances: Tolerances,
                 on_cpu: bool, accept_identity: bool = False) -> LookCheck | None:
    """The check a timed window's looks take against ``baseline`` (:func:`look_decision` at each look's level), or
    None where nothing will be judged (:func:`window_terms`)."""
    return check_from_terms(window_terms(baseline, identity, tolerances, on_cpu, accept_identity))

"""The in-window verdict check: whether more timed rounds could still change a throughput verdict against a baseline
(:func:`verdict_settled`), and that check as JSON-able terms a scale-out job's ranks receive (:func:`window_terms`,
:func:`check_from_terms`). Split from :mod:`hwregress.judge.compare`, whose thresholds (:func:`starting_tolerance`)
it applies."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from hwregress.hardware.facts import identity_changes
from hwregress.judge import stats
from hwregress.judge.compare import Tolerances, starting_tolerance


def verdict_settled(samples: Sequence[float], baseline: Mapping[str, Any] | None, tolerances: Tolerances,
                    on_cpu: bool, window_s: float, confirm_s: float) -> bool:
    """Whether more timed rounds could no longer change the throughput verdict of ``samples`` (higher-is-better,
    the unit of the baseline's samples) against ``baseline``: the timing loop extends a window until this is True
    or its time budget is spent, and the verdict is then judged on every round, none left out.

    Settled: no baseline samples to judge against; or the bootstrap interval of the ratio of medians
    (:func:`hwregress.judge.stats.ratio_interval`) lies wholly above the regression boundary ``1 - threshold`` (same
    threshold as :func:`judge`); or it lies wholly below it and the timed rounds have lasted ``confirm_s`` (s).
    A window whose interval straddles the boundary is not settled.

    Why confirm a drop over ``confirm_s``: a host has slow phases of seconds, and a 1-second window can sit wholly in
    one; a false regression came from one (docs/measured.md, 'Noise between sessions'). A real slowdown stays below the
    boundary however long the window; a slow phase of the host does not.
    """
    if baseline is None or len(baseline.get("samples") or ()) < 2 or len(samples) < 2:
        return True
    tolerance = starting_tolerance(baseline, on_cpu, tolerances)[0]
    comparison = stats.compare(samples, baseline["samples"], tolerance, alpha=tolerances.alpha, z=tolerances.z,
                               history=baseline.get("history", ()), max_threshold=tolerances.max_threshold)
    boundary = 1 - comparison.threshold
    low, high = stats.ratio_interval(samples, baseline["samples"])
    if low > boundary:
        return True
    return high < boundary and window_s >= confirm_s


def window_terms(baseline: Mapping[str, Any] | None, identity: Mapping[str, Any], tolerances: Tolerances,
                 on_cpu: bool, confirm_s: float, accept_identity: bool = False) -> dict[str, Any] | None:
    """What :func:`verdict_settled` needs to keep a window open, as a JSON-able dict (``baseline``, ``tolerances``,
    ``on_cpu``, ``confirm_s``) that a scale-out job's ranks receive in their job file; None where nothing will be
    judged: no entry, or one recorded on hardware of another identity (unless ``accept_identity``)."""
    if baseline is None or (identity_changes(baseline.get("identity") or {}, identity) and not accept_identity):
        return None
    return {"baseline": dict(baseline), "tolerances": asdict(tolerances), "on_cpu": on_cpu, "confirm_s": confirm_s}


def check_from_terms(terms: Mapping[str, Any] | None) -> Callable[[list[float], float], bool] | None:
    """The window check of :func:`window_terms`' dict (None stays None): :func:`verdict_settled` over the samples so
    far and the window's seconds."""
    if terms is None:
        return None
    baseline, tolerances = terms["baseline"], Tolerances(**terms["tolerances"])
    on_cpu, confirm_s = bool(terms["on_cpu"]), float(terms["confirm_s"])
    return lambda samples, window_s: verdict_settled(samples, baseline, tolerances, on_cpu, window_s, confirm_s)


def window_check(baseline: Mapping[str, Any] | None, identity: Mapping[str, Any], tolerances: Tolerances,
                 on_cpu: bool, confirm_s: float,
                 accept_identity: bool = False) -> Callable[[list[float], float], bool] | None:
    """The check that keeps a timed window open while its throughput verdict against ``baseline`` is undecided
    (:func:`verdict_settled` over the samples so far and the window's seconds), or None where nothing will be judged
    (:func:`window_terms`)."""
    return check_from_terms(window_terms(baseline, identity, tolerances, on_cpu, confirm_s, accept_identity))

"""The header's tier line: the tier the session runs and, per selected device, how many of its tests the ``-m``
expression keeps and how long they take by the tier estimate (:mod:`hwregress.plugin.tier_estimate`), recording and
judged, on the device's measured machine or the closest one measured (:mod:`hwregress.plugin.tier_assumptions`).

The estimate counts what the selection and ``-m`` keep; ``-k`` selects by name after collection, which the header
precedes, so it is not counted (the line says so). Under pytest-xdist each device runs on a worker of its own, so the
devices' estimates run side by side.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from hwregress.hardware.devices import describe, unavailable_reason
from hwregress.hardware.facts import device_kind
from hwregress.measure.timing import TimingPlan
from hwregress.plugin import tier_assumptions, tier_estimate, tiers
from hwregress.plugin.families import registry
from hwregress.plugin.matrix import Selection

DEVICE_MARKERS = {"cpu": "cpu", "cuda": "gpu", "mps": "mps"}
MODE_MARKERS = ("train", "infer", "prefill", "decode")


def tier_lines(selection: Selection, plan: TimingPlan, profile_steps: int, markexpr: str = "",
               keyword: str = "", visits: int | None = None) -> list[str]:
    """The tier line, then one line per selected device with tests under ``markexpr`` (pytest's ``-m``): the tests
    and their estimated minutes under ``--visits`` ``visits`` (None: auto), recording (``plan``'s rounds) and judged
    (its first look); ``keyword`` (``-k``) given: said to be left out of the count."""
    tier = tiers.get(selection.tier)
    lines = [f"hwregress: tier {tier.name} ({tier.purpose}; --tier quick|default|full)"]
    keep = _marker_filter(markexpr)
    cases = tier_estimate.selection_cases(selection, registry.names())
    for device in selection.devices:
        mine = {family: [c for c in found if c["device"] == device and keep(_markers(family, c))]
                for family, found in cases.items()}
        count = sum(len(found) for found in mine.values())
        if count:
            estimate = _device_estimate(device, mine, plan, profile_steps, visits)
            lines.append(f"hwregress: tier {tier.name} on {device}: {estimate}"
                         + ("; -k is not counted" if keyword else ""))
    return lines


def _device_estimate(device: str, cases: dict[str, list[dict[str, Any]]], plan: TimingPlan, profile_steps: int,
                     visits: int | None) -> str:
    count = sum(len(found) for found in cases.values())
    reason = unavailable_reason(device)
    if reason is not None:
        return f"{count} tests, not visible here: they skip"
    key = describe(device).hardware_key
    assumptions, own = tier_assumptions.for_device(key, device_kind(device))
    unestimated: list[str] = []
    recording = tier_estimate.estimate(cases, assumptions, plan, profile_steps, unestimated, visits)
    judged = tier_estimate.estimate(cases, assumptions, dataclasses.replace(plan, rounds=plan.judged_rounds),
                                    profile_steps, [], visits)
    machine = assumptions.name if own else f"{assumptions.name}'s figures (no measured machine of key {key})"
    text = (f"{count} tests, estimated {recording.total_s / 60:.1f} min recording, {judged.total_s / 60:.1f} min "
            f"judged, on {machine}")
    if unestimated:
        text += f"; {len(unestimated)} not estimated ({unestimated[0]})"
    return text


def _markers(family: str, case: dict[str, Any]) -> set[str]:
    """The markers a test of ``family`` with ``case`` carries (:mod:`hwregress.plugin.parametrize`)."""
    marks = {registry.get(family).marker, DEVICE_MARKERS.get(device_kind(case["device"]), "")}
    if case.get("mode") in MODE_MARKERS:
        marks.add(case["mode"])
    return marks


def _marker_filter(markexpr: str) -> Callable[[set[str]], bool]:
    """Whether a test carrying a set of markers is kept by ``markexpr`` (pytest's own evaluation of ``-m``); every test
    when there is none, or when pytest's evaluator cannot be loaded."""
    if not markexpr.strip():
        return lambda marks: True
    try:
        from _pytest.mark.expression import Expression  # pytest's evaluator of -m; no public equivalent

        expression = Expression.compile(markexpr)
    except Exception:  # an expression pytest itself will refuse with its own message, or another pytest
        return lambda marks: True

    def keep(marks: set[str]) -> bool:
        def matches(name: str, /, **arguments: Any) -> bool:
            return not arguments and name in marks

        return bool(expression.evaluate(matches))

    return keep

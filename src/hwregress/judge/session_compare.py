"""Two sessions' results compared test by test with the verdict gate's own statistics.

``python -m hwregress report compare A.json B.json`` judges each test of session B (the candidate) against the same
test of session A (the reference) as if A's record were B's baseline entry: the entry is what ``--update-baselines``
would have written from A (:func:`hwregress.judge.lifecycle.make_entry` and
:func:`hwregress.judge.evidence.entry_evidence`), and B's record is judged by :func:`hwregress.judge.compare.judge`, the
function that gives every test its verdict. So the throughput verdict is :func:`hwregress.judge.stats.compare` (ratio of
medians beyond the threshold and a one-sided Mann-Whitney test, or a gross drop), memory, accuracy, speedup and
efficiency are judged as the tests judge them, and the environment and hardware identity differences are the gate's own
lines.

A is one session, so the threshold is provisional exactly as for a baseline of fewer than
:data:`hwregress.judge.tolerances.MIN_SESSIONS` sessions: the cap ``max_threshold`` (25% by default), since one session
says nothing about how far the next one may move (docs/measured.md, 'Noise between sessions'). A smaller
``max_threshold`` asks for a tighter comparison where the machines are known to be quiet.

``report merge`` puts each machine's throughput beside the first machine's with :func:`throughput_change`: the same
tolerance rule and :func:`hwregress.judge.stats.compare`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hwregress.hardware.facts import device_kind, fingerprint_changes
from hwregress.judge import evidence, lifecycle, stats
from hwregress.judge.compare import Judgement, judge
from hwregress.judge.diagnosis import TELEMETRY_RULES
from hwregress.judge.session import (
    _measured as measured_from_record,  # the gate's view of a record, as the session builds it
)
from hwregress.judge.tolerances import Tolerances, starting_tolerance
from hwregress.store.results import SessionResults, TestRecord
from hwregress.store.verdicts import NOT_MEASURED, Verdict

# window means compared between the sessions: the diagnosis' telemetry, and the host's CPU utilisation
TELEMETRY_DELTAS = (*((rule.key, rule.label, rule.unit.strip()) for rule in TELEMETRY_RULES),
                    ("cpu_util_pct", "CPU utilisation", "%"))
NOT_COMPARED = "not-compared"


@dataclass(frozen=True)
class Delta:
    """One figure in both sessions: ``a`` (reference) and ``b`` (candidate) in ``unit``; None where not measured."""

    name: str
    unit: str
    a: float | None
    b: float | None

    @property
    def change(self) -> float | None:
        """``b / a - 1`` (fraction; +0.10 is 10% more), None unless both are known and ``a > 0``."""
        if self.a is None or self.b is None or self.a <= 0:
            return None
        return self.b / self.a - 1.0


@dataclass
class TestComparison:
    """One test in both sessions and the gate's judgement of B against A.

    Attributes:
        verdict: the :class:`hwregress.store.verdicts.Verdict` value of B judged against A, or ``"not-compared"``.
        judgement: the gate's judgement (None when not compared; ``why_not`` says why).
        throughput: the throughput comparison the judgement made (None without samples on both sides), kept for
            its two one-sided p-values.
        memory: peak memory in bytes; energy: J per sample; telemetry: window means that either session measured.
    """

    __test__ = False  # not a pytest test class despite its name

    test_id: str
    a: TestRecord
    b: TestRecord
    verdict: str
    judgement: Judgement | None = None
    throughput: stats.Comparison | None = None
    why_not: str = ""
    memory: Delta | None = None
    energy: Delta | None = None
    telemetry: list[Delta] = field(default_factory=list)

    @property
    def p_value(self) -> float | None:
        """The one-sided Mann-Whitney p-value in the direction of the change (slower when the ratio is below 1)."""
        if self.throughput is None:
            return None
        return self.throughput.p_slower if self.throughput.ratio < 1 else self.throughput.p_faster


@dataclass
class SessionComparison:
    """Session B against session A: the tests in both (worst verdict first), the test ids in one only, and the
    differences of the machines' recorded hardware and software (``meta.hardware``)."""

    tests: list[TestComparison]
    only_a: list[str]
    only_b: list[str]
    machine_changes: list[str]
    tolerances: Tolerances

    def counts(self) -> dict[str, int]:
        """Tests per verdict of B against A, in the order of :class:`hwregress.store.verdicts.Verdict` (then not
        compared)."""
        order = [v.value for v in Verdict] + [NOT_COMPARED]
        return {v: n for v in order if (n := sum(t.verdict == v for t in self.tests))}

    def matching(self, verdicts: Iterable[str]) -> list[TestComparison]:
        """The tests whose verdict is one of ``verdicts`` (e.g. ``{"regression"}`` for ``--fail-on regression``)."""
        wanted = set(verdicts)
        return [t for t in self.tests if t.verdict in wanted]


def tolerances_for(tolerance: float | None = None, max_threshold: float | None = None) -> Tolerances:
    """The gate's :class:`Tolerances` with a user's throughput ``tolerance`` (both CPU and accelerator; None: the
    device defaults, 15% on CPUs and 5% else) and cap ``max_threshold`` (None: 25%), as the pytest options
    ``--tolerance`` and ``--max-threshold`` build them.

    Raises:
        ValueError: ``max_threshold`` is below the tolerance it must cap, or outside (0, 1).
    """
    defaults = Tolerances()
    cap = defaults.max_threshold if max_threshold is None else max_threshold
    highest = tolerance if tolerance is not None else defaults.cpu_throughput
    if not 0 < cap < 1 or cap < highest:
        raise ValueError(f"max threshold {cap} must be in (0, 1) and at least the tolerance {highest}")
    return Tolerances(throughput=defaults.throughput if tolerance is None else tolerance,
                      cpu_throughput=defaults.cpu_throughput if tolerance is None else tolerance, max_threshold=cap)


def reference_entry(record: TestRecord) -> dict[str, Any]:
    """The baseline entry ``--update-baselines=reset`` would write from ``record`` alone: the reference a
    comparison judges against (samples, their one-session history, memory, accuracy, environment, identity)."""
    return {**lifecycle.make_entry(record, None, fresh=True), **evidence.entry_evidence(record)}


def throughput_change(a: TestRecord, b: TestRecord, tolerances: Tolerances) -> stats.Comparison | None:
    """B's per-round throughput samples against A's with the gate's rule: the starting tolerance of
    :func:`hwregress.judge.tolerances.starting_tolerance` for an entry of one session (so the cap), then
    :func:`hwregress.judge.stats.compare` (units of the samples, higher is better). None without samples on both sides
    or when they cannot be compared (non-finite or non-positive figures)."""
    if not a.samples or not b.samples:
        return None
    entry = reference_entry(a)
    tolerance = starting_tolerance(entry, device_kind(b.device or "cpu") == "cpu", tolerances)[0]
    try:
        return stats.compare(b.samples, a.samples, tolerance, alpha=tolerances.alpha, z=tolerances.z,
                             history=entry.get("history") or (), max_threshold=tolerances.max_threshold)
    except ValueError:
        return None


def compare_records(a: TestRecord, b: TestRecord, tolerances: Tolerances,
                    accept_identity: bool = False) -> TestComparison:
    """B judged against A by :func:`hwregress.judge.compare.judge` (see the module doc), with memory, energy and
    telemetry side by side. A test that either session did not measure (failed, skipped, out of memory, invalid) is not
    compared; one whose samples cannot be compared (:func:`samples_defect`) is ``invalid``, never a pass; a hardware
    identity that differs gives ``other-hardware`` unless ``accept_identity``."""
    row = TestComparison(b.test_id, a, b, NOT_COMPARED, memory=_delta("peak memory", "bytes", a.peak_memory_bytes,
                                                                      b.peak_memory_bytes),
                         energy=_delta("energy", "J/sample", a.energy_j_per_sample, b.energy_j_per_sample),
                         telemetry=_telemetry_deltas(a, b))
    unmeasured = [f"{side} {record.verdict}" for side, record in (("A", a), ("B", b)) if record.verdict in NOT_MEASURED]
    if unmeasured:
        row.why_not = f"not measured in both sessions ({', '.join(unmeasured)})"
        return row
    defect = samples_defect(a, "A") or samples_defect(b, "B")
    if defect is not None:
        row.verdict, row.why_not = str(Verdict.INVALID), defect
        return row
    try:
        row.judgement = judge(measured_from_record(b), reference_entry(a), tolerances, accept_identity=accept_identity)
    except (ValueError, TypeError, ZeroDivisionError) as error:  # a hand-edited record: say so, compare the rest
        row.verdict, row.why_not = str(Verdict.INVALID), f"cannot be judged: {error}"
        return row
    row.verdict = str(row.judgement.verdict)
    if row.judgement.verdict != Verdict.OTHER_HARDWARE:
        row.throughput = throughput_change(a, b, tolerances)
    return row


def samples_defect(record: TestRecord, side: str) -> str | None:
    """Why ``record``'s per-round throughput samples (samples/s) cannot be compared, naming ``side`` (``"A"`` or
    ``"B"``) and the value; None when they can. No samples at all is a defect unless the test is judged on its
    accuracy instead (the parity tests measure no throughput); a sample that is not a finite number > 0 is a
    measurement defect (no hardware runs at zero, negative or infinite throughput)."""
    if not record.samples:
        if record.accuracy is not None:
            return None
        return f"no samples in {side}: no per-round throughput to compare (re-run the test in {side})"
    for index, value in enumerate(record.samples, start=1):
        if _number(value) is None or value <= 0:
            return (f"{side} sample {index} of {len(record.samples)} is {value!r}: a throughput must be a finite "
                    f"number > 0 (a measurement defect; re-run the test in {side})")
    return None


NOT_JUDGED = (NOT_COMPARED, str(Verdict.OTHER_HARDWARE))  # verdicts of a test B was not judged against A on


def nothing_compared(comparison: SessionComparison) -> str | None:
    """Why ``comparison`` judged no test at all (no test id in both sessions, none measured in both, or every one in
    both recorded on hardware of another identity), as a phrase; None when at least one test was judged (whatever its
    verdict). A gate must never pass on such a comparison."""
    if not comparison.tests:
        return (f"no test in common (A: {len(comparison.only_a)} tests, "
                f"B: {len(comparison.only_b)})")
    if any(test.verdict not in NOT_JUDGED for test in comparison.tests):
        return None
    if all(test.verdict == str(Verdict.OTHER_HARDWARE) for test in comparison.tests):
        return (f"every test in both ({len(comparison.tests)}) ran on hardware of another identity in B than in A, so "
                "none was judged (add --accept-identity to judge them anyway)")
    reasons = Counter(_unmeasured_sides(test) for test in comparison.tests)
    listed = ", ".join(f"{why} in {count}" for why, count in sorted(reasons.items()))
    return f"no test measured in both ({len(comparison.tests)} tests in both, not measured: {listed})"


def _unmeasured_sides(test: TestComparison) -> str:
    return ", ".join(f"{side} {record.verdict}" for side, record in (("A", test.a), ("B", test.b))
                     if record.verdict in NOT_MEASURED) or test.why_not or test.verdict


def compare_sessions(a: SessionResults, b: SessionResults, tolerances: Tolerances | None = None,
                     accept_identity: bool = False) -> SessionComparison:
    """Every test id in both sessions compared (:func:`compare_records`), worst verdict first, then by test id.

    Args:
        a: the reference session.
        b: the candidate session, judged against ``a``.
        tolerances: the gate's tolerances (None: the defaults; see :func:`tolerances_for`).
        accept_identity: judge tests whose hardware identity differs instead of calling them ``other-hardware``.
    """
    tolerances = tolerances or Tolerances()
    records_a, records_b = _by_test(a.records), _by_test(b.records)
    common = sorted(set(records_a) & set(records_b))
    tests = [compare_records(records_a[test_id], records_b[test_id], tolerances, accept_identity) for test_id in common]
    order = [v.value for v in Verdict] + [NOT_COMPARED]
    tests.sort(key=lambda t: (order.index(t.verdict) if t.verdict in order else len(order), t.test_id))
    return SessionComparison(tests, sorted(set(records_a) - set(records_b)), sorted(set(records_b) - set(records_a)),
                             machine_changes(a.meta, b.meta), tolerances)


def machine_changes(meta_a: Mapping[str, Any], meta_b: Mapping[str, Any]) -> list[str]:
    """What differs between the machines two sessions recorded (``meta.hardware``, ``meta.python``,
    ``meta.platform``): per device in both its name, hardware key, memory, facts and software fingerprint
    (:func:`hwregress.hardware.facts.fingerprint_changes`), one line each; a device in one session only, one line."""
    lines = [f"{name} {meta_a.get(name)} -> {meta_b.get(name)}" for name in ("python", "platform")
             if meta_a.get(name) != meta_b.get(name) and meta_a.get(name) and meta_b.get(name)]
    devices_a, devices_b = _devices(meta_a), _devices(meta_b)
    for device in sorted(set(devices_a) | set(devices_b)):
        first, second = devices_a.get(device), devices_b.get(device)
        if first is None or second is None:
            lines.append(f"{device}: only in {'B' if first is None else 'A'}")
            continue
        for name in ("name", "hardware_key", "total_memory_bytes"):
            if first.get(name) != second.get(name):
                lines.append(f"{device}: {name} {first.get(name)} -> {second.get(name)}")
        facts_a, facts_b = _mapping(first.get("facts")), _mapping(second.get("facts"))
        lines += [f"{device}: {key} {facts_a.get(key)} -> {facts_b.get(key)}"
                  for key in sorted(set(facts_a) | set(facts_b))
                  if facts_a.get(key) != facts_b.get(key)]
        lines += [f"{device}: {change}" for change in fingerprint_changes(dict(_mapping(first.get("environment"))),
                                                                          dict(_mapping(second.get("environment"))))]
    return lines


def _by_test(records: Iterable[TestRecord]) -> dict[str, TestRecord]:
    return {record.test_id: record for record in records}


def _devices(meta: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    hardware = meta.get("hardware")
    items = hardware if isinstance(hardware, list) else []
    return {str(item.get("device")): item for item in items
            if isinstance(item, Mapping) and not item.get("unavailable")}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _delta(name: str, unit: str, a: Any, b: Any) -> Delta | None:
    first, second = _number(a), _number(b)
    return None if first is None and second is None else Delta(name, unit, first, second)


def _telemetry_deltas(a: TestRecord, b: TestRecord) -> list[Delta]:
    means = [_window_means(a), _window_means(b)]
    found = [_delta(label, unit, means[0].get(key), means[1].get(key)) for key, label, unit in TELEMETRY_DELTAS]
    return [delta for delta in found if delta is not None]


def _window_means(record: TestRecord) -> dict[str, Any]:
    metrics = _mapping(_mapping(record.telemetry).get("metrics"))
    return {key: _mapping(values).get("mean") for key, values in metrics.items()}

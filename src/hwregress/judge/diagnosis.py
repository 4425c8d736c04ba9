"""Why a test got slower: a few plain sentences, most likely cause first, from what differs between the
baseline and now.

Order of the rules (a cause that explains the others comes first):

1. contention: other processes on the CPU or GPU, hypervisor steal, a busy machine (:mod:`hwregress.hardware.health`);
2. a different machine under the same hardware key (:func:`hwregress.hardware.facts.identity_changes`), or another
   unit of the same model and its host (:data:`hwregress.hardware.facts.UNIT_FIELDS`);
3. GPU throttle reasons this window that the baseline's window did not have;
4. a degraded machine state (power limit, temperature, PCIe, CPU clocks, memory pressure, ...);
5. this session's measured ceilings below the baseline's ("the machine itself is N% slower");
6. telemetry means against the baseline's (clocks, power, temperature, utilisation);
7. software changes (torch, CUDA, cuDNN, driver, installed-packages hash);
8. the top operators that got slower, by self time per step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hwregress.hardware import health as health_rules

CEILING_LIMIT = 0.05  # a measured roof 5% below the baseline's counts as a slower machine
COMM_SHARE_RISE = 0.05  # absolute rise of the communication share that counts (5 points of the step)
ENV_KEYS = ("torch", "cuda", "cudnn", "driver", "packages_hash")
OPERATOR_GROWTH = 0.10  # an operator 10% slower per step ...
OPERATOR_SHARE = 0.02  # ... by at least 2% of the baseline's top-operator time per step
TOP_OPERATORS = 3


@dataclass(frozen=True)
class TelemetryRule:
    """One telemetry mean to compare: ``key`` of the means, a label, its unit as printed after the number
    (``" MHz"``, ``"%"``), and the change that counts
    (``relative``: fraction of the baseline; else absolute, in the unit); ``worse``: ``"lower"`` or
    ``"higher"``."""

    key: str
    label: str
    unit: str
    limit: float
    relative: bool
    worse: str


TELEMETRY_RULES = (
    TelemetryRule("sm_clock_mhz", "SM clock", " MHz", 0.05, True, "lower"),
    TelemetryRule("mem_clock_mhz", "memory clock", " MHz", 0.05, True, "lower"),
    TelemetryRule("power_w", "power", " W", 0.10, True, "lower"),
    TelemetryRule("temperature_c", "temperature", " C", 10.0, False, "higher"),
    TelemetryRule("gpu_util_pct", "GPU utilisation", "%", 10.0, False, "lower"),
    TelemetryRule("cpu_freq_mhz", "CPU clock", " MHz", 0.05, True, "lower"),
)


@dataclass(frozen=True)
class Evidence:
    """What is known about one test now and at its baseline (empty / None: not known).

    Attributes:
        health: this window's :class:`hwregress.hardware.health.CpuHealthProbe` ``result`` merged with
            :func:`hwregress.hardware.gpu_health.gpu_health` (fractions, MHz, W, deg C; see there).
        identity_changes: ``"cpu_family: 25 -> 26"`` lines (:func:`hwregress.hardware.facts.identity_changes`).
        unit_changes: the same lines for :data:`hwregress.hardware.facts.UNIT_FIELDS` (``"gpu_uuid: GPU-f858... ->
            GPU-f344..."``): another unit of the same hardware than the baseline's, or another host.
        throttle_reasons / baseline_throttle_reasons: NVML clocks-event reason names seen in each window.
        ceilings / baseline_ceilings: measured roofs by name, e.g. ``{"gemm_bf16_tflops": 780.0,
            "copy_gbs": 3000.0}`` (TFLOP/s, GB/s; higher is better), this session's and the baseline's.
        telemetry / baseline_telemetry: window means by :data:`TELEMETRY_RULES` key (MHz, W, deg C, %).
        environment / baseline_environment: fingerprints (:data:`ENV_KEYS`: version strings, and
            ``packages_hash``, a hash of the installed packages).
        top_ops / baseline_top_ops: operator tables, rows ``{"name", "ms_per_step"}`` or ``{"name",
            "total_ms"}`` (self time, ms) with ``*_steps`` the profiled steps that ``total_ms`` covers.
        comm_share / baseline_comm_share: a distributed step's share of wall time with a collective in flight
            (fraction; :mod:`hwregress.scaleout.comm_profile`).
    """

    health: Mapping[str, Any] = field(default_factory=dict)
    identity_changes: Sequence[str] = ()
    unit_changes: Sequence[str] = ()
    throttle_reasons: Sequence[str] = ()
    baseline_throttle_reasons: Sequence[str] = ()
    ceilings: Mapping[str, float] = field(default_factory=dict)
    baseline_ceilings: Mapping[str, float] = field(default_factory=dict)
    telemetry: Mapping[str, float] = field(default_factory=dict)
    baseline_telemetry: Mapping[str, float] = field(default_factory=dict)
    environment: Mapping[str, Any] = field(default_factory=dict)
    baseline_environment: Mapping[str, Any] = field(default_factory=dict)
    top_ops: Sequence[Mapping[str, Any]] = ()
    top_ops_steps: int = 1
    baseline_top_ops: Sequence[Mapping[str, Any]] = ()
    baseline_top_ops_steps: int = 1
    comm_share: float | None = None
    baseline_comm_share: float | None = None


def diagnose(evidence: Evidence, limit: int = 6) -> list[str]:
    """At most ``limit`` sentences, most likely cause first (see the module doc for the order); empty
    when nothing differs. Never raises on missing evidence."""
    sentences = [
        *health_rules.contention_findings(evidence.health),
        *_identity(evidence),
        *_unit(evidence),
        *_throttling(evidence),
        *health_rules.state_findings(evidence.health),
        *_ceilings(evidence),
        *_communication(evidence),
        *_telemetry(evidence),
        *_environment(evidence),
        *_operators(evidence),
    ]
    return sentences[:limit]


def _identity(evidence: Evidence) -> list[str]:
    if not evidence.identity_changes:
        return []
    return ["a different machine under the same hardware key: " + "; ".join(evidence.identity_changes)]


def _unit(evidence: Evidence) -> list[str]:
    if not evidence.unit_changes:
        return []
    return ["another unit than the baseline's (" + "; ".join(evidence.unit_changes) + "): units of one model differ, "
            "most in host-bound (launch-bound) tests; give this runner its own baselines (--baseline-dir) if it "
            "stays so"]


def _throttling(evidence: Evidence) -> list[str]:
    new = [r for r in evidence.throttle_reasons if r not in set(evidence.baseline_throttle_reasons)]
    if not new:
        return []
    return [f"the GPU throttled during the window ({', '.join(new)}), which it did not at the baseline"]


def _ceilings(evidence: Evidence) -> list[str]:
    sentences = []
    for name, now in evidence.ceilings.items():
        before = evidence.baseline_ceilings.get(name)
        if now is None or not before or now >= before * (1 - CEILING_LIMIT):
            continue
        sentences.append(f"the machine itself is {1 - now / before:.0%} slower: {name} {now:.4g} now vs "
                         f"{before:.4g} at the baseline")
    return sentences


def _communication(evidence: Evidence) -> list[str]:
    """A data-parallel step that spends markedly more of its time in collectives than at the baseline: more than
    :data:`COMM_SHARE_RISE` more of the step, and half as much again."""
    now, before = evidence.comm_share, evidence.baseline_comm_share
    if now is None or before is None or now <= before + COMM_SHARE_RISE or now <= before * 1.5:
        return []
    return [f"communication took {now:.0%} of the step, {before:.0%} at the baseline: the collectives or the "
            "interconnect under them slowed"]


def _telemetry(evidence: Evidence) -> list[str]:
    sentences = []
    for rule in TELEMETRY_RULES:
        now, before = evidence.telemetry.get(rule.key), evidence.baseline_telemetry.get(rule.key)
        if now is None or before is None:
            continue
        change = now - before if rule.worse == "higher" else before - now
        scale = abs(before) if rule.relative else 1.0
        if not scale or change <= rule.limit * scale:
            continue
        shown = f" ({(now - before) / before:+.0%})" if rule.relative and before else ""
        sentences.append(f"{rule.label} averaged {now:.4g}{rule.unit} vs {before:.4g}{rule.unit} at the "
                         f"baseline{shown}")
    return sentences


def _environment(evidence: Evidence) -> list[str]:
    changes = []
    for key in ENV_KEYS:
        before, now = evidence.baseline_environment.get(key), evidence.environment.get(key)
        if before is not None and now is not None and before != now:
            changes.append(f"{key} {before} -> {now}")
    return ["software changed since the baseline: " + "; ".join(changes)] if changes else []


def _per_step(rows: Sequence[Mapping[str, Any]], steps: int) -> dict[str, float]:
    table = {}
    for row in rows:
        if row.get("ms_per_step") is not None:
            table[str(row["name"])] = float(row["ms_per_step"])
        elif row.get("total_ms") is not None:
            table[str(row["name"])] = float(row["total_ms"]) / max(steps, 1)
    return table


def _operators(evidence: Evidence) -> list[str]:
    now = _per_step(evidence.top_ops, evidence.top_ops_steps)
    before = _per_step(evidence.baseline_top_ops, evidence.baseline_top_ops_steps)
    if not now or not before:
        return []
    floor = OPERATOR_SHARE * sum(before.values())
    grown = [(now[n] - before[n], n) for n in now.keys() & before.keys()
             if now[n] > before[n] * (1 + OPERATOR_GROWTH) and now[n] - before[n] > floor]
    if not grown:
        return []
    worst = sorted(grown, reverse=True)[:TOP_OPERATORS]
    listed = ", ".join(f"{n} {before[n]:.3g} -> {now[n]:.3g} ms" for _, n in worst)
    return [f"operators slower per step (self time): {listed}"]

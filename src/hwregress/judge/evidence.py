"""What a record and its baseline entry say about the machine, in the shapes the judges need: the figures a
baseline entry keeps for a later diagnosis (:func:`entry_evidence`), the :class:`hwregress.judge.diagnosis.Evidence`
of a regression (:func:`for_diagnosis`), and the physics checks of a record (:func:`physics_of`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hwregress.hardware import roofline
from hwregress.hardware.facts import POWER_AVERAGING_S, UNIT_FIELDS, identity_changes
from hwregress.judge import physics
from hwregress.judge.diagnosis import TELEMETRY_RULES, Evidence
from hwregress.store.results import TestRecord

TOP_OPERATORS_KEPT = 10


def telemetry_means(telemetry: Mapping[str, Any] | None) -> dict[str, float]:
    """Window means of the metrics the diagnosis compares (MHz, W, deg C, %), by metric name."""
    metrics = (telemetry or {}).get("metrics", {})
    return {rule.key: metrics[rule.key]["mean"] for rule in TELEMETRY_RULES if rule.key in metrics}


def operators(record: TestRecord) -> list[dict[str, Any]]:
    """The record's top operators by self time (device time on accelerators, else CPU time), ``name`` and
    ``total_ms`` over the profiled steps."""
    rows = record.top_ops or record.top_cpu_ops
    return [{"name": row["name"], "total_ms": row["total_ms"]} for row in rows[:TOP_OPERATORS_KEPT]]


def entry_evidence(record: TestRecord) -> dict[str, Any]:
    """The fields a baseline entry keeps so that a later regression can be explained against it: hardware
    identity, telemetry means, throttle reasons, top operators (and their profiled steps) and health. (The
    baseline's roofs are its ceiling entries, pooled over their own sessions: :func:`baseline_roofs`.)"""
    return {
        "identity": dict(record.identity),
        "telemetry_means": telemetry_means(record.telemetry),
        "throttle_reasons": list((record.telemetry or {}).get("throttle_reasons", [])),
        "top_ops": operators(record),
        "top_ops_steps": int(record.details.get("profile_steps") or 1),
        "health": dict(record.health),
        "comm_share": record.scaling.comm_share if record.scaling else None,
    }


def baseline_roofs(entries: Mapping[str, Mapping[str, Any]], roof_keys: Mapping[str, str]) -> dict[str, float]:
    """The roofs a baselines file holds of those this session measured, by :func:`roof_name`: the pooled median of
    the entry of each (``roof_keys``: roof name -> the entry key of the record that measured it); a roof without an
    entry, or whose entry has no median, is left out."""
    return {name: entries[key]["median"] for name, key in roof_keys.items()
            if key in entries and entries[key].get("median")}


def for_diagnosis(record: TestRecord, entry: Mapping[str, Any], ceilings: Mapping[str, float],
                  baseline_ceilings: Mapping[str, float],
                  judged_identity_changes: Sequence[str] | None = None) -> Evidence:
    """The evidence of ``record`` (this session, with ``ceilings`` measured in it) against ``entry`` and the
    roofs of its baselines file (``baseline_ceilings``); ``judged_identity_changes``: the judge's, before the
    record takes them (None: the record's own)."""
    return Evidence(
        health=record.health,
        identity_changes=list(record.identity_changes if judged_identity_changes is None else judged_identity_changes),
        unit_changes=identity_changes(entry.get("identity") or {}, record.identity, UNIT_FIELDS),
        throttle_reasons=(record.telemetry or {}).get("throttle_reasons", []),
        baseline_throttle_reasons=entry.get("throttle_reasons", []),
        ceilings={name: ceilings[name] for name in ceilings.keys() & baseline_ceilings.keys()},
        baseline_ceilings=baseline_ceilings,
        telemetry=telemetry_means(record.telemetry),
        baseline_telemetry=entry.get("telemetry_means") or {},
        environment=record.environment,
        baseline_environment=entry.get("environment") or {},
        top_ops=operators(record),
        top_ops_steps=int(record.details.get("profile_steps") or 1),
        baseline_top_ops=entry.get("top_ops") or [],
        baseline_top_ops_steps=int(entry.get("top_ops_steps") or 1),
        comm_share=record.scaling.comm_share if record.scaling else None,
        baseline_comm_share=entry.get("comm_share"),
    )


def roof_name(ceiling: Any, dtype: Any, unit: Any) -> str:
    """The name of a roof, e.g. ``"gemm_fp32_tflops"``, ``"copy_gbs"`` (a ceiling record's model, dtype, unit)."""
    suffix = "tflops" if unit == "TFLOP/s" else "gbs"
    return f"{ceiling}_{dtype}_{suffix}" if ceiling == "gemm" else f"{ceiling}_{suffix}"


def ceiling_name(record: TestRecord) -> str:
    """The roof a ceiling record measured (:func:`roof_name`)."""
    return roof_name(record.model, record.dtype, record.unit)


def physics_of(record: TestRecord, ceilings: Mapping[str, float]) -> list[str]:
    """Impossible figures of ``record`` (:func:`hwregress.judge.physics.physics_violations`): its FLOP rate (a model's
    achieved TFLOP/s, a GEMM roof) against the published dense peak of its device and dtype and, for models on
    CUDA, this session's GEMM roof; a device copy against the published memory bandwidth; MFU; and energy
    against mean power x window; mean power against the enforced power limit NVML reported for the window
    (``health["power_limit_enforced_w"]``, :func:`hwregress.hardware.gpu_health.gpu_health`; none on the CPU).

    The measured GEMM roof bounds models on CUDA only: a CPU's one-matrix GEMM ceiling is no roof (oneDNN's
    convolutions run faster than it: docs/measured.md, 'CPU ceilings').

    The energy check takes the telemetry's ``power_averaging_s``; a summary without it is held to NVML's 1 s
    average (:data:`hwregress.hardware.facts.POWER_AVERAGING_S`), which only loosens the check."""
    telemetry = record.telemetry or {}
    facts = record.device_facts
    peak = roofline.published_peak(record.device_name or "", facts.get("multiprocessors"), facts.get("mig", False))
    dtype = record.dtype or "fp32"
    roof = record.model if record.measures_roof else None
    on_cuda = (record.device or "").startswith("cuda")
    return physics.physics_violations(
        achieved_tflops=record.throughput if roof == "gemm" else record.achieved_tflops,
        published_peak_tflops=peak.tflops.get(dtype) if peak is not None else None,
        measured_gemm_tflops=ceilings.get(f"gemm_{dtype}_tflops") if not roof and on_cuda else None,
        bandwidth_gbs=record.throughput if roof == "copy" else None,
        peak_bandwidth_gbs=peak.memory_tb_s * 1000.0 if peak is not None and roof == "copy" else None,
        mfu=record.mfu,
        energy_j=telemetry.get("energy_j"),
        mean_power_w=telemetry.get("metrics", {}).get("power_w", {}).get("mean"),
        duration_s=telemetry.get("duration_s"),
        power_limit_w=(record.health or {}).get("power_limit_enforced_w"),
        power_averaging_s=_power_averaging_s(telemetry),
    )


def _power_averaging_s(telemetry: Mapping[str, Any]) -> float:
    averaging = telemetry.get("power_averaging_s")
    return POWER_AVERAGING_S if averaging is None else float(averaging)

"""What a model window measured, as the figures its record takes (:class:`hwregress.store.measured.MeasuredFigures`):
the throughput median and IQR, latency, energy per sample, achieved TFLOP/s, MFU and arithmetic intensity derived once
from the window (:class:`hwregress.measure.window.Measurement`) before the record is judged; and, for a launch-bound
test measured in visits, its judged figures from the fastest visit."""

from __future__ import annotations

import dataclasses
from typing import Any

from hwregress.hardware import roofline
from hwregress.measure import visits
from hwregress.measure.visits import Visit
from hwregress.measure.window import Measurement
from hwregress.store.figures import CompileFigures
from hwregress.store.measured import MeasuredFigures, energy_figures
from hwregress.store.results import TestRecord
from hwregress.summary import summarize


def window_figures(record: TestRecord, measurement: Measurement) -> MeasuredFigures:
    """The figures of ``measurement`` for ``record`` (read for its device and dtype only): throughput median/IQR,
    latency, memory, telemetry, energy, operator tables, FLOPs, achieved TFLOP/s, MFU (against the peak of
    ``record.device_name`` for ``record.dtype``) and arithmetic intensity."""
    samples = measurement.throughput_samples
    summary = summarize(samples)
    timing = measurement.timing
    window_samples = measurement.window_work / measurement.work_per_sample
    samples_per_s = summary.median / measurement.work_per_sample
    profile = measurement.profile
    return MeasuredFigures(
        samples=samples, throughput=summary.median, throughput_iqr=summary.iqr, rounds=len(samples),
        steps_per_round=timing.steps_per_round, latency_ms=summarize(timing.step_seconds).median * 1000.0,
        peak_memory_bytes=measurement.peak_memory_bytes, stable=timing.stable, looks=timing.looks,
        telemetry=measurement.telemetry, health=measurement.health,
        top_ops=profile.top_device_ops if profile else (), top_cpu_ops=profile.top_cpu_ops if profile else (),
        op_categories=profile.categories if profile else {},
        compile=_compile_figures(measurement),
        details=_window_details(measurement, samples_per_s),
        **energy_figures(measurement.telemetry.get("energy_j"), window_samples),
        **_roofline_figures(record, measurement, samples_per_s))


def _window_details(measurement: Measurement, samples_per_s: float) -> dict[str, Any]:
    """The window's facts kept in a record's details (see :class:`hwregress.store.results.TestRecord`)."""
    timing = measurement.timing
    details: dict[str, Any] = {"extended_rounds": timing.extended_rounds, "verdict_rounds": timing.verdict_rounds,
                               "warmup_steps": timing.warmup_steps, "telemetry_series": measurement.telemetry_series}
    for name in ("quantized_layers", "quantized_base_dtype", "quantization"):
        if getattr(measurement, name) is not None:
            details[name] = getattr(measurement, name)
    if measurement.work_per_sample != 1:  # text: throughput is in tokens/s; keep samples/s beside it
        details.update(samples_per_s=samples_per_s, tokens_per_sample=measurement.work_per_sample)
    if measurement.profile is not None:
        details["profile_steps"] = measurement.profile.steps
    return details


def _compile_figures(measurement: Measurement) -> CompileFigures | None:
    """The compiling first call, timed apart from the window (setup_s: None unless this test paid the process's
    one-time set-up, untimed); None for an eager model."""
    compiled = measurement.compile
    if compiled is None:
        return None
    return CompileFigures(compile_s=compiled.compile_s, setup_s=compiled.setup_s, backend=compiled.backend,
                          frames_compiled=compiled.recompiles, cache=compiled.cache_state,
                          cache_counts=dict(compiled.cache_counts))


def _roofline_figures(record: TestRecord, measurement: Measurement, samples_per_s: float) -> dict[str, Any]:
    """FLOPs per sample, achieved TFLOP/s, MFU and arithmetic intensity, where the window counted FLOPs."""
    if measurement.flops_per_sample is None:
        return {}
    figures = _achieved(record, measurement.flops_per_sample, samples_per_s)
    if measurement.bytes_per_sample:
        figures["arithmetic_intensity"] = measurement.flops_per_sample / measurement.bytes_per_sample
    return {"flops_per_sample": measurement.flops_per_sample, **figures}


def _achieved(record: TestRecord, flops_per_sample: float, samples_per_s: float) -> dict[str, Any]:
    achieved = roofline.achieved_tflops(flops_per_sample, samples_per_s)
    return {"achieved_tflops": achieved,
            "mfu": roofline.mfu(achieved, record.device_name or "", record.dtype or "fp32",
                                record.device_facts.get("multiprocessors"))}


def fastest_visit(record: TestRecord, own: MeasuredFigures, taken: list[Visit],
                  work_per_sample: float) -> MeasuredFigures:
    """The figures ``record`` is judged on when measured in visits (:mod:`hwregress.measure.visits`): ``own``, the
    test's own window's figures (its profile, telemetry, energy and memory stay that window's), with the judged
    figures of the fastest visit: samples, throughput median and IQR, rounds, the latency (a decode window's
    inter-token latency p50, else the step time scaled from the own window's), achieved TFLOP/s and MFU;
    ``details.visits`` keeps every visit (:func:`hwregress.measure.visits.visit_figures`).

    Raises:
        ValueError: no visit, or one without samples.
    """
    best = visits.fastest(taken)
    summary = summarize(best.samples)
    latency = own.latency_ms
    if best.latency_ms is not None:
        latency = best.latency_ms
    elif latency is not None and own.throughput and summary.median > 0:
        latency = latency * own.throughput / summary.median  # one step: time per unit of work scales
    achieved = {} if own.flops_per_sample is None else _achieved(record, own.flops_per_sample,
                                                                 summary.median / work_per_sample)
    return dataclasses.replace(own, samples=best.samples, throughput=summary.median, throughput_iqr=summary.iqr,
                               rounds=len(best.samples), latency_ms=latency, **achieved,
                               details={**own.details, "visits": visits.visit_figures(taken)})

"""The measurement record: copy what a window measured (:class:`hwregress.measure.window.Measurement`) onto the
test's record (:class:`hwregress.store.results.TestRecord`), with the figures derived from it (throughput median
and IQR, latency, energy per sample, achieved TFLOP/s, MFU, arithmetic intensity) before the record is judged; and, for
a launch-bound test measured in visits, its judged figures from the fastest visit."""

from __future__ import annotations

from hwregress.hardware import roofline
from hwregress.measure import visits
from hwregress.measure.visits import Visit
from hwregress.measure.window import Measurement
from hwregress.store.figures import CompileFigures
from hwregress.store.results import TestRecord
from hwregress.summary import summarize


def fill_measurement(record: TestRecord, measurement: Measurement) -> None:
    """Copy a measurement into ``record``: throughput median/IQR, latency, memory, telemetry, energy,
    operator tables, FLOPs, achieved TFLOP/s, MFU (against the peak of ``record.device_name`` for
    ``record.dtype``) and arithmetic intensity."""
    samples = measurement.throughput_samples
    summary = summarize(samples)
    record.samples = samples
    record.throughput, record.throughput_iqr = summary.median, summary.iqr
    record.rounds = len(samples)
    record.steps_per_round = measurement.timing.steps_per_round
    record.latency_ms = summarize(measurement.timing.step_seconds).median * 1000.0
    record.peak_memory_bytes = measurement.peak_memory_bytes
    record.stable = measurement.timing.stable
    record.looks = measurement.timing.looks
    record.details.update(extended_rounds=measurement.timing.extended_rounds,
                          verdict_rounds=measurement.timing.verdict_rounds,
                          warmup_steps=measurement.timing.warmup_steps, telemetry_series=measurement.telemetry_series)
    record.telemetry = measurement.telemetry
    record.health = measurement.health
    record.throttled = bool(measurement.telemetry.get("throttle_reasons"))
    if measurement.quantized_layers is not None:
        record.details["quantized_layers"] = measurement.quantized_layers
    if measurement.quantized_base_dtype is not None:
        record.details["quantized_base_dtype"] = measurement.quantized_base_dtype
    if measurement.quantization is not None:
        record.details["quantization"] = measurement.quantization
    if measurement.compile is not None:  # the compiling first call, timed apart from the window
        compiled = measurement.compile  # setup_s: None unless this test paid the process's one-time set-up, untimed
        record.compile = CompileFigures(compile_s=compiled.compile_s, setup_s=compiled.setup_s,
                                        backend=compiled.backend,
                                        frames_compiled=compiled.recompiles, cache=compiled.cache_state,
                                        cache_counts=dict(compiled.cache_counts))
    window_samples = measurement.window_work / measurement.work_per_sample
    samples_per_s = summary.median / measurement.work_per_sample
    if measurement.work_per_sample != 1:  # text: throughput is in tokens/s; keep samples/s beside it
        record.details.update(samples_per_s=samples_per_s, tokens_per_sample=measurement.work_per_sample)
    energy = measurement.telemetry.get("energy_j")
    if energy:
        record.energy_j_per_sample = energy / window_samples
        record.samples_per_joule = window_samples / energy
    if measurement.profile is not None:
        record.top_ops = measurement.profile.top_device_ops
        record.top_cpu_ops = measurement.profile.top_cpu_ops
        record.op_categories = measurement.profile.categories
        record.details["profile_steps"] = measurement.profile.steps
    if measurement.flops_per_sample is not None:
        record.flops_per_sample = measurement.flops_per_sample
        record.achieved_tflops = roofline.achieved_tflops(measurement.flops_per_sample, samples_per_s)
        record.mfu = roofline.mfu(record.achieved_tflops, record.device_name or "", record.dtype or "fp32",
                                  record.device_facts.get("multiprocessors"))
        if measurement.bytes_per_sample:
            record.arithmetic_intensity = measurement.flops_per_sample / measurement.bytes_per_sample


def fastest_visit_onto(record: TestRecord, taken: list[Visit], work_per_sample: float) -> None:
    """Judge ``record`` on the fastest of its visits (:mod:`hwregress.measure.visits`): after
    :func:`fill_measurement` of the test's own window (its profile, telemetry, energy and memory stay that window's),
    the judged figures become the fastest visit's: samples, throughput median and IQR, rounds, the latency (a decode
    window's inter-token latency p50, else the step time scaled from the own window's), achieved TFLOP/s and MFU;
    ``details.visits`` keeps every visit (:func:`hwregress.measure.visits.visit_figures`).

    Raises:
        ValueError: no visit, or one without samples.
    """
    best = visits.fastest(taken)
    record.details["visits"] = visits.visit_figures(taken)
    own = record.throughput
    summary = summarize(best.samples)
    record.samples = list(best.samples)
    record.throughput, record.throughput_iqr = summary.median, summary.iqr
    record.rounds = len(best.samples)
    if best.latency_ms is not None:
        record.latency_ms = best.latency_ms
    elif record.latency_ms is not None and own and summary.median > 0:
        record.latency_ms = record.latency_ms * own / summary.median  # one step: time per unit of work scales
    if record.flops_per_sample is not None:
        record.achieved_tflops = roofline.achieved_tflops(record.flops_per_sample, summary.median / work_per_sample)
        record.mfu = roofline.mfu(record.achieved_tflops, record.device_name or "", record.dtype or "fp32",
                                  record.device_facts.get("multiprocessors"))

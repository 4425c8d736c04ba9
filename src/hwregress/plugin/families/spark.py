"""The ``spark`` family: inference on Apache Spark (:mod:`hwregress.spark`), batch over a cached DataFrame against
plain torch in the same session and a Structured Streaming pipeline from a watched folder, with one Spark session per
pytest process (started by the first spark test, stopped when the pytest session ends), and the test's record from
each measurement. Opt-in on every device (``-m spark`` or ``--spark-master``): the family takes 2 min 20 s on 2 CPU
cores.

A machine without PySpark or a Java 17+ runtime skips the family as ``unsupported``, with the reason and the
install command; a session that does not start fails the test with Spark's error."""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import pytest

from hwregress import workloads
from hwregress.hardware.facts import device_kind
from hwregress.hardware.telemetry import TelemetrySampler
from hwregress.measure import parity
from hwregress.measure.out_of_memory import is_out_of_memory, out_of_memory_in_traceback
from hwregress.plugin import progress
from hwregress.plugin.context import BenchContext
from hwregress.plugin.matrix import Selection, numeric
from hwregress.plugin.options import source_of
from hwregress.plugin.record import fail_with, skip_with
from hwregress.plugin.xdist import session_temp
from hwregress.spark import batch, engine, stream
from hwregress.spark.predictor import PredictSpec, pixel_statistics
from hwregress.spark.settings import SparkSettings, shared_gpu_warning
from hwregress.store.assembly import put_measured
from hwregress.store.baseline_file import entry_key
from hwregress.store.figures import SparkFigures
from hwregress.store.measured import MeasuredFigures, energy_figures
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict
from hwregress.summary import relative_iqr, summarize

ENGINE_KEY = pytest.StashKey["SparkEngine"]()
LOST_SHOWN = 20  # ids of lost or repeated images a record lists
# one image model per device kind and a batch per model call; the two pipelines of the family
SPARK_MODELS = {"cpu": ("mobilenet_v3_small",), "cuda": ("resnet50",)}
SPARK_BATCH = {"cpu": 16, "cuda": 256, "mps": 64}
SPARK_PIPELINES = ("batch", "stream")
INFERENCE_DTYPES_ON_SPARK = ("fp32", "tf32", "bf16", "fp16")


class Spark:
    """The ``spark`` family (:class:`hwregress.plugin.families.protocol.Family`), and the pytest hook that stops this
    process's Spark session."""

    name = "spark"
    marker = "spark"
    marker_help = "inference on Apache Spark, batch and streaming (opt-in: needs the spark extra and Java 17+)"
    requires: frozenset[str] = frozenset()
    sub_records = ("spark",)
    view = "spark"
    # a stream's latency_ms is its p50 latency per image: what its users wait (its throughput follows the producer's
    # rate while it keeps up)
    judged_latency_modes = frozenset({"stream"})

    def cases(self, selection: Selection) -> list[dict[str, Any]]:
        """When asked for: device x image model x pipeline (``mode``: ``batch``, ``stream``) x rows per model call x
        inference dtypes."""
        if self.name not in selection.opted_in:
            return []
        return [{"device": device, "workload": m, "mode": pipeline, "batch_size": b, "dtype": d}
                for device in selection.devices
                for m in spark_models(selection, device)
                for pipeline in SPARK_PIPELINES
                for b in spark_batch_sizes(selection, device)
                for d in selection.dtypes if d in INFERENCE_DTYPES_ON_SPARK]

    def measure(self, bench: BenchContext, *, device: str, workload: str, mode: str, batch_size: int,
                dtype: str) -> TestRecord:
        """Predict real digit images with ``workload`` on Spark executors (``mode``, the pipeline: ``batch`` over a
        cached data set in full passes, or ``stream`` from a watched folder); judge images/s, the Spark-over-torch
        throughput ratio (batch), the latency (stream) against the baseline, exact agreement with plain torch (batch)
        and exactly-once delivery (stream)."""
        record = bench.start(self.name, device, workload, mode, batch_size, dtype)
        failures = SparkBench(bench).measure(record, device, workload, mode, batch_size, dtype)
        return bench.conclude(record, entry_key(self.name, workload, mode, batch_size, dtype), failures)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        stop_engine(session.config)


def spark_models(selection: Selection, device: str) -> list[str]:
    """The family's models: the selected image models (one ``(C, H, W)`` image per sample), else :data:`SPARK_MODELS`
    of the device kind."""
    if selection.models is not None:
        return [m for m in selection.models
                if workloads.get(m).input_kind == "images" and len(workloads.get(m).input_shape) == 3]
    return list(SPARK_MODELS.get(device_kind(device), SPARK_MODELS["cpu"]))


def spark_batch_sizes(selection: Selection, device: str) -> list[int]:
    """The family's rows per model call: the selected numeric batch sizes, else :data:`SPARK_BATCH`."""
    if selection.batch_sizes is not None:
        return numeric(selection.batch_sizes)
    return [SPARK_BATCH.get(device_kind(device), SPARK_BATCH["cpu"])]


class SparkEngine:
    """This process's Spark session, started once, with what it runs on and how long it took to start."""

    def __init__(self, config: engine.EngineConfig) -> None:
        self.config = config
        started = time.perf_counter()
        self.session = engine.start_session(config)
        self.startup_s = time.perf_counter() - started
        self.description = {**engine.describe(self.session), "startup_s": self.startup_s}

    def stop(self) -> None:
        self.session.stop()


def stop_engine(config: pytest.Config) -> None:
    """Stop this process's Spark session, if a spark test started one (end of the pytest session)."""
    running = config.stash.get(ENGINE_KEY, None)
    if running is not None:
        running.stop()
        del config.stash[ENGINE_KEY]


def warn_of_a_shared_gpu(config: pytest.Config, spark: SparkSettings, devices: list[str]) -> None:
    """A ``PytestConfigWarning`` at configure (pytest's warnings summary; an error under ``-W error``) when the given
    master puts several Python workers on each GPU under test (:func:`hwregress.spark.settings.shared_gpu_warning`),
    which the docs say of ``local[N]`` and which a run would otherwise measure without a word."""
    if spark.master is None:
        return
    warning = shared_gpu_warning(spark.master, devices, source_of(config, "hwregress_spark_master"))
    if warning is not None:
        config.issue_config_time_warning(pytest.PytestConfigWarning(warning), stacklevel=2)


class SparkBench:
    """Runs one ``spark`` test's measurement."""

    def __init__(self, bench: BenchContext) -> None:
        self.bench = bench
        self.settings = bench.settings.spark

    def measure(self, record: TestRecord, device: str, model: str, pipeline: str, batch_size: int,
                dtype: str) -> list[str]:
        """Measure ``pipeline`` (``batch`` or ``stream``) and fill ``record``; returns the failures the family adds
        to the baseline's judgement (disagreement with plain torch, images lost or predicted twice)."""
        running = self._engine(device)
        engine_facts = {**running.description, "batch_size": batch_size}
        # a pipeline that fails keeps its engine's facts
        put_measured(record, MeasuredFigures(unit="samples/s", environment=engine.fingerprint(running.description),
                                             spark=SparkFigures.of(engine_facts)))
        mean, std = pixel_statistics()
        spec = PredictSpec(model, device, dtype, tuple(self.bench.settings.workload_modules), mean, std)
        run = self._batch if pipeline == "batch" else self._stream
        measured, pipeline_facts, failures = run(record, running, spec, batch_size)
        put_measured(record, dataclasses.replace(measured, spark=SparkFigures.of({**engine_facts, **pipeline_facts})))
        return failures

    def _engine(self, device: str) -> SparkEngine:
        """This process's session for a test on ``device``; one started for another device kind's default master
        (CPU tests, then GPU tests) is stopped and a session on this device's master started."""
        reason = engine.unavailable_reason()
        if reason is not None:
            skip_with(Verdict.UNSUPPORTED, reason)
        stash = self.bench.config.stash
        wanted = self.settings.engine(device)
        if ENGINE_KEY in stash and stash[ENGINE_KEY].config != wanted:
            stop_engine(self.bench.config)
        if ENGINE_KEY not in stash:
            try:
                stash[ENGINE_KEY] = SparkEngine(wanted)
            except engine.SparkUnavailable as error:
                pytest.fail(f"SparkUnavailable: {error}", pytrace=False)
        return stash[ENGINE_KEY]

    # -- batch -----------------------------------------------------------------------------------------------------
    def _batch(self, record: TestRecord, running: SparkEngine, spec: PredictSpec,
               batch_size: int) -> tuple[MeasuredFigures, dict[str, Any], list[str]]:
        """The batch pipeline's figures, its facts for ``record.spark`` and its failures (parity with plain torch)."""
        device = spec.device
        tolerance = parity.tolerance_for(workloads.get(spec.model), spec.dtype)  # relative, as the output parity tests
        plan = batch.BatchSpec(spec, batch_size, self.settings.rows_for(device),
                               running.session.sparkContext.defaultParallelism, self.bench.settings.plan)
        sampler = TelemetrySampler(device, self.bench.settings.telemetry_interval_s)
        try:
            result = batch.run_batch(running.session, plan, on_timed=lambda: sampler)
        except Exception as error:  # Py4J, Spark's PythonException and worker errors share no base class
            _out_of_memory(record, error, running)
            fail_with(f"Spark batch inference failed: {_first_lines(error)}")
        window = _window_figures(result.spark_samples, sampler, result.rows * len(result.spark_samples))
        torch_median = summarize(result.torch_samples).median
        efficiency = (window.throughput or 0.0) / torch_median if torch_median else None
        measured = dataclasses.replace(window, steps_per_round=result.rows // batch_size,
                                       stable=batch_stable(result.spark_samples, plan.plan.max_rel_iqr),
                                       efficiency=efficiency, reference_samples=result.torch_samples,
                                       accuracy=result.agreement)
        facts = dict(pipeline="batch", rows=result.rows, partitions=result.partitions, first_pass_s=result.first_pass_s,
                     passes=len(result.spark_samples), torch_throughput=torch_median,
                     torch_samples=result.torch_samples,
                     overhead_ratio=efficiency, agreement=result.agreement,
                     max_logit_difference=result.max_logit_difference, logit_tolerance=tolerance,
                     disagreements=result.disagreements, distinct_classes=result.distinct_classes)
        return measured, facts, _parity_failures(record, result, tolerance)

    # -- stream ----------------------------------------------------------------------------------------------------
    def _stream(self, record: TestRecord, running: SparkEngine, spec: PredictSpec,
                batch_size: int) -> tuple[MeasuredFigures, dict[str, Any], list[str]]:
        """The stream's figures, its facts for ``record.spark`` and its failures (not exactly once)."""
        device = spec.device
        folder = session_temp(self.bench.request) / "hwregress-spark-streams" / f"{time.time_ns():x}"
        lines = progress.live_lines(self.bench.config, record.test_id.rpartition("::")[2])
        plan = stream.StreamSpec(spec, batch_size, self.settings.images_for(device), self.settings.rate_for(device),
                                 folder, warmup_images=max(16, 2 * batch_size),
                                 watch=None if lines is None else lines.stream())
        sampler = TelemetrySampler(device, self.bench.settings.telemetry_interval_s)
        try:
            with sampler:
                result = stream.run_stream(running.session, plan)
        except stream.StreamFailed as error:
            _out_of_memory(record, error, running)
            fail_with(f"StreamFailed: {error} (stream folder: {folder})")
        except Exception as error:  # the query did not start: Spark's own error
            _out_of_memory(record, error, running)
            fail_with(f"Spark streaming failed: {_first_lines(error)} (stream folder: {folder})")
        percentiles = result.latency_percentiles()
        measured = dataclasses.replace(_window_figures(result.output_rates, sampler, result.produced),
                                       latency_ms=percentiles["p50"])
        facts = dict(pipeline="stream", rate=plan.rate, images=plan.images, warmup_images=plan.warmup_images,
                     produced=result.produced, predicted=result.predicted, lost=len(result.lost),
                     duplicated=len(result.duplicated), unexpected=len(result.unexpected),
                     exactly_once=result.exactly_once, offered_rate=result.offered_rate,
                     sustained_rate=result.sustained_rate, latency_ms=percentiles,
                     latency_quantiles_ms=result.latency_quantiles(), micro_batches=result.micro_batches,
                     batch_rows=result.batch_rows, process_rates=result.process_rates,
                     process_rate=statistics.median(result.process_rates) if result.process_rates else None,
                     restarts=result.restarts, warmup_s=result.warmup_s, sink="parquet", checkpoint=True)
        if result.exactly_once:
            return measured, facts, []
        return measured, facts, [
            f"{record.test_id}: not exactly once: {result.produced} images written, {result.predicted} predicted; "
            f"lost {_ids(result.lost)}, predicted twice {_ids(result.duplicated)}, never written "
            f"{_ids(result.unexpected)} (stream folder: {folder})"]


def _parity_failures(record: TestRecord, result: batch.BatchResult, tolerance: float) -> list[str]:
    """Spark against plain torch: every top-1 class equal, and the top-1 logits within the output-parity tolerance of
    the dtype (relative to the largest logit): a random-weight model may predict one class for every image, so the
    logits are compared too."""
    failures = []
    if result.agreement != 1.0:
        shown = "; ".join(f"id {d['id']}: Spark {d['spark']} vs torch {d['torch']}" for d in result.disagreements)
        failures.append(f"{record.test_id}: Spark's top-1 predictions agree with plain torch's on "
                        f"{result.agreement:.4%} of {result.rows} images (must be all; same model, weights, batches "
                        f"and device): {shown}")
    if result.max_logit_difference > tolerance * max(result.logit_scale, 1.0):
        failures.append(f"{record.test_id}: Spark's top-1 logits differ from plain torch's by up to "
                        f"{result.max_logit_difference:.3g} (largest logit {result.logit_scale:.3g}; relative "
                        f"tolerance {tolerance:g} for {record.dtype})")
    return failures


def batch_stable(samples: list[float], max_rel_iqr: float) -> bool:
    """Whether a batch pipeline's passes (images/s each) stayed within the plan's IQR/median bound: a noisy batch
    window is judged ``unstable`` when no direction is found, as a window without looks is
    (:func:`hwregress.judge.compare.judge`). A stream's per-trigger output rates vary with its micro-batches by design
    and are not held to it."""
    return relative_iqr(samples) <= max_rel_iqr


def _window_figures(samples: list[float], sampler: TelemetrySampler, images: int) -> MeasuredFigures:
    """Throughput figures from per-round samples (images/s), the window's telemetry and host health, and the energy
    per image over the window (J) where the device reports its energy (GPUs)."""
    summary = summarize(samples)
    telemetry = sampler.summary()
    return MeasuredFigures(samples=samples, throughput=summary.median, throughput_iqr=summary.iqr, rounds=len(samples),
                           telemetry=telemetry, health=sampler.health,
                           details={"telemetry_series": sampler.compact_series()},
                           **energy_figures(sampler.energy_j, images))


def _out_of_memory(record: TestRecord, error: BaseException, running: SparkEngine) -> None:
    """End the test as ``oom`` ("out of memory at batch 256 on cuda:0 in a Spark Python worker (master local[1]):
    torch.OutOfMemoryError: CUDA out of memory. ...") when ``error`` or what it was raised from is an allocation
    failure: a Python worker's, known to the driver only by the traceback in the error's text, or the driver's own
    (the plain-torch reference runs there); return otherwise."""
    for cause in _chain(error):
        line = out_of_memory_in_traceback(str(cause))
        if line is not None:
            where = f"in a Spark Python worker (master {running.description.get('master')})"
        elif is_out_of_memory(cause) and not isinstance(cause, stream.StreamFailed):
            line, where = f"{type(cause).__name__}: {str(cause).strip()}", "in the driver process"
        else:
            continue
        skip_with(Verdict.OOM, f"out of memory at batch {record.batch_size} on {record.device} {where}: {line[:600]}")


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the errors it was raised from (``raise ... from``), outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__
    return chain


def _first_lines(error: BaseException, lines: int = 12) -> str:
    """An error's type and its first lines (a Java stack trace under a Py4J error runs to hundreds)."""
    text = str(error).strip().splitlines()
    more = f"\n... ({len(text) - lines} more lines)" if len(text) > lines else ""
    return f"{type(error).__name__}: " + "\n".join(text[:lines]) + more


def _ids(ids: list[int]) -> str:
    if not ids:
        return "none"
    more = f" and {len(ids) - LOST_SHOWN} more" if len(ids) > LOST_SHOWN else ""
    return f"{len(ids)} ({', '.join(map(str, ids[:LOST_SHOWN]))}{more})"


FAMILY = Spark()

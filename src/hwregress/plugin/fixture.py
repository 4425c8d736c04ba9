"""The ``hwbench`` fixture: runs a measurement, records it, judges it and asserts; and the bridge to
pytest-benchmark, whose table and ``--benchmark-json`` then show the same timed rounds."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hwregress import workloads
from hwregress.hardware import interconnect, roofline
from hwregress.hardware.devices import describe, environment_fingerprint
from hwregress.hardware.facts import device_kind
from hwregress.hardware.identity import device_identity
from hwregress.judge.session import BenchSession
from hwregress.judge.window_verdict import check_from_terms, window_terms
from hwregress.measure import ceilings, host_reference, parity
from hwregress.measure.batch_search import find_max_batch
from hwregress.measure.compilation import CompileFailed
from hwregress.measure.llm.window import run_llm
from hwregress.measure.out_of_memory import OutOfMemory
from hwregress.measure.precision.numerics import LLM_MODES
from hwregress.measure.record import fill_measurement
from hwregress.measure.timing import RoundTimer, TimingPlan, VerdictCheck, default_timer
from hwregress.measure.window import Measurement, RunOptions, batch_probe, run_model
from hwregress.plugin.distributed import DistributedBench
from hwregress.plugin.matrix import MAX_BATCH, MAX_BATCH_LIMIT, variant_suffix
from hwregress.plugin.parametrize import family_of, settings
from hwregress.plugin.record import RECORD_KEY, skip_with
from hwregress.plugin.spark import SparkBench
from hwregress.plugin.xdist import holding_devices, is_worker, session_temp
from hwregress.store.atomic import safe_file_name
from hwregress.store.baseline_file import BaselineError, entry_key
from hwregress.store.figures import CompileFigures, LlmFigures
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict
from hwregress.summary import summarize

SESSION_KEY = pytest.StashKey[BenchSession]()
CPU_REFERENCES_KEY = pytest.StashKey[parity.CpuReferences]()
RoundDriver = Callable[[Callable[[], None], int], None]


class HwBench:
    """Runs hwregress measurements inside a test. Every method builds the test's one record first (so a
    failure later still reports what was measured), then measures, judges against the baseline and fails
    the test with the numbers when the judgement says so."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request
        self.item = request.node
        self.config = request.config
        self.settings = settings(self.config)
        self.session = self.config.stash[SESSION_KEY]

    # -- measurements -------------------------------------------------------------------------------
    def throughput(self, device: str, model: str, mode: str, batch_size: int, dtype: str, context: int | None = None,
                   compiler: str = "eager", memory_format: str = "contiguous") -> TestRecord:
        """Benchmark ``model`` in ``mode`` (``context`` tokens per sample for text, compiled with ``compiler``, its
        inputs and weights in ``memory_format``) and assert throughput and peak memory against the baseline."""
        record = self._start("throughput", device, model, mode, batch_size, dtype)
        workload = workloads.get(model)
        record.unit = workload.unit
        record.details.update(compiler=compiler, memory_format=memory_format,
                              **({"context": context} if context else {}))
        mode_key = (f"{mode}-ctx{context}" if context else mode) + variant_suffix(
            {"compiler": compiler, "memory_format": memory_format})
        key = entry_key("throughput", model, mode_key, batch_size, dtype)
        if batch_size == MAX_BATCH:
            batch_size = record.batch_size = self._max_batch(record, model, device, mode, dtype, context, memory_format)
        if mode in LLM_MODES:  # its rounds are generations, not pytest-benchmark rounds: that table leaves them out
            self._llm(record, model, device, mode, batch_size, dtype, context or workload.seq_len or 1)
        else:
            fill_measurement(record,
                             self._run_model(record, model, device, mode, batch_size, dtype, self._round_driver(),
                                                     context=context, compiler=compiler, memory_format=memory_format,
                                                     settled=self._window_check(record, key)))
            self._benchmark_extra_info(record)
        return self._conclude(record, key)

    def _max_batch(self, record: TestRecord, model: str, device: str, mode: str, dtype: str, context: int | None,
                   memory_format: str) -> int:
        """The largest power-of-two batch that fits (:mod:`hwregress.measure.batch_search`); the search is in the
        record, and the baseline of ``bsmax`` keeps the batch it found."""
        limit = MAX_BATCH_LIMIT.get(device_kind(device), MAX_BATCH_LIMIT["cpu"])
        try:
            found = find_max_batch(batch_probe(workloads.get(model), device, mode, dtype, context, memory_format),
                                   device, limit=limit)
        except OutOfMemory as error:
            record.message = str(error)
            skip_with(Verdict.OOM, str(error))
        record.details["max_batch"] = {"batch_size": found.batch_size, "first_oom": found.first_oom,
                                       "tried": list(found.tried), "limit": found.limit}
        return found.batch_size

    def _llm(self, record: TestRecord, model: str, device: str, mode: str, batch_size: int, dtype: str,
             context: int) -> None:
        """A prefill or decode window (:mod:`hwregress.measure.llm.window`): prompt tokens/s (prefill) or the decode
        steps' tokens/s with the inter-token latency p50 as the judged latency (decode); the serving figures in
        ``record.llm``."""
        try:
            result = run_llm(workloads.get(model), device, mode, batch_size, dtype, context, self.settings.plan,
                             self.settings.telemetry_interval_s, profile=self.settings.profile_steps > 0)
        except OutOfMemory as error:
            record.message = str(error)
            skip_with(Verdict.OOM, str(error))
        fill_measurement(record, result.measurement)
        record.llm = LlmFigures.of(result.latency)
        if mode == "decode":
            record.latency_ms = result.latency["itl_p50_ms"]  # one decode step, judged (compare.judges_latency)

    def speedup(self, device: str, model: str, batch_size: int, dtype: str = "fp32") -> TestRecord:
        """Measure ``model`` training on ``device`` and on the CPU in this session; assert the speedup."""
        record = self._start("speedup", device, model, "train", batch_size, dtype)
        record.identity.update(device_identity("cpu"))  # the speedup depends on the host CPU too
        key = entry_key("speedup", model, "train", batch_size, dtype)
        gpu = self._run_model(record, model, device, "train", batch_size, dtype, self._round_driver(), profile_steps=0,
                              settled=self._window_check(record, key))
        fill_measurement(record, gpu)
        cpu_samples = self._cpu_reference(record, model, batch_size, dtype)
        cpu_median = summarize(cpu_samples).median
        record.speedup = record.throughput / cpu_median if record.throughput else None
        record.details["cpu_throughput"] = cpu_median
        record.reference_samples = cpu_samples
        return self._conclude(record, key)

    def _cpu_reference(self, record: TestRecord, model: str, batch_size: int, dtype: str) -> list[float]:
        """The CPU side of a speedup, measured once per session and shared by every worker under a lock, so
        workers never run it at the same time with every core (``hwregress.measure.host_reference``)."""
        # the CPU side of a GPU-sized batch is slow: one warmup step and the minimum of rounds
        cpu_plan = dataclasses.replace(self.settings.plan, warmup_steps=1, rounds=5)

        def measure() -> list[float]:
            return self._run_model(record, model, "cpu", "train", batch_size, dtype, None, cpu_plan,
                                   profile_steps=0).throughput_samples

        return host_reference.measured_once(f"{model}/train/bs{batch_size}/{dtype}", measure,
                                            session_temp(self.request) / "hwregress-cpu-reference")

    def ceiling(self, device: str, name: str, dtype: str) -> TestRecord:
        """Measure one roof of ``device`` (``gemm``, ``copy``, ``h2d``, ``d2h``, ``p2p``, ``allreduce``) and assert it
        against the baseline; the published figure goes beside it."""
        if name == "allreduce":
            record = self._start("ceiling", device, name, "roof", 0, dtype)
            record.unit = "GB/s"
            mode = DistributedBench(self).allreduce(record, device)
            return self._conclude(record, entry_key("ceiling", name, mode, record.batch_size or 0, dtype))
        spec = ceilings.default_spec(name, device)
        record = self._start("ceiling", device, name, "roof", spec.size, dtype)
        record.unit = spec.unit
        reason = ceilings.unsupported_reason(name, device)
        if reason is not None:
            skip_with(Verdict.UNSUPPORTED, reason)
        key = entry_key("ceiling", name, "roof", spec.size, dtype)
        measurement = ceilings.run_ceiling(spec, device, dtype, self._timer(device), self.settings.plan,
                                           self.settings.telemetry_interval_s, self._round_driver(),
                                           settled=self._window_check(record, key))
        fill_measurement(record, measurement)
        record.details.update(measurement.facts)
        if name in interconnect.INTERCONNECT_CEILINGS:
            self._published_link(record, name, device)
        else:
            facts = record.device_facts
            lookup = roofline.peak_lookup(record.device_name or "", facts.get("multiprocessors"),
                                          facts.get("mig", False))
            if lookup.peak is not None:
                record.details.update(published=lookup.peak.roof(name, dtype), published_source=lookup.peak.source)
            else:
                record.details["published_missing"] = lookup.reason
        self._benchmark_extra_info(record)
        return self._conclude(record, key)

    @staticmethod
    def _published_link(record: TestRecord, name: str, device: str) -> None:
        """The published bandwidth of the link a bus ceiling crosses (:mod:`hwregress.hardware.interconnect`), and the
        link."""
        roof = interconnect.published_roof(name, device, record.device_name or "")
        if roof is not None:
            record.details.update(published=roof[0], published_source=roof[1])
        else:
            record.details["published_missing"] = f"no published {name} figure for {record.device_name} on {device}"
        link = interconnect.pcie_link(device)
        if link is not None:
            record.details.update(link.facts())

    def scaling(self, device: str, model: str, world_size: int, batch_size: int, dtype: str) -> TestRecord:
        """Train ``model`` data-parallel over ``world_size`` ranks (batch ``batch_size`` per rank); assert global
        throughput, scaling efficiency against W=1 in this session, and peak memory against the baseline."""
        record = self._start("scaling", device, model, "train", batch_size, dtype)
        mode = DistributedBench(self).scaling(record, device, model, world_size, batch_size, dtype)
        return self._conclude(record, entry_key("scaling", model, mode, batch_size, dtype))

    def colocated(self, device: str, members: str, batch_size: int, dtype: str) -> TestRecord:
        """Train the ``+``-joined ``members`` as processes sharing ``device`` at once and alone; assert the group's
        throughput, its interference (mean throughput beside the others / solo) and memory against the baseline."""
        record = self._start("colocated", device, members, "train", batch_size, dtype)
        DistributedBench(self).colocated(record, device, members.split("+"), batch_size, dtype)
        return self._conclude(record, entry_key("colocated", members, "train", batch_size, dtype))

    def spark(self, device: str, model: str, pipeline: str, batch_size: int, dtype: str) -> TestRecord:
        """Predict real digit images with ``model`` on Spark executors (``pipeline``: ``batch`` over a cached data set
        in full passes, or ``stream`` from a watched folder); assert images/s, the Spark-over-torch throughput ratio
        (batch), the latency (stream) against the baseline, exact agreement with plain torch (batch) and exactly-once
        delivery (stream)."""
        record = self._start("spark", device, model, pipeline, batch_size, dtype)
        failures = SparkBench(self).measure(record, device, model, pipeline, batch_size, dtype)
        return self._conclude(record, entry_key("spark", model, pipeline, batch_size, dtype), failures)

    def digits_accuracy(self, device: str, dtype: str, cpu_accuracy: Callable[[], float]) -> TestRecord:
        """Train the digits CNN on ``device``; assert accuracy against the baseline and, off the CPU,
        against the CPU's accuracy in this session."""
        record = self._start("parity", device, "digits_cnn", "train", parity.DIGITS_BATCH, dtype)
        record.unit = "accuracy"
        started = time.perf_counter()
        record.accuracy = parity.train_digits(device, dtype)
        record.duration_s = time.perf_counter() - started
        failures = []
        if not device.startswith("cpu"):
            record.reference_accuracy = cpu_accuracy()
            margin = self.session.policy.tolerances.device_accuracy_margin
            if abs(record.accuracy - record.reference_accuracy) > margin:
                failures.append(f"{record.test_id}: digits accuracy {record.accuracy:.4f} on {device} differs from the "
                                f"CPU's {record.reference_accuracy:.4f} by more than {margin:.3f}")
        return self._conclude(record, entry_key("parity", "digits_cnn", "train", parity.DIGITS_BATCH, dtype), failures)

    def output_parity(self, device: str, model: str, dtype: str) -> TestRecord:
        """Compare ``model``'s outputs on ``device`` in ``dtype`` with the CPU fp32 reference."""
        record = self._start("output-parity", device, model, "infer", parity.PARITY_SAMPLES, dtype)
        record.unit = "top-1 agreement"
        try:
            result = parity.output_parity(workloads.get(model), device, dtype, references=self._cpu_references())
        except OutOfMemory as error:  # as throughput ends it: the session goes on
            record.message = str(error)
            skip_with(Verdict.OOM, str(error))
        record.accuracy = result.top1_agreement
        record.details.update(relative_error=result.relative_error, max_abs_error=result.max_abs_error,
                              tolerance=result.tolerance, decisive_agreement=result.decisive_agreement,
                              nonfinite_logits=result.nonfinite, reference_nonfinite_logits=result.reference_nonfinite)
        failure = result.failure(device, dtype)
        failures = [f"{record.test_id}: {failure}"] if failure else []
        return self._conclude(record, entry_key("output-parity", model, "infer", parity.PARITY_SAMPLES, dtype),
                              failures)

    # -- plumbing ---------------------------------------------------------------------------------
    def _cpu_references(self) -> parity.CpuReferences:
        """Output parity's CPU fp32 references, shared by the session's tests in this process (one per model)."""
        return self.config.stash.setdefault(CPU_REFERENCES_KEY, parity.CpuReferences())

    def _start(self, family: str, device: str, model: str, mode: str, batch_size: int, dtype: str) -> TestRecord:
        """The test's one record, stashed before anything is measured."""
        info = describe(device)
        record = TestRecord(test_id=self.item.nodeid, family=family, hardware_key=info.hardware_key,
                            device=device, device_name=info.name, model=model, mode=mode, batch_size=batch_size,
                            dtype=dtype, environment=environment_fingerprint(device, self.settings.cudnn_benchmark),
                            device_facts=info.facts, identity=device_identity(device))
        record.details["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.item.stash[RECORD_KEY] = record
        return record

    def _timer(self, device: str) -> RoundTimer:
        return self.config.hook.pytest_hwregress_round_timer(config=self.config, device=device) or default_timer(device)

    def _window_check(self, record: TestRecord, key: str) -> VerdictCheck | None:
        """What keeps the timed window open while its verdict against the baseline entry ``key`` is undecided
        (:func:`hwregress.judge.window_verdict.window_check`); None without a trustworthy entry (judged after the
        window)."""
        return check_from_terms(self.window_terms(record, key))

    def window_terms(self, record: TestRecord, key: str) -> dict[str, Any] | None:
        """The JSON-able terms of :meth:`_window_check` (:func:`hwregress.judge.window_verdict.window_terms`), for a
        window that runs in a scale-out job's ranks."""
        assert record.hardware_key is not None
        try:
            entry = self.session.baseline_entry(record.hardware_key, key)
        except BaselineError:
            return None  # the judgement after the window fails the test with the file's error
        policy = self.session.policy
        return window_terms(entry, record.identity, policy.tolerances,
                            device_kind(record.device or "cpu") == "cpu", self.settings.plan.confirm_s,
                            policy.accept_identity)

    def _run_model(self, record: TestRecord, model: str, device: str, mode: str, batch_size: int, dtype: str,
                   round_driver: RoundDriver | None, plan: TimingPlan | None = None,
                   profile_steps: int | None = None, context: int | None = None, compiler: str = "eager",
                   memory_format: str = "contiguous", settled: VerdictCheck | None = None) -> Measurement:
        trace = None
        if self.settings.trace:
            trace = (self.settings.report_dir / "traces"
                     / f"{safe_file_name(record.test_id, 150)}-{device.replace(':', '')}.json")
            record.trace_path = str(trace)
        options = RunOptions(plan or self.settings.plan, self.settings.telemetry_interval_s,
                             self.settings.profile_steps if profile_steps is None else profile_steps, trace,
                             round_driver,
                             cudnn_benchmark=self.settings.cudnn_benchmark, compiler=compiler,
                             memory_format=memory_format, settled=settled)
        try:
            return run_model(workloads.get(model), device, mode, batch_size, dtype, self._timer(device), options,
                             context)
        except OutOfMemory as error:
            record.message = str(error)
            skip_with(Verdict.OOM, str(error))
        except CompileFailed as error:  # a failed record with the error's first lines; the session goes on
            record.message = str(error)
            record.compile = CompileFigures(backend=error.backend, error=list(error.first_lines))
            pytest.fail(str(error), pytrace=False)

    def _round_driver(self) -> RoundDriver | None:
        bench = self._benchmark_fixture()
        if bench is None:
            return None
        return lambda run_round, rounds: bench.pedantic(run_round, rounds=rounds, iterations=1, warmup_rounds=0)

    def _benchmark_fixture(self) -> Any:
        """pytest-benchmark's fixture when that plugin is active (it switches itself off under xdist)."""
        if not self.config.pluginmanager.hasplugin("benchmark") or is_worker(self.config) \
                or self.config.getoption("benchmark_disable", False):
            return None  # asking for the fixture then would only earn "fixture was not used" warnings
        try:
            bench = self.request.getfixturevalue("benchmark")
        except pytest.FixtureLookupError:
            return None
        return None if getattr(bench, "disabled", True) else bench

    def _benchmark_extra_info(self, record: TestRecord) -> None:
        bench = self._benchmark_fixture()
        if bench is not None:
            bench.extra_info.update(throughput=record.throughput, unit=record.unit, latency_ms=record.latency_ms,
                                    peak_memory_bytes=record.peak_memory_bytes,
                                    steps_per_round=record.steps_per_round, batch_size=record.batch_size,
                                    hardware_key=record.hardware_key)

    def _conclude(self, record: TestRecord, key: str, extra_failures: list[str] | None = None) -> TestRecord:
        try:
            failures = self.session.conclude(record, key, extra_failures)
        except BaselineError as error:
            record.message = str(error)
            pytest.fail(str(error), pytrace=False)
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
        return record


def release_cpu_references(config: pytest.Config, nextitem: pytest.Item | None) -> None:
    """Drop output parity's CPU references when the next test is no output-parity test: the last model (5 GB of
    host memory for llama_1b) must not stay in memory under the windows of the families that follow."""
    if nextitem is None or family_of(nextitem) != "output-parity":
        if CPU_REFERENCES_KEY in config.stash:
            del config.stash[CPU_REFERENCES_KEY]


@pytest.fixture
def hwbench(request: pytest.FixtureRequest) -> Iterator[HwBench]:
    """Runs hwregress measurements inside a test; see :class:`HwBench`. Under xdist the test holds its CUDA device's
    lock meanwhile (:func:`hwregress.plugin.xdist.holding_devices`)."""
    callspec = getattr(request.node, "callspec", None)
    device = callspec.params.get("device") if callspec is not None else None
    with holding_devices(request, [device] if device else []):
        yield HwBench(request)

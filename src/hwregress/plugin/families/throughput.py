"""The ``throughput`` family: training-step, inference, prefill and decode throughput of every selected model, device,
mode, compiler, memory format, batch size and dtype, judged against the baseline (throughput ratio, peak memory and,
for decode, the inter-token latency); ``--batch-sizes max`` searches the largest batch that fits first."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

from hwregress import workloads
from hwregress.ab.protocol import Case
from hwregress.ab.workers import WorkerFailed
from hwregress.hardware.facts import device_kind
from hwregress.measure import visits
from hwregress.measure.batch_search import find_max_batch
from hwregress.measure.llm.window import run_llm
from hwregress.measure.out_of_memory import OutOfMemory
from hwregress.measure.precision.numerics import LLM_MODES, STEP_MODES
from hwregress.measure.precision.quantization import QuantizationUnsupported
from hwregress.measure.record import fastest_visit, window_figures
from hwregress.measure.timing import TimingPlan, VerdictCheck
from hwregress.measure.visits import HOST_FACTS, Visit
from hwregress.measure.window import batch_probe
from hwregress.plugin.context import BenchContext
from hwregress.plugin.families.ab_window import measure_ab, skip_outside_ab, unsupported_in_ab
from hwregress.plugin.families.model_window import model_window
from hwregress.plugin.matrix import (
    MAX_BATCH,
    MAX_BATCH_LIMIT,
    Selection,
    batch_sizes_for,
    memory_formats_for,
    models_for,
    modes_for,
    variant_suffix,
)
from hwregress.plugin.record import fail_with, skip_with
from hwregress.plugin.tier_costs import Cost, CostModel, not_estimated
from hwregress.plugin.visits import VISITS_KEY, visit_case
from hwregress.plugin.visits import now as visit_clock
from hwregress.store.assembly import put_measured
from hwregress.store.baseline_file import entry_key
from hwregress.store.figures import LlmFigures
from hwregress.store.measured import MeasuredFigures
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict


class Throughput:
    """The ``throughput`` family (:class:`hwregress.plugin.families.protocol.Family`)."""

    name = "throughput"
    marker = "throughput"
    marker_help = "a timed benchmark asserted against the baseline's throughput and peak memory"
    requires: frozenset[str] = frozenset()
    sub_records = ("llm", "compile", "ab")  # ab: in an A/B session (plugin/families/ab_window.py)
    view = "models"  # the report's charts over batch size and of the GPU over the CPU (report/family_views.py)
    # a decode window's latency_ms is its inter-token latency p50 (one decode step), judged beside its tokens/s
    judged_latency_modes = frozenset({"decode"})
    host_evidence = True
    worker_window = True

    def cases(self, selection: Selection) -> list[dict[str, Any]]:
        """The full product: device x model x mode x compiler (step modes only) x memory format x batch x dtype; a text
        model's context goes with its mode."""
        return [
            {"device": device, "workload": m, "mode": mode,
             "context": workloads.get(m).context_for(device_kind(device)),
             "compiler": c, "memory_format": f, "batch_size": b, "dtype": d}
            for device in selection.devices
            for m in models_for(selection, device)
            for mode in modes_for(selection, device, m)
            for c in (selection.compilers if mode in STEP_MODES else ["eager"])
            for f in memory_formats_for(selection, m)
            for b in batch_sizes_for(selection, device, mode, m)
            for d in selection.dtypes
        ]

    def measure(self, bench: BenchContext, *, device: str, workload: str, mode: str, batch_size: Any, dtype: str,
                context: int | None = None, compiler: str = "eager", memory_format: str = "contiguous") -> TestRecord:
        """Benchmark ``workload`` in ``mode`` (``context`` tokens per sample for text, compiled with ``compiler``, its
        inputs and weights in ``memory_format``) and judge throughput and peak memory against the baseline."""
        record = bench.start(self.name, device, workload, mode, batch_size, dtype)
        model = workloads.get(workload)
        variant = {"compiler": compiler, "memory_format": memory_format, **({"context": context} if context else {})}
        put_measured(record, MeasuredFigures(unit=model.unit, details=variant))
        mode_key = (f"{mode}-ctx{context}" if context else mode) + variant_suffix(
            {"compiler": compiler, "memory_format": memory_format})
        key = entry_key(self.name, workload, mode_key, batch_size, dtype)
        if bench.settings.ab is not None:
            return _ab(bench, record, workload, device, mode, batch_size, dtype, context, compiler, memory_format)
        if batch_size == MAX_BATCH:
            batch_size = _max_batch(record, workload, device, mode, dtype, context, memory_format)
        count = bench.config.stash[VISITS_KEY].count(self.name, {
            "device": device, "mode": mode, "batch_size": batch_size, "compiler": compiler,
            "memory_format": memory_format}) if VISITS_KEY in bench.config.stash else 1
        if count > 1:
            _visited(bench, record, workload, device, mode, batch_size, dtype, context, count)
        elif mode in LLM_MODES:  # its rounds are generations, not pytest-benchmark rounds: that table leaves them out
            put_measured(record, _llm(bench, record, workload, device, mode, batch_size, dtype,
                                      context or model.seq_len or 1, bench.settings.plan,
                                      bench.window_check(record, key)))
        else:
            put_measured(record, window_figures(record, model_window(
                bench, record, workload, device, mode, batch_size, dtype, bench.round_driver(), context=context,
                compiler=compiler, memory_format=memory_format, settled=bench.window_check(record, key))))
            bench.benchmark_extra_info(record)
        return bench.conclude(record, key)

    def estimated_cost(self, case: dict[str, Any], cost: CostModel) -> Cost:
        """A step mode's model window, profiled and counted, or a prefill or decode window (eager, numeric batches);
        a launch-bound one's visits in the session's visit workers on top (the cost model's ``--visits``)."""
        if case.get("compiler", "eager") != "eager" or case["batch_size"] == MAX_BATCH:
            raise not_estimated(case, "compilation and the max-batch search are not costed; leave out --compile and "
                                      "--batch-sizes max")
        name, mode, batch, device, dtype = (case["workload"], case["mode"], case["batch_size"], case["device"],
                                            case["dtype"])
        count = visits.visits_for(cost.visits_setting, device_kind(device), mode, batch)
        extra = cost.visits(name, mode, batch, device, dtype, case.get("context"), count) if count > 1 else Cost()
        if mode in LLM_MODES:
            return cost.serving(name, mode, batch, device, dtype, case.get("context")) + extra
        return cost.model_window(name, mode, batch, device, dtype, case.get("context")) + extra


def _ab(bench: BenchContext, record: TestRecord, workload: str, device: str, mode: str, batch_size: Any, dtype: str,
        context: int | None, compiler: str, memory_format: str) -> TestRecord:
    """The case's A/B form (:mod:`hwregress.plugin.families.ab_window`), or a skip saying why it has none."""
    unsupported = unsupported_in_ab(mode, compiler, memory_format, batch_size)
    if unsupported is not None:
        skip_outside_ab(f"{unsupported}")
    case = Case(workload, mode, batch_size, device=device, dtype=dtype, context=context,
                warmup_steps=bench.settings.plan.warmup_steps, cudnn_benchmark=bench.settings.cudnn_benchmark)
    return measure_ab(bench, record, device, case)


def _max_batch(record: TestRecord, model: str, device: str, mode: str, dtype: str, context: int | None,
               memory_format: str) -> int:
    """The largest power-of-two batch that fits (:mod:`hwregress.measure.batch_search`), the record's batch from now
    on; the search is in the record, and the baseline of ``bsmax`` keeps the batch it found."""
    limit = MAX_BATCH_LIMIT.get(device_kind(device), MAX_BATCH_LIMIT["cpu"])
    try:
        found = find_max_batch(batch_probe(workloads.get(model), device, mode, dtype, context, memory_format),
                               device, limit=limit)
    except OutOfMemory as error:
        skip_with(Verdict.OOM, str(error))
    put_measured(record, MeasuredFigures(batch_size=found.batch_size, details={"max_batch": {
        "batch_size": found.batch_size, "first_oom": found.first_oom, "tried": list(found.tried),
        "limit": found.limit}}))
    return found.batch_size


def _visited(bench: BenchContext, record: TestRecord, model: str, device: str, mode: str, batch_size: int,
             dtype: str, context: int | None, count: int) -> None:
    """A launch-bound window measured in ``count`` visits (:mod:`hwregress.measure.visits`): the test's own window
    here (profiled, with telemetry), a fixed window of the plan's rounds without looks, and ``count - 1`` in the
    session's visit workers (:mod:`hwregress.plugin.visits`); the record judged on the fastest. A visit that ran out of
    memory skips the test as ``oom``; one that failed otherwise fails it with the worker's error."""
    fixed = dataclasses.replace(bench.settings.plan, max_rel_iqr=math.inf)  # every visit: the plan's rounds
    workload = workloads.get(model)
    started = visit_clock()
    if mode in LLM_MODES:
        context = context or workload.seq_len or 1
        measured = _llm(bench, record, model, device, mode, batch_size, dtype, context, fixed, None)
    else:
        measured = window_figures(record, model_window(bench, record, model, device, mode, batch_size, dtype,
                                                       bench.round_driver(), plan=fixed, context=context))
    put_measured(record, measured)  # a failed visit leaves the test's own window on its record
    own = Visit("pytest", os.getpid(), started, list(measured.samples),
                measured.latency_ms if mode == "decode" else None,
                {key: measured.health.get(key) for key in HOST_FACTS if key in measured.health})
    session_visits = bench.config.stash[VISITS_KEY]
    try:
        others = session_visits.visits_of(record.test_id, visit_case(session_visits, device, model, mode, batch_size,
                                                                     dtype, context), count)
    except WorkerFailed as error:
        message = f"a visit of this window failed: {error}"
        if error.kind == "oom":
            skip_with(Verdict.OOM, message)
        fail_with(message)
    taken = sorted([own, *others], key=lambda visit: visit.started_s)
    put_measured(record, fastest_visit(record, measured, taken, workload.work_per_sample(context)))


def _llm(bench: BenchContext, record: TestRecord, model: str, device: str, mode: str, batch_size: int, dtype: str,
         context: int, plan: TimingPlan, settled: VerdictCheck | None) -> MeasuredFigures:
    """A prefill or decode window's figures (:mod:`hwregress.measure.llm.window`) of ``plan``: prompt tokens/s
    (prefill) or the decode steps' tokens/s with the inter-token latency p50 as the judged latency (decode); the
    serving figures in ``llm``. Its looks judge with ``settled`` (None: no looks)."""
    settings = bench.settings
    try:
        result = run_llm(workloads.get(model), device, mode, batch_size, dtype, context, plan,
                         settings.telemetry_interval_s, profile=settings.profile_steps > 0, settled=settled)
    except OutOfMemory as error:
        skip_with(Verdict.OOM, str(error))
    except QuantizationUnsupported as error:
        skip_with(Verdict.UNSUPPORTED, str(error))
    measured = dataclasses.replace(window_figures(record, result.measurement), llm=LlmFigures.of(result.latency))
    if mode == "decode":  # one decode step, judged (judged_latency_modes)
        measured = dataclasses.replace(measured, latency_ms=result.latency["itl_p50_ms"])
    return measured


FAMILY = Throughput()

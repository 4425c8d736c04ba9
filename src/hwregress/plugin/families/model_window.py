"""A model's timed window for a family (:mod:`~hwregress.plugin.families.throughput`,
:mod:`~hwregress.plugin.families.speedup`): the settings' options, the trace file, and the ends a window may come to
in a test (out of memory: ``oom``; a compile failure: a failed record with the error's first lines)."""

from __future__ import annotations

from hwregress import workloads
from hwregress.measure.compilation import CompileFailed
from hwregress.measure.out_of_memory import OutOfMemory
from hwregress.measure.precision.quantization import QuantizationUnsupported
from hwregress.measure.timing import TimingPlan, VerdictCheck
from hwregress.measure.window import Measurement, RunOptions, run_model
from hwregress.plugin.context import BenchContext, RoundDriver
from hwregress.plugin.record import fail_with, skip_with
from hwregress.store.assembly import put_measured
from hwregress.store.atomic import safe_file_name
from hwregress.store.figures import CompileFigures
from hwregress.store.measured import MeasuredFigures
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict


def model_window(bench: BenchContext, record: TestRecord, model: str, device: str, mode: str, batch_size: int,
                 dtype: str, round_driver: RoundDriver | None, plan: TimingPlan | None = None,
                 profile_steps: int | None = None, context: int | None = None, compiler: str = "eager",
                 memory_format: str = "contiguous", settled: VerdictCheck | None = None) -> Measurement:
    """Run ``model``'s window (:func:`hwregress.measure.window.run_model`) with the session's plan (or ``plan``),
    telemetry, profile steps (or ``profile_steps``) and trace (its path on ``record``); an out-of-memory skips the test
    as ``oom`` and a compile failure fails it (its first lines on ``record``), both with the error as the message."""
    settings = bench.settings
    trace = None
    if settings.trace:
        trace = settings.report_dir / "traces" / f"{safe_file_name(record.test_id, 150)}-{device.replace(':', '')}.json"
        put_measured(record, MeasuredFigures(trace_path=str(trace)))
    options = RunOptions(plan or settings.plan, settings.telemetry_interval_s,
                         settings.profile_steps if profile_steps is None else profile_steps, trace, round_driver,
                         cudnn_benchmark=settings.cudnn_benchmark, compiler=compiler, memory_format=memory_format,
                         settled=settled)
    try:
        return run_model(workloads.get(model), device, mode, batch_size, dtype, bench.timer(device), options, context)
    except OutOfMemory as error:
        skip_with(Verdict.OOM, str(error))
    except QuantizationUnsupported as error:
        skip_with(Verdict.UNSUPPORTED, str(error))
    except CompileFailed as error:  # a failed record with the error's first lines; the session goes on
        failed = CompileFigures(backend=error.backend, error=list(error.first_lines))
        put_measured(record, MeasuredFigures(compile=failed))
        fail_with(str(error))

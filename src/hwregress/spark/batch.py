"""Batch inference on Spark: the digits data set through ``predict_batch_udf`` in full passes, against the same
model and batch in plain torch on the same device in the same session.

Discipline: the data set is cached in the executors first; the first pass (Python workers start, models build)
is timed apart; then each timed round is one full pass, at least :data:`MIN_PASSES` (a significance test
needs five) and at most the plan's rounds, stopping early once the passes have taken the plan's time budget.
The plain-torch reference runs the same number of passes over the same rows in the same batches.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hwregress.measure.timing import TimingPlan
from hwregress.spark.predictor import Predictor, PredictSpec, digit_pixels, digit_rows, predict_udf, row_schema

MIN_PASSES = 5


@dataclass(frozen=True)
class BatchSpec:
    """One batch-inference measurement.

    Attributes:
        predict: the model, device and numerics (:class:`hwregress.spark.predictor.PredictSpec`).
        batch_size: rows per model call.
        rows: rows in the data set, rounded up to whole batches in every partition.
        partitions: partitions of the data set (the session's default parallelism: one per task slot).
        plan: rounds (the most passes) and time budget (s) of the timed passes.
    """

    predict: PredictSpec
    batch_size: int
    rows: int
    partitions: int
    plan: TimingPlan


@dataclass
class BatchResult:
    """Figures of one batch-inference measurement (throughput in images/s)."""

    rows: int
    partitions: int
    first_pass_s: float
    spark_samples: list[float]  # images/s of each timed pass
    torch_samples: list[float]  # images/s of each plain-torch pass
    agreement: float  # fraction of rows whose top-1 class equals plain torch's
    max_logit_difference: float  # largest |top-1 logit difference| over the rows, where the classes agree
    logit_scale: float  # largest |top-1 logit| of plain torch: what the difference is relative to
    disagreements: list[dict[str, Any]] = field(default_factory=list)  # the first few rows that differ
    distinct_classes: int = 0


def aligned_rows(rows: int, partitions: int, batch_size: int) -> int:
    """``rows`` rounded up so every partition holds whole batches: every model call then sees ``batch_size`` rows,
    as the plain-torch reference's do."""
    unit = partitions * batch_size
    return max(unit, -(-rows // unit) * unit)


def run_batch(session: Any, spec: BatchSpec, on_timed: Callable[[], Any] | None = None) -> BatchResult:
    """Measure ``spec`` on ``session``. ``on_timed`` (optional) returns a context manager entered around the timed
    Spark passes (telemetry).

    Raises:
        Exception: Spark's own error when a pass fails (a Py4J or Python worker error).
    """
    rows = aligned_rows(spec.rows, spec.partitions, spec.batch_size)
    # contiguous slices: partition p holds rows [p*n, (p+1)*n), so its model calls see the reference's batches
    frame = session.sparkContext.parallelize(digit_rows(rows), spec.partitions).toDF(row_schema()).cache()
    frame.count()
    udf = predict_udf(spec.predict, spec.batch_size)
    query = frame.select("id", udf("pixels").alias("p")).select("id", "p.prediction", "p.logit")
    started = time.perf_counter()
    query.collect()
    first_pass_s = time.perf_counter() - started
    passes = _passes(spec.plan, first_pass_s)
    with on_timed() if on_timed else contextlib.nullcontext():
        spark_samples, spark_rows = _timed_passes(lambda: query.collect(), rows, passes)
    torch_samples, torch_out = _torch_passes(spec, rows, passes)
    spark_out = _by_id(spark_rows, rows)
    return BatchResult(rows=rows, partitions=spec.partitions, first_pass_s=first_pass_s, spark_samples=spark_samples,
                       torch_samples=torch_samples, **agreement(spark_out, torch_out))


def _passes(plan: TimingPlan, first_pass_s: float) -> int:
    """Timed passes: the plan's rounds, fewer when they would outlast its budget, never fewer than MIN_PASSES."""
    within_budget = int(plan.budget_s // max(first_pass_s, 1e-3))
    return max(MIN_PASSES, min(plan.rounds, within_budget))


def _timed_passes(one_pass: Callable[[], Any], rows: int, passes: int) -> tuple[list[float], Any]:
    samples, last = [], None
    for _ in range(passes):
        started = time.perf_counter()
        last = one_pass()
        samples.append(rows / (time.perf_counter() - started))
    return samples, last


def _torch_passes(spec: BatchSpec, rows: int, passes: int) -> tuple[list[float], tuple[np.ndarray, np.ndarray]]:
    """The plain-torch reference: the same predictor over the same rows, ``batch_size`` at a time, in this process
    with its default threads; one untimed pass first."""
    predictor = Predictor(spec.predict)
    pixels = digit_pixels(np.arange(rows))
    batches = [pixels[i:i + spec.batch_size] for i in range(0, rows, spec.batch_size)]

    def one_pass() -> tuple[np.ndarray, np.ndarray]:
        outputs = [predictor(batch) for batch in batches]
        return np.concatenate([o[0] for o in outputs]), np.concatenate([o[1] for o in outputs])

    one_pass()
    samples, last = _timed_passes(one_pass, rows, passes)
    return samples, last


def _by_id(collected: Any, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Spark's collected rows as arrays indexed by id.

    Raises:
        RuntimeError: a row is missing or came back twice (Spark lost or repeated work).
    """
    classes, logits = np.full(rows, -1, dtype=np.int64), np.zeros(rows, dtype=np.float32)
    seen = np.zeros(rows, dtype=np.int64)
    foreign = []
    for row in collected:
        if not 0 <= row["id"] < rows:
            foreign.append(row["id"])
            continue
        classes[row["id"]], logits[row["id"]] = row["prediction"], row["logit"]
        seen[row["id"]] += 1
    if foreign or not (seen == 1).all():
        raise RuntimeError(f"Spark returned {int((seen == 0).sum())} rows never, {int((seen > 1).sum())} rows more "
                           f"than once and {len(foreign)} ids outside 0..{rows - 1} ({foreign[:5]}) of {rows}")
    return classes, logits


def agreement(spark: tuple[np.ndarray, np.ndarray], reference: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    """Top-1 agreement of Spark's predictions with plain torch's (fraction), the largest top-1 logit difference
    where they agree and the largest top-1 logit of plain torch (its scale), the first five rows that differ, and how
    many classes were predicted."""
    same = spark[0] == reference[0]
    differing = np.flatnonzero(~same)[:5]
    gap = np.abs(spark[1] - reference[1])[same]
    return {"agreement": float(same.mean()), "max_logit_difference": float(gap.max()) if gap.size else float("nan"),
            "logit_scale": float(np.abs(reference[1]).max()) if reference[1].size else 0.0,
            "disagreements": [{"id": int(i), "spark": int(spark[0][i]), "torch": int(reference[0][i]),
                               "spark_logit": float(spark[1][i]), "torch_logit": float(reference[1][i])}
                              for i in differing],
            "distinct_classes": len(np.unique(reference[0]))}

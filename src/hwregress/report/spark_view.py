"""The report's Spark section: batch inference on Spark against plain torch, and Structured Streaming's rate,
latency distribution and exactly-once count.

Records read (``hwregress.store.results.TestRecord`` with ``family="spark"`` and a ``spark`` sub-record,
:class:`hwregress.store.figures.SparkFigures`; the pipeline is ``spark.pipeline``, else the record's ``mode``):

- ``batch``: ``throughput`` is Spark's median images/s over full passes of a cached DataFrame, ``efficiency`` the
  overhead ratio Spark images/s / plain torch images/s (same model, batch and device, same session; 1.0 = no
  overhead), ``accuracy`` the top-1 agreement with plain torch (must be 1.0); the sub-record holds the plain torch
  images/s (``torch_throughput``), the partitions and the engine (master, version, executor layout).
- ``stream``: ``throughput`` is the median images/s of the measured micro-batches, ``latency_ms`` the p50
  latency (ms) judged against ``baseline_latency_ms``; the sub-record holds the rates asked, offered and sustained
  (images/s), p50/p90/p99 latency (ms), ``latency_quantiles_ms`` (up to 100 evenly spaced quantiles of the
  per-image latency, ms, sorted) and the exactly-once count (produced, predicted, lost, predicted twice).

Any figure may be missing, None or not finite (a failed test still has a record): such a figure is left out of the
charts and shown as "–" in the tables, never an error. Records without a ``spark`` sub-record (skipped tests) are
left out of the section.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from hwregress.report import charts
from hwregress.report.record_values import mapping, number, sort_key, text
from hwregress.store.figures import SparkFigures
from hwregress.store.results import TestRecord

SPARK_VIEW = "spark"  # the record view of a Spark pipeline (TestRecord.view)
CDF_SERIES = "fraction of images"
PERCENTILES = ("p50", "p90", "p99")


@dataclass(frozen=True)
class SparkEngineFacts:
    """What a Spark test ran on: ``master`` URL, Spark version, executor ``layout`` (``1 executor x 2 cores, 1 CPU
    per task``). None: not recorded."""

    master: str | None
    spark_version: str | None
    layout: str | None


@dataclass(frozen=True)
class SparkBatchRow:
    """One batch-inference test as a table row. Throughputs in images/s, ``overhead_ratio`` = Spark / plain torch
    images/s (1.0 = no overhead), ``agreement`` the fraction of images whose top-1 class equals plain torch's.
    ``agreement_failed``: below 1.0. None: not recorded."""

    record: TestRecord
    device: str
    spark_throughput: float | None
    torch_throughput: float | None
    overhead_ratio: float | None
    baseline_overhead_ratio: float | None
    agreement: float | None
    agreement_text: str
    agreement_failed: bool
    max_logit_difference: float | None
    rows: int | float | None
    partitions: int | float | None
    engine: SparkEngineFacts


@dataclass(frozen=True)
class SparkStreamRow:
    """One streaming test as a table row. Rates in images/s (``rate`` the producer was asked for, ``offered_rate``
    what it wrote, ``sustained_rate`` what the stream predicted, ``median_batch_rate`` the judged median over
    micro-batches), latencies in ms, counts in images; ``exactly_once`` None: not recorded. ``failed``: images were
    lost, predicted twice or never written."""

    record: TestRecord
    device: str
    rate: float | None
    offered_rate: float | None
    sustained_rate: float | None
    median_batch_rate: float | None
    latency_ms: Mapping[str, float | None]
    baseline_p50_ms: float | None
    produced: int | float | None
    predicted: int | float | None
    lost: int | float | None
    duplicated: int | float | None
    unexpected: int | float | None
    exactly_once: bool | None
    micro_batches: int | float | None
    restarts: int | float | None
    engine: SparkEngineFacts

    @property
    def failed(self) -> bool:
        return self.exactly_once is False


def spark_context(records: Sequence[TestRecord]) -> dict[str, Any]:
    """The template variables of ``_spark.html.j2`` from a session's records (any order, any families):
    ``spark_batch_rows`` (list of :class:`SparkBatchRow`), ``spark_throughput_charts`` (list of SVG Markup: per
    device a bar chart of Spark and plain torch images/s), ``spark_stream_rows`` (list of :class:`SparkStreamRow`),
    ``spark_latency_charts`` (list of SVG Markup: per stream its latency CDF, ms) and ``has_spark``."""
    spark = sorted((r for r in records if is_spark(r)), key=_spark_order)
    batch = [r for r in spark if pipeline(r) != "stream"]  # with no pipeline or mode recorded, still listed
    stream = [r for r in spark if pipeline(r) == "stream"]
    batch_rows = [batch_row(r) for r in batch]
    stream_rows = [stream_row(r) for r in stream]
    return {
        "spark_batch_rows": batch_rows,
        "spark_throughput_charts": throughput_charts(batch_rows),
        "spark_stream_rows": stream_rows,
        "spark_latency_charts": [chart for chart in map(latency_chart, stream_rows) if chart],
        "has_spark": bool(spark),
    }


def is_spark(record: TestRecord) -> bool:
    """A Spark test that recorded its engine facts (a skipped one records none and is left out)."""
    return record.view == SPARK_VIEW and record.spark is not None


def pipeline(record: TestRecord) -> str | None:
    """``batch`` or ``stream``: the recorded pipeline, else the record's mode (a test that failed before its
    measurement recorded only the engine)."""
    recorded = record.spark.pipeline if record.spark else None
    return str(recorded) if recorded is not None else record.mode


def _spark_order(record: TestRecord) -> tuple[Any, ...]:
    return (device_label(record), str(record.model or ""), sort_key(record.batch_size), str(record.dtype or ""),
            record.test_id)


def device_label(record: TestRecord) -> str:
    """``AMD EPYC (cpu)``; just the device (or ``?``) without a device name."""
    device = str(record.device or "?")
    return f"{record.device_name} ({device})" if record.device_name else device


def _engine(spark: SparkFigures) -> SparkEngineFacts:
    return SparkEngineFacts(master=text(spark.master), spark_version=text(spark.spark_version),
                            layout=text(spark.layout))


# --- batch inference -----------------------------------------------------------------------------------------

def batch_row(record: TestRecord) -> SparkBatchRow:
    """The table row of one batch-inference record; details it lacks are None."""
    spark = record.spark or SparkFigures()
    overhead = number(record.efficiency)
    agreement = number(record.accuracy)
    if agreement is None:
        agreement = number(spark.agreement)
    return SparkBatchRow(
        record=record, device=device_label(record), spark_throughput=number(record.throughput),
        torch_throughput=number(spark.torch_throughput),
        overhead_ratio=overhead if overhead is not None else number(spark.overhead_ratio),
        baseline_overhead_ratio=number(record.baseline_efficiency), agreement=agreement,
        agreement_text=agreement_text(agreement), agreement_failed=agreement is not None and agreement < 1.0,
        max_logit_difference=number(spark.max_logit_difference), rows=number(spark.rows),
        partitions=number(spark.partitions), engine=_engine(spark))


def agreement_text(agreement: float | None) -> str:
    """A fraction as a percentage rounded down to 0.01% (so that an agreement below 1 never reads ``100.00%``);
    exactly 1 as ``100%``; None as ``–``."""
    if agreement is None:
        return "–"
    if agreement == 1:
        return "100%"
    return f"{math.floor(agreement * 10_000) / 100:.2f}%"


def throughput_charts(rows: Sequence[SparkBatchRow]) -> list[Markup]:
    """Per device (and machine) one bar chart of images/s: per test a Spark bar and a plain torch bar. Devices
    without a drawable figure give no chart."""
    groups: dict[tuple[str, str], list[SparkBatchRow]] = defaultdict(list)
    for row in rows:
        groups[(row.device, str(row.record.hardware_key or ""))].append(row)
    out = []
    for (device, hardware_key), group in sorted(groups.items()):
        bars = [bar for row in group for bar in _throughput_bars(row)]
        where = f"{device}, {hardware_key}" if hardware_key else device
        out.append(charts.bar_chart(bars, f"Spark vs plain torch — {where}", "images/s"))
    return [chart for chart in out if chart]


def _throughput_bars(row: SparkBatchRow) -> list[tuple[str, float | None]]:
    """``Spark <model> bs<batch> <dtype>`` and ``torch ...`` (images/s); the engine leads the label, as the bar
    chart shortens long labels from the end."""
    r = row.record
    name = f"{r.model or '?'} bs{r.batch_size} {r.dtype or ''}".rstrip()
    return [(f"Spark {name}", row.spark_throughput), (f"torch {name}", row.torch_throughput)]


# --- Structured Streaming ------------------------------------------------------------------------------------

def stream_row(record: TestRecord) -> SparkStreamRow:
    """The table row of one streaming record; details it lacks are None."""
    spark = record.spark or SparkFigures()
    latency = mapping(spark.latency_ms)
    percentiles = {p: number(latency.get(p)) for p in PERCENTILES}
    if percentiles["p50"] is None:
        percentiles["p50"] = number(record.latency_ms)
    return SparkStreamRow(
        record=record, device=device_label(record), rate=number(spark.rate), offered_rate=number(spark.offered_rate),
        sustained_rate=number(spark.sustained_rate), median_batch_rate=number(record.throughput),
        latency_ms=percentiles, baseline_p50_ms=number(record.baseline_latency_ms), produced=number(spark.produced),
        predicted=number(spark.predicted), lost=number(spark.lost), duplicated=number(spark.duplicated),
        unexpected=number(spark.unexpected),
        exactly_once=spark.exactly_once if isinstance(spark.exactly_once, bool) else None,
        micro_batches=number(spark.micro_batches), restarts=number(spark.restarts), engine=_engine(spark))


def latency_cdf(quantiles: Any) -> list[tuple[float, float]]:
    """The empirical CDF of a stream's latency from its recorded quantiles (ms, taken at evenly spaced levels
    0..1): (latency ms, fraction of images at or below it). Values that are not finite numbers are left out."""
    values = sorted(float(v) for v in (quantiles if isinstance(quantiles, (list, tuple)) else ())
                    if number(v) is not None)
    if len(values) == 1:
        return [(values[0], 1.0)]
    return [(value, index / (len(values) - 1)) for index, value in enumerate(values)]


def latency_chart(row: SparkStreamRow) -> Markup:
    """The latency distribution of one stream: its CDF (x: latency ms, y: fraction of images) with p50, p90, p99
    and the baseline p50 marked at their levels. Empty Markup without a drawable latency."""
    r = row.record
    series: dict[str, list[tuple[Any, Any]]] = {
        CDF_SERIES: latency_cdf(r.spark.latency_quantiles_ms if r.spark else None)}
    marks = [(p, row.latency_ms[p], int(p[1:]) / 100) for p in PERCENTILES]
    if row.baseline_p50_ms is not None:
        marks.append(("baseline p50", row.baseline_p50_ms, 0.5))
    for name, latency, level in marks:
        if latency is not None:
            series[f"{name} {charts.format_value(latency)} ms"] = [(latency, level)]
    title = f"{r.model or '?'} stream latency — {row.device}"
    return charts.line_chart(series, title, "latency (ms)", "fraction of images ≤ latency")

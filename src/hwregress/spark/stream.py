"""Streaming inference on Spark: a producer writes digit images into a watched folder at a fixed rate, a
Structured Streaming query predicts each micro-batch with the batch family's UDF into a file sink with a
checkpoint, and the images are counted at both ends.

- Atomic hand-over: the producer writes each image to a hidden file (a leading ``.``: Spark's file source lists
  no hidden file) and renames it into place, so the query never reads half a file. The moment of the rename is
  the image's ``written`` time.
- Exactly once: the file sink commits each micro-batch in its ``_spark_metadata`` log and the query resumes from
  its checkpoint, so a stopped and restarted query neither skips nor repeats a file (Spark Structured Streaming
  Programming Guide, "Fault Tolerance Semantics"). Reading the sink back through that log gives the predicted
  ids; every produced id must be there exactly once.
- Latency of an image: from its ``written`` time to the end of the model call that predicted it (``predicted_at``,
  stamped on the executor). Both clocks are this host's in local mode; on a cluster of several hosts they are
  the hosts' own clocks (keep them NTP-synchronized).
- Throughput: the sustained rate (measured images / from the first one written to the last one predicted), and
  Spark's own ``processedRowsPerSecond`` of each micro-batch (the rate it processed them at: the figure judged
  against the baseline, as the sustained rate is the producer's while the query keeps up).
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hwregress.spark.predictor import PredictSpec, digit_rows, predict_udf, row_schema

FILE_PREFIX = "digit-"
LATENCY_POINTS = 100  # latency quantiles kept for the report's distribution chart
# how often the driver asks the query whether it is alive (two Py4J calls into the JVM): at 20 ms, as before, the
# watching took a share of the cores the stream's own executors run on (local mode); the producer's thread keeps
# the rate and stops mid-stream by itself, so a slower watch changes no image's time
QUERY_POLL_S = 0.25


class StreamFailed(RuntimeError):
    """The streaming query failed or did not catch up; the message has Spark's error (cut to 2,000 characters; the
    whole error, with a Python worker's traceback, is the ``__cause__``) or the counts."""


@dataclass(frozen=True)
class StreamSpec:
    """One streaming measurement.

    Attributes:
        predict: model, device and numerics (:class:`hwregress.spark.predictor.PredictSpec`).
        batch_size: rows per model call.
        images: images measured (after the warm-up images).
        rate: images written per second.
        folder: working folder (``in/`` watched, ``out/`` sink, ``checkpoint/``); made if missing.
        warmup_images: images written and predicted before the measured ones (workers start, models build).
        trigger_s: micro-batch interval in s; 0: the next micro-batch starts as soon as the last one ended.
        restart_after: stop the producer and the query after this many measured images, then start both again
            (the query from its checkpoint, the producer where the folder says it stopped); None: no restart.
        timeout_s: the most seconds the stream may take beyond its production time to predict everything.
        watch: called with (images produced, images predicted, images in all, warm-up included) at each poll of the
            wait (the live lines of :mod:`hwregress.plugin.progress`); None: nobody watches. A field, not an
            argument of :func:`run_stream`, so that the call, and every stand-in for it, stays ``(session, spec)``.
    """

    predict: PredictSpec
    batch_size: int
    images: int
    rate: float
    folder: Path
    warmup_images: int = 16
    trigger_s: float = 0.0
    restart_after: int | None = None
    timeout_s: float = 120.0
    watch: Callable[[int, int, int], None] | None = field(default=None, compare=False, repr=False)


@dataclass
class StreamResult:
    """Figures of one streaming measurement (rates in images/s, latencies in ms)."""

    produced: int
    predicted: int
    lost: list[int]
    duplicated: list[int]
    unexpected: list[int]
    offered_rate: float  # what the producer achieved (images / production time)
    sustained_rate: float
    # images/s of each measured micro-batch but the first and the last (the stream filling up and draining): its
    # rows / the time since the micro-batch before it ended
    output_rates: list[float]
    process_rates: list[float]  # Spark's processedRowsPerSecond of each measured micro-batch
    latencies_ms: list[float]  # the measured images' latencies, sorted
    micro_batches: int
    restarts: int
    warmup_s: float
    batch_rows: list[int] = field(default_factory=list)  # rows of each measured micro-batch

    @property
    def exactly_once(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected)

    def latency_percentiles(self) -> dict[str, float | None]:
        """p50, p90 and p99 of the latencies (ms); None without any."""
        if not self.latencies_ms:
            return {"p50": None, "p90": None, "p99": None}
        values = np.percentile(self.latencies_ms, [50, 90, 99])
        return {"p50": float(values[0]), "p90": float(values[1]), "p99": float(values[2])}

    def latency_quantiles(self, points: int = LATENCY_POINTS) -> list[float]:
        """At most ``points`` evenly spaced quantiles of the latencies (ms), for a distribution chart."""
        if len(self.latencies_ms) <= points:
            return list(self.latencies_ms)
        return [float(v) for v in np.quantile(self.latencies_ms, np.linspace(0, 1, points))]


class Producer:
    """Writes images ``start..stop-1`` into ``folder`` at ``rate`` per second on a thread, each atomically
    (hidden file, then rename); ``written`` maps id -> Unix time of its rename. ``halt_at``: stop, mid-stream, once
    ``written`` holds that many images (a stopped producer)."""

    def __init__(self, folder: Path, start: int, stop: int, rate: float, written: dict[int, float],
                 halt_at: int | None = None) -> None:
        self.folder, self.start_id, self.stop_id, self.rate = folder, start, stop, rate
        self.written, self.halt_at = written, halt_at
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hwregress-spark-producer", daemon=True)

    def start(self) -> Producer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the image being written (if any) and wait for the thread."""
        self._halt.set()
        self._thread.join()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def wait(self, seconds: float) -> None:
        """Wait until the thread ends, at most ``seconds``; a thread already ended waits the whole ``seconds`` (a loop
        that goes on polling something else once the producer is done still waits between its polls)."""
        if self._thread.is_alive():
            self._thread.join(seconds)
        else:
            time.sleep(seconds)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        began = time.perf_counter()
        try:
            for offset, row in enumerate(digit_rows(self.stop_id)[self.start_id:]):
                delay = began + offset / self.rate - time.perf_counter()
                if self._halt.wait(max(0.0, delay)):
                    return
                self.written[row[0]] = write_image(self.folder, row)
                if self.halt_at is not None and len(self.written) >= self.halt_at:
                    return
        except BaseException as error:  # the caller reports it: a producer that dies silently would look like loss
            self.error = error


def write_image(folder: Path, row: tuple[int, int, list[float], Any]) -> float:
    """Write one image row as a one-line JSON file, atomically; returns the Unix time it became visible."""
    identifier, label, pixels, _ = row
    final = folder / f"{FILE_PREFIX}{identifier:09d}.json"
    hidden = folder / f".{final.name}.tmp"
    hidden.write_text(json.dumps({"id": identifier, "label": label, "pixels": pixels}) + "\n", encoding="utf-8")
    os.replace(hidden, final)
    return time.time()


def resume_point(folder: Path) -> int:
    """The next id to write: one past the highest visible image (a hidden file left by a stopped producer is
    rewritten)."""
    ids = [int(p.name[len(FILE_PREFIX):-5]) for p in folder.glob(f"{FILE_PREFIX}*.json")]
    return max(ids) + 1 if ids else 0


class _Progress:
    """Collects every micro-batch's progress (not limited to the last 100 Spark keeps): :func:`_listener` feeds it."""

    def __init__(self) -> None:
        self.batches: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def add(self, progress: Any) -> None:
        with self._lock:
            self.batches.append({"batch_id": progress.batchId, "rows": progress.numInputRows,
                                 "process_rate": progress.processedRowsPerSecond, "run_id": str(progress.runId),
                                 "ended_at": _ended_at(progress.timestamp, progress.durationMs)})

    def rows(self) -> int:
        with self._lock:
            return sum(b["rows"] for b in self.batches)

    def since(self, count: int) -> list[dict[str, Any]]:
        """The micro-batches with rows after the first ``count`` (the warm-up), each with its ``output_rate``: its
        rows over the time since the micro-batch before it ended (images/s)."""
        with self._lock:
            batches = [b for b in self.batches if b["rows"]]
            measured = [dict(b) for b in self.batches[count:] if b["rows"]]
        for batch in measured:
            earlier = [b["ended_at"] for b in batches if b["ended_at"] < batch["ended_at"]]
            batch["output_rate"] = batch["rows"] / (batch["ended_at"] - max(earlier)) if earlier else None
        return measured


def _ended_at(timestamp: str, durations: dict[str, int]) -> float:
    """Unix time a micro-batch ended: its trigger's start (ISO 8601, UTC) plus ``triggerExecution`` (ms)."""
    started = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return started.timestamp() + durations.get("triggerExecution", 0) / 1000.0


def _listener(progress: _Progress) -> Any:
    """A ``StreamingQueryListener`` that adds each micro-batch's progress event to ``progress``."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress.add(event.progress)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return Listener()


def run_stream(session: Any, spec: StreamSpec) -> StreamResult:
    """Run ``spec``'s stream on ``session`` and count it at both ends; ``spec.watch``, if set, is called at each poll
    of the wait.

    Raises:
        StreamFailed: the query failed (Spark's error), the producer failed, or the stream had not predicted every
            image ``timeout_s`` after the last one was written.
    """
    folders = {name: spec.folder / name for name in ("in", "out", "checkpoint")}
    for path in folders.values():
        path.mkdir(parents=True, exist_ok=True)
    written: dict[int, float] = {}
    progress = _Progress()
    total = spec.warmup_images + spec.images
    watch = spec.watch
    tick = (lambda: watch(len(written), progress.rows(), total)) if watch is not None else None
    listener = _listener(progress)
    session.streams.addListener(listener)
    try:
        query = _start_query(session, spec, folders)
        started = time.perf_counter()
        _produce(spec, folders["in"], 0, spec.warmup_images, written, query, progress, wait_for_rows=spec.warmup_images,
                 tick=tick)
        warmup_s, warm_batches = time.perf_counter() - started, len(progress.batches)
        halt_at = None if spec.restart_after is None else spec.warmup_images + spec.restart_after
        produced_from = time.time()
        _produce(spec, folders["in"], spec.warmup_images, total, written, query, progress, halt_at=halt_at, tick=tick)
        restarts = 0
        if halt_at is not None:  # producer stopped mid-stream: stop the query too, then resume both
            query.stop()
            restarts = 1
            query = _start_query(session, spec, folders)
            _produce(spec, folders["in"], resume_point(folders["in"]), total, written, query, progress, tick=tick)
        produced_until = time.time()
        _drain(query, progress, total, spec.timeout_s, lambda: _sink_ids(session, folders["out"]), tick=tick)
        query.stop()
    finally:
        session.streams.removeListener(listener)
        for active in session.streams.active:  # a failed run leaves no query behind
            if active.name == _query_name(spec):
                active.stop()
    return _count(session, folders["out"], written, spec, progress.since(warm_batches), warmup_s, restarts,
                  produced_until - produced_from)


def _start_query(session: Any, spec: StreamSpec, folders: dict[str, Path]) -> Any:
    from pyspark.sql import functions

    udf = predict_udf(spec.predict, spec.batch_size)
    source = session.readStream.schema(row_schema()).json(str(folders["in"]))
    predicted = source.select("id", udf("pixels").alias("p")).select(
        "id", functions.col("p.prediction").alias("prediction"), functions.col("p.predicted_at").alias("predicted_at"))
    writer = (predicted.writeStream.format("parquet").option("path", str(folders["out"]))
              .option("checkpointLocation", str(folders["checkpoint"])).queryName(_query_name(spec)))
    if spec.trigger_s > 0:
        writer = writer.trigger(processingTime=f"{int(spec.trigger_s * 1000)} milliseconds")
    return writer.start()


def _query_name(spec: StreamSpec) -> str:
    return f"hwregress-{spec.folder.name}"


def _produce(spec: StreamSpec, folder: Path, start: int, stop: int, written: dict[int, float], query: Any,
             progress: _Progress, wait_for_rows: int | None = None, halt_at: int | None = None,
             tick: Callable[[], None] | None = None) -> None:
    """Write images ``start..stop-1`` at the spec's rate while watching the query every :data:`QUERY_POLL_S`.
    ``wait_for_rows``: also wait until the query has read that many rows (the warm-up); ``halt_at``: stop the
    producer, mid-stream, once that many images have been written in all; ``tick``: called at each poll (live
    progress)."""
    producer = Producer(folder, start, stop, spec.rate, written, halt_at).start()
    deadline = time.monotonic() + (stop - start) / spec.rate + spec.timeout_s
    while producer.running or (wait_for_rows is not None and progress.rows() < wait_for_rows):
        _check(query, producer)
        if tick is not None:
            tick()
        if time.monotonic() > deadline:
            producer.stop()
            raise StreamFailed(f"the stream read {progress.rows()} of {wait_for_rows or stop} images within "
                               f"{spec.timeout_s:.0f} s of their writing (warm-up: workers start, models build)")
        producer.wait(QUERY_POLL_S)
    _check(query, producer)


def _drain(query: Any, progress: _Progress, total: int, timeout_s: float, sink_ids: Callable[[], int],
           sink_every_s: float = 2.0, tick: Callable[[], None] | None = None) -> None:
    """Wait until the query has read every image written (or fail after ``timeout_s``); ``tick``: called at each poll
    (live progress).

    The listener's row count is the quick signal, but a query stopped between its sink commit and its progress event
    (a restart) never reports that micro-batch, so while it falls short the sink itself (``sink_ids``: distinct ids
    committed) is read every ``sink_every_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    next_sink_read = time.monotonic() + sink_every_s
    while progress.rows() < total:
        _check(query, None)
        if tick is not None:
            tick()
        if time.monotonic() >= next_sink_read:
            if sink_ids() >= total:
                break
            next_sink_read = time.monotonic() + sink_every_s
        if time.monotonic() > deadline:
            raise StreamFailed(f"the stream fell behind: {progress.rows()} of {total} images read {timeout_s:.0f} s "
                               f"after the last was written ({sink_ids()} in the sink)")
        time.sleep(QUERY_POLL_S)
    query.processAllAvailable()


def _sink_ids(session: Any, out: Path) -> int:
    """Distinct image ids the file sink has committed (read through its ``_spark_metadata`` log)."""
    return session.read.parquet(str(out)).select("id").distinct().count()


def _check(query: Any, producer: Producer | None) -> None:
    # isActive first: Spark's query thread records its error before it marks the query terminated, so an inactive
    # query's error is already there; read the other way round, a failure between the two reads looked like a stop
    active = query.isActive
    error = query.exception()
    if error is not None:
        raise StreamFailed(f"the streaming query failed: {str(error).strip()[:2000]}") from error
    if not active:
        raise StreamFailed("the streaming query stopped by itself")
    if producer is not None and producer.error is not None:
        raise StreamFailed(f"the producer failed: {type(producer.error).__name__}: {producer.error}")


def steady_rates(rates: list[float | None]) -> list[float]:
    """The micro-batch rates of the steady stream: without the first and the last micro-batch (where the stream
    fills up and drains, a partial interval), when at least three remain; rates that could not be computed dropped."""
    known = [rate for rate in rates if rate]
    return known[1:-1] if len(known) >= 5 else known


def _count(session: Any, out: Path, written: dict[int, float], spec: StreamSpec, batches: list[dict[str, Any]],
           warmup_s: float, restarts: int, production_s: float) -> StreamResult:
    """Read the sink back through its commit log and count produced vs predicted ids."""
    rows = session.read.parquet(str(out)).select("id", "predicted_at").collect()
    counts: dict[int, int] = {}
    predicted_at: dict[int, float] = {}
    for row in rows:
        counts[row["id"]] = counts.get(row["id"], 0) + 1
        predicted_at[row["id"]] = row["predicted_at"]
    measured = [i for i in sorted(written) if i >= spec.warmup_images and i in predicted_at]
    latencies = sorted((predicted_at[i] - written[i]) * 1000.0 for i in measured)
    span = max(predicted_at[i] for i in measured) - min(written[i] for i in measured) if measured else 0.0
    return StreamResult(
        produced=len(written), predicted=len(counts),
        lost=sorted(set(written) - set(counts)), duplicated=sorted(i for i, n in counts.items() if n > 1),
        unexpected=sorted(set(counts) - set(written)),
        offered_rate=(len(written) - spec.warmup_images) / production_s if production_s > 0 else 0.0,
        sustained_rate=len(measured) / span if span > 0 else 0.0,
        output_rates=steady_rates([b["output_rate"] for b in batches]),
        process_rates=[b["process_rate"] for b in batches], latencies_ms=latencies, micro_batches=len(batches),
        restarts=restarts, warmup_s=warmup_s, batch_rows=[b["rows"] for b in batches])

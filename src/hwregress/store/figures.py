"""Family-specific figures of a :class:`hwregress.store.results.TestRecord`, as typed sub-records: data-parallel
scaling, the all-reduce sweep, co-located processes, Spark, LLM prefill/decode, compilation and the looks at a timed
window; and what each judged figure's verdict could catch (its minimum detectable slowdown).

Each field carries its description (unit first) in ``metadata["doc"]``: the JSON Schema of ``results.json`` takes
its descriptions from there (:mod:`hwregress.store.schemas.generate`). Every field has a default, so a record of
another version (fields missing, fields added) still builds; :meth:`Figures.from_json` ignores unknown keys.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union

F = TypeVar("F", bound="Figures")


def doc(text: str, default: Any = None, factory: Any = None, **schema: Any) -> Any:
    """A dataclass field whose JSON Schema description is ``text``; ``factory`` for a mutable default; ``schema``
    adds keywords to the field's generated schema (e.g. ``enum=[...]``)."""
    metadata = {"doc": text, "schema": schema}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


class Figures:
    """What the sub-records share: building one from JSON and updating it by name."""

    @classmethod
    def from_json(cls: type[F], data: Mapping[str, Any]) -> F:
        """A sub-record from its JSON object, as a file is read: keys this version does not know are ignored (a
        newer writer's), nested sub-records (and lists of them) are built too. Type checking is
        :func:`hwregress.store.results.record_problem`'s."""
        return cls._from_mapping(data, strict=False)

    @classmethod
    def of(cls: type[F], data: Mapping[str, Any]) -> F:
        """A sub-record from the figures a measurement produced, nested ones included.

        Raises:
            TypeError: a key that is not a field of the sub-record (or of a nested one): a figure the writer
                produces would otherwise be dropped without a word.
        """
        return cls._from_mapping(data, strict=True)

    @classmethod
    def _from_mapping(cls: type[F], data: Mapping[str, Any], strict: bool) -> F:
        hints = _type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(data) - set(names))
        if strict and unknown:
            raise TypeError(_unknown_fields(cls, unknown))
        return cls(**{name: _build(data[name], hints[name], strict) for name in names if name in data})

    def update(self, **values: Any) -> None:
        """Set the named fields.

        Raises:
            TypeError: a name that is not a field of this sub-record (a writer's typo would otherwise be lost).
        """
        known = {f.name for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(_unknown_fields(type(self), unknown))
        for name, value in values.items():
            setattr(self, name, value)


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, once per class: it evaluates every annotation's string anew on each call, and a
    judge builds a sub-record per judged figure."""
    return typing.get_type_hints(cls)


def _unknown_fields(cls: type, names: list[str]) -> str:
    return (f"{cls.__name__} has no field(s) {', '.join(names)}; add them to hwregress/store/figures.py (and "
            "regenerate the results schema: python -m hwregress.store.schemas.generate)")


def _build(value: Any, hint: Any, strict: bool) -> Any:
    """``value`` with JSON objects turned into the sub-record ``hint`` names (also inside ``X | None`` and lists)."""
    for candidate in _options(hint):
        if isinstance(candidate, type) and issubclass(candidate, Figures) and isinstance(value, Mapping):
            return candidate._from_mapping(value, strict)
        if typing.get_origin(candidate) is list and isinstance(value, list):
            return [_build(item, typing.get_args(candidate)[0], strict) for item in value]
    return value


def _options(hint: Any) -> tuple[Any, ...]:
    return typing.get_args(hint) if typing.get_origin(hint) in (Union, _UNION_TYPE) else (hint,)


_UNION_TYPE = type(int | None)


# --- data-parallel scaling, all-reduce, co-location (hwregress.scaleout.figures, plugin/families/jobs.py) --------

@dataclass
class RankFigures(Figures):
    """One rank of a data-parallel scaling job."""

    rank: int | None = doc("global rank")
    node_rank: int | None = doc("node the rank ran on (0 = the node that records)")
    host: str | None = doc("host name of the rank")
    device: str | None = doc("device of the rank, e.g. cuda:1 or cpu")
    median_step_ms: float | None = doc("ms, the rank's median training step")
    peak_memory_bytes: int | None = doc("bytes, the rank's peak device memory (CUDA allocator) or RSS (CPU)")
    comm_share: float | None = doc("fraction of the rank's step spent in communication (0..1)")


@dataclass
class ScalingFigures(Figures):
    """A data-parallel (DDP) training job at one world size; the record's throughput is the global median over all
    ranks and its efficiency T(W) / (W x T(1))."""

    world_size: int | None = doc("ranks in the job (W)")
    nodes: int | None = doc("nodes the job ran on")
    ranks_per_node: int | None = doc("ranks on each node")
    backend: str | None = doc("torch.distributed backend, e.g. nccl or gloo")
    threads_per_rank: int | None = doc("CPU threads each rank was given (OMP_NUM_THREADS)")
    comm_share: float | None = doc("fraction of a step spent in communication, mean over ranks (0..1)")
    comm_ms_per_step: float | None = doc("ms of communication per step, mean over ranks")
    step_ms: float | None = doc("ms, median training step over every rank's rounds (the record's latency_ms)")
    buckets: int | None = doc("DDP gradient buckets all-reduced per step")
    allreduce_bytes_per_step: int | None = doc("bytes all-reduced per step (sum of the bucket sizes)")
    ranks: list[RankFigures] = doc("one entry per rank", factory=list)
    efficiency: float | None = doc("fraction, T(W) / (W x T(1)) with T(1) from the same session (1 = perfect)")
    reference_throughput: float | None = doc("T(1): one rank's median throughput in this session, in the unit")
    per_device_throughput: float | None = doc("global throughput / world size, in the unit")


@dataclass
class AllreducePoint(Figures):
    """One message size of the all-reduce sweep. GB/s = 1e9 bytes/s; busbw = algbw x 2(W-1)/W (nccl-tests,
    doc/PERFORMANCE.md)."""

    bytes: int | None = doc("bytes, message size")
    time_us: float | None = doc("us, median time of one all-reduce")
    algbw_gbps: float | None = doc("GB/s, algorithm bandwidth: bytes / time")
    busbw_gbps: float | None = doc("GB/s, bus bandwidth: algbw x 2(W-1)/W")
    iterations: int | None = doc("all-reduces timed per round")


@dataclass
class AllreduceFigures(Figures):
    """The all-reduce bus-bandwidth ceiling (``family="ceiling", model="allreduce"``); the record's samples are the
    largest message's bus bandwidth per round (GB/s)."""

    world_size: int | None = doc("ranks taking part")
    nodes: int | None = doc("nodes taking part")
    backend: str | None = doc("torch.distributed backend, e.g. nccl or gloo")
    curve: list[AllreducePoint] = doc("one point per message size, smallest first", factory=list)


@dataclass
class ColocatedMember(Figures):
    """One process of a co-location test."""

    index: int | None = doc("the process's index in the group")
    model: str | None = doc("model the process trained")
    solo_throughput: float | None = doc("median throughput alone on the device, in unit")
    colocated_throughput: float | None = doc("median throughput beside the others, in unit")
    interference: float | None = doc("fraction, co-located / solo throughput (1 = unaffected)")
    peak_memory_bytes: int | None = doc("bytes, peak memory beside the others")
    solo_peak_memory_bytes: int | None = doc("bytes, peak memory alone")
    unit: str | None = doc("unit of the throughputs, e.g. samples/s")


@dataclass
class ColocatedFigures(Figures):
    """Training processes sharing one device; the record's efficiency is the mean interference."""

    processes: int | None = doc("processes run together")
    mps_active: bool | None = doc("whether CUDA MPS served the processes (null: unknown)")
    mps_detail: str | None = doc("how MPS was found active or not")
    threads_per_process: int | None = doc("CPU threads each process was given")
    members: list[ColocatedMember] = doc("one entry per process, in member order", factory=list)


# --- Spark (hwregress.spark, plugin/families/spark.py) ----------------------------------------------------------

@dataclass
class SparkFigures(Figures):
    """A Spark batch-inference or Structured Streaming test: the engine it ran on
    (:func:`hwregress.spark.engine.describe`) and the pipeline's figures. Batch: the record's samples are images/s
    per full pass, its efficiency the Spark over plain torch throughput ratio. Stream: its samples are images/s per
    micro-batch, its latency_ms the p50 per image."""

    spark_version: str | None = doc("Spark version of the session")
    master: str | None = doc("Spark master URL, e.g. local[2]")
    app_id: str | None = doc("Spark application id")
    default_parallelism: int | None = doc("partitions a data set gets (task slots)")
    task_cpus: int | None = doc("spark.task.cpus")
    executor_memory: str | None = doc("spark.executor.memory as configured")
    gpu_per_executor: str | None = doc("spark.executor.resource.gpu.amount as configured")
    gpu_per_task: str | None = doc("spark.task.resource.gpu.amount as configured")
    executors: list[dict[str, Any]] = doc("one object per executor: id, host, cores, memory_bytes (bytes), resources",
                                          factory=list)
    total_cores: int | None = doc("cores of all executors")
    layout: str | None = doc("the executors in words, e.g. '1 executor x 2 cores, 1 CPU per task'")
    startup_s: float | None = doc("s, time to start this process's Spark session")
    batch_size: int | None = doc("images per model call")
    pipeline: str | None = doc("batch or stream (null: the test failed before measuring)")
    # batch
    rows: int | None = doc("batch: images in the cached data set")
    partitions: int | None = doc("batch: partitions of the data set")
    first_pass_s: float | None = doc("s, batch: the untimed first pass (caching, worker start)")
    passes: int | None = doc("batch: timed full passes")
    torch_throughput: float | None = doc("images/s, batch: median of plain torch on the same model, batch and device")
    torch_samples: list[float | None] = doc("images/s, batch: plain torch per pass (null: not finite)", factory=list)
    overhead_ratio: float | None = doc("fraction, batch: Spark / plain torch images/s (the record's efficiency)")
    agreement: float | None = doc("fraction, batch: top-1 agreement with plain torch (must be 1)")
    max_logit_difference: float | None = doc("batch: largest top-1 logit difference from plain torch (logit units)")
    logit_tolerance: float | None = doc("batch: relative tolerance of that difference for the dtype")
    disagreements: list[dict[str, Any]] = doc("batch: the first images whose top-1 differs (id, spark, torch)",
                                              factory=list)
    distinct_classes: int | None = doc("batch: distinct top-1 classes predicted")
    # stream
    rate: float | None = doc("images/s, stream: rate asked of the producer")
    images: int | None = doc("stream: images written, warmup included")
    warmup_images: int | None = doc("stream: images of the untimed warmup")
    produced: int | None = doc("stream: images written to the watched folder")
    predicted: int | None = doc("stream: predictions in the sink")
    lost: int | None = doc("stream: images written and never predicted")
    duplicated: int | None = doc("stream: images predicted more than once")
    unexpected: int | None = doc("stream: predictions of images never written")
    exactly_once: bool | None = doc("stream: every image predicted exactly once")
    offered_rate: float | None = doc("images/s, stream: what the producer achieved")
    sustained_rate: float | None = doc("images/s, stream: predictions over the measured span")
    latency_ms: dict[str, float | None] = doc("ms, stream: latency per image at p50, p90, p99", factory=dict)
    latency_quantiles_ms: list[float | None] = doc("ms, stream: latency at evenly spaced levels 0..1 (the CDF; null: "
                                                   "not finite)", factory=list)
    micro_batches: int | None = doc("stream: measured micro-batches")
    batch_rows: list[int] = doc("stream: rows of each measured micro-batch", factory=list)
    process_rates: list[float | None] = doc("rows/s, stream: Spark's processedRowsPerSecond per micro-batch",
                                            factory=list)
    process_rate: float | None = doc("rows/s, stream: median of process_rates")
    restarts: int | None = doc("stream: query restarts during the run")
    warmup_s: float | None = doc("s, stream: the warmup's duration")
    sink: str | None = doc("stream: sink format, e.g. parquet")
    checkpoint: bool | None = doc("stream: whether the query kept a checkpoint")


# --- LLM prefill/decode (hwregress.measure.llm.window) ----------------------------------------------------------

@dataclass
class LlmFigures(Figures):
    """Prefill and decode windows of a causal LM; the record's samples are prompt tokens/s per pass (prefill) or the
    decode steps' tokens/s per round (decode)."""

    context: int | None = doc("prompt tokens per sequence")
    new_tokens: int | None = doc("tokens generated per sequence, the first (from the prompt pass) included; null "
                                 "for prefill")
    prefill_ms: float | None = doc("prefill: median prompt pass, ms")
    ttft_ms: float | None = doc("decode: median time to first token (prompt pass and its argmax), ms")
    itl_p50_ms: float | None = doc("decode: inter-token latency p50 over every decode step of every round, ms (the "
                                   "record's judged latency_ms)")
    itl_p90_ms: float | None = doc("decode: inter-token latency p90, ms")
    itl_p99_ms: float | None = doc("decode: inter-token latency p99, ms")
    tpot_ms: float | None = doc("decode: median time per output token per request, (e2e - TTFT) / (new_tokens - 1), "
                                "ms (vLLM's and MLPerf's TPOT)")
    output_tokens_per_s: float | None = doc("decode: median output tokens/s end to end, TTFT included (reported, not "
                                            "judged)")
    decode_tokens_per_s: float | None = doc("decode: median tokens/s of the decode steps alone (the judged "
                                            "throughput's median)")
    prefill_tokens_per_s: float | None = doc("decode: median prompt tokens/s of its prompt passes")
    kv_cache_dtype: str | None = doc("decode: dtype of the KV cache's keys, e.g. bfloat16 (the mode's dtype for "
                                     "bf16/fp16)")


# --- the planned looks at a timed window (hwregress.measure.timing, hwregress.judge.looks) --------------------------

@dataclass
class LookFigures(Figures):
    """The planned looks at a window judged against a baseline, and those taken: the window stopped at the first look
    that decided, or ran to its last (the verdict is judged with the level of the last look taken: the record's
    ``alpha``)."""

    planned: list[int] = doc("cumulative timed rounds at each planned look", factory=list)
    rounds: list[int] = doc("timed rounds at each look taken (the last may hold fewer than planned where the time "
                            "budget ended the window first)", factory=list)
    decision: str | None = doc("what the last look taken decided: regression, pass, new (nothing to judge against), "
                               "or null (undecided: the verdict is unstable unless the window's rounds show a "
                               "regression or an improvement)")


# --- compilation (hwregress.measure.compilation, judge/compile_time.py compare_compile) ---------------------------

@dataclass
class CompileComparison(Figures):
    """The compile time against the baseline's (shown, not judged): compared only in the same cache state."""

    compared: bool | None = doc("whether the two compile times were compared")
    cache: str | None = doc("this session's cache state: cold or warm")
    baseline_cache: str | None = doc("the baseline's cache state (when not compared)")
    baseline_compile_s: float | None = doc("s, the baseline's compile time (when compared)")
    ratio: float | None = doc("compile_s / baseline_compile_s (above 1 is slower; when compared)")
    reason: str | None = doc("why the times were not compared")


@dataclass
class CompileFigures(Figures):
    """A compiled model's first call, timed apart from the window, or the compile failure."""

    compile_s: float | None = doc("s, the compiling first call (outside the timed window)")
    setup_s: float | None = doc("s, the process's one-time compiler set-up this test paid, untimed")
    backend: str | None = doc("compiler backend, e.g. inductor")
    frames_compiled: int | None = doc("frames compiled during the first call")
    cache: str | None = doc("cache state of the compile: cold (fresh caches) or warm")
    cache_counts: dict[str, int] = doc("FX graph and AOTAutograd cache hits and misses during the warmup, by "
                                       "counter name", factory=dict)
    error: list[str] | None = doc("the first lines of the compile error, when compiling failed")
    vs_baseline: CompileComparison | None = doc("the compile time against the baseline's")


# --- what a verdict could catch (hwregress.judge.reach, judge/compare.py) ---------------------------------------

@dataclass
class ReachFigures(Figures):
    """What one judged figure's verdict could catch: its minimum detectable slowdown (MDS), the smallest change the
    verdict calls a regression with probability ``power``, from the two-level noise model of
    :mod:`hwregress.judge.reach` (docs/verdicts.md, 'What a pass guarantees: the minimum detectable slowdown')."""

    figure: str | None = doc("the judged figure: throughput (ratio and Mann-Whitney test), latency, efficiency or "
                             "speedup (threshold rules)")
    mds: float | None = doc("fraction of the baseline's figure, the smallest change caught with probability power: "
                            "lost for throughput, efficiency, speedup (0.12: 12% lower), added for latency (0.12: "
                            "12% longer); null: no number (why_none)")
    power: float | None = doc("the probability the MDS is caught with (0.9)")
    alpha: float | None = doc("significance level of the test (throughput); null for a threshold rule")
    threshold: float | None = doc("fraction, the verdict's threshold the MDS was computed at (the MDS is not below "
                                  "it)")
    within: float | None = doc("relative spread of this window's rounds (MAD x 1.4826 / median): the part more rounds "
                               "lower")
    reference_within: float | None = doc("relative spread of the same-session reference's rounds the figure divides "
                                         "by (efficiency, speedup), else null")
    between: float | None = doc("relative spread of the baseline's recorded sessions since their last level shift "
                                "(MAD x 1.4826 / median; 0: fewer than 3 sessions, not known): more rounds do not "
                                "lower it")
    sessions: int | None = doc("baseline sessions the between spread and the baseline's level come from")
    rounds: list[int] = doc("[rounds now, the other side's count]: the baseline's samples (throughput), the "
                            "same-session reference's rounds (efficiency, speedup), 0 (latency)", factory=list)
    why_none: str | None = doc("why there is no MDS (a window too short for the test ever to reach alpha, fewer than "
                               "2 rounds, nothing up to 99% caught), else null")


@dataclass
class DeclaredFigures(Figures):
    """One figure of a metric a project declares (:func:`hwregress.store.metrics.register`): its value, what it was
    judged against and what its verdict could catch. It carries its unit, direction and label, so that every reader
    of a results file (the report, a fleet store, ``hwregress report`` without the project's code) shows it alike."""

    metric: str | None = doc("the metric's name, e.g. ttft_p99_ms")
    value: float | None = doc("this session's value, in unit")
    unit: str | None = doc("the value's unit, e.g. ms")
    direction: str | None = doc("which way is better: higher or lower", enum=["higher", "lower", None])
    label: str | None = doc("how the report names it, e.g. TTFT p99")
    baseline: float | None = doc("the baseline entry's value (the median of its recorded sessions), in unit; null: "
                                 "not judged")
    threshold: float | None = doc("fraction, the change the verdict tolerates (the throughput's threshold widened by "
                                  "the metric's drift between sessions); null: not judged")
    reach: ReachFigures | None = doc("what its verdict could catch (null: not judged)")


# --- reading files of schema version 1 and 2 ---------------------------------------------------------------------

WINDOW_SUB_RECORDS = ("looks",)
"""The sub-record fields the timed window fills, whatever the family (:func:`hwregress.measure.record.window_figures`,
a job's ranks through :func:`hwregress.plugin.families.jobs.rank_figures`); declared by no family either."""

LEGACY_COMPILE_KEYS = {"compile_s": "compile_s", "compile_setup_s": "setup_s", "compile_backend": "backend",
                       "frames_compiled": "frames_compiled", "compile_cache": "cache",
                       "compile_cache_counts": "cache_counts", "compile_error": "error",
                       "compile_vs_baseline": "vs_baseline"}
"""Schema version <= 2 kept the compile figures flat in ``details``: their old name to the CompileFigures field."""


def migrate_legacy_details(item: dict[str, Any]) -> dict[str, Any]:
    """Move the family figures a record JSON of schema version <= 2 keeps in ``details`` (``details["scaling"]``,
    ``["allreduce"]``, ``["colocated"]``, ``["spark"]``, ``["llm"]`` and the flat ``compile_*`` keys) to the
    sub-record keys of version 3, in place; returns ``item``. A sub-record already present (not null) wins; a record
    without such details is left as it is (so this may run on any record)."""
    details = item.get("details")
    if not isinstance(details, dict):
        return item
    for name in ("scaling", "allreduce", "colocated", "spark", "llm"):
        if isinstance(details.get(name), dict):
            moved = details.pop(name)
            item[name] = moved if item.get(name) is None else item[name]
    compile_figures = {new: details.pop(old) for old, new in LEGACY_COMPILE_KEYS.items() if old in details}
    if compile_figures and item.get("compile") is None:
        item["compile"] = compile_figures
    return item

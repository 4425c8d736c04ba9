"""Plain records of one measured test and of one session; JSON in and out; merging across machines.

Units: throughput in ``unit`` (samples/s for models, TFLOP/s or GB/s for ceilings), latency in ms,
memory in bytes, energy in J, power in W, accuracy as a fraction. ``samples`` always means the per-round
throughput observations of the timed window.

The contract of ``results.json`` is the JSON Schema ``hwregress/store/schemas/results.schema.json``.

Format history (``schema_version``), in the manner of pyperf's:

- **9** (hwregress 0.9): a served model under load (:mod:`hwregress.serving`) keeps its figures in ``serving``, a
  :class:`hwregress.store.serving_figures.ServingFigures` (the server, the trace and its digest, the SLOs, each
  window's figures, the pooled latency percentiles). Versions 1 to 8 read with none.
- **8** (hwregress 0.8): the figures of metrics a project declares (:func:`hwregress.store.metrics.register`) travel
  with the record as ``declared``, a list of :class:`hwregress.store.figures.DeclaredFigures` (the metric's name,
  value, unit, direction, label, and where judged its baseline, threshold and reach). Versions 1 to 7 read with none.
- **7** (hwregress 0.7): the report view that shows a record beyond the generic tables travels with it, as its family
  declares it, so that the report tells no family by its name: ``view`` (``models``, ``parity``, ``ceilings``,
  ``scaling``, ``colocation``, ``spark``, or null: none). A record without it (versions 1 to 6, a journal line of an
  older hwregress) reads its family's view of then (:func:`hwregress.store.legacy_records.derive_legacy_traits`).
- **6** (hwregress 0.6): what the judge needs to know of a record's family travels with the record, so that every
  reader judges it alike and nothing below the plugin tests a family's name: ``measures_roof`` (its throughput is a
  device roof named by ``model``) and ``latency_judged`` (its ``latency_ms`` is a judged figure), both booleans, set
  from what its family declares (:class:`hwregress.plugin.families.protocol.FamilyTraits`). A record without them
  (versions 1 to 5, a journal line of an older hwregress) reads them from its family and mode as those versions judged
  them (:func:`hwregress.store.legacy_records.derive_legacy_traits`).
- **5** (hwregress 0.5): what each judged figure's verdict could catch, as typed sub-records
  (:class:`hwregress.store.figures.ReachFigures`: the minimum detectable slowdown at 90% power, alpha, the within- and
  between-session spreads, the rounds, or why there is no number): ``reach`` (the throughput's: ratio and
  Mann-Whitney test), ``latency_reach``, ``efficiency_reach`` and ``speedup_reach`` (threshold rules), each an object
  or null (null: that figure was not judged). A window judged against a baseline is looked at at planned round
  counts; the record keeps them (``looks``: :class:`hwregress.store.figures.LookFigures`, the planned looks, those
  taken and the last one's decision; null where no baseline steered the window) and the significance level its
  throughput verdict was judged at (``alpha``: the level of the last look taken, or the plain alpha without looks;
  null where not judged). Files of versions 1 to 4 read with all of these null.

- **4** (hwregress 0.4): the hardware a record was measured on and the inputs its verdict was judged with are typed
  fields: ``identity``, ``device_facts``, ``stable`` and ``reference_samples`` instead of ``details["identity"]``,
  ``details["device_facts"]``, ``details["stable"]`` and ``details["cpu_samples"]`` /
  ``details["efficiency_reference_samples"]``. Records of versions 1 to 3 (results files and journals alike) are read
  with those details moved (:func:`hwregress.store.legacy_records.type_legacy_details`).
- **3** (hwregress 0.3): family figures in typed sub-records (:mod:`hwregress.store.figures`): ``scaling``,
  ``allreduce``, ``colocated``, ``spark``, ``llm`` and ``compile`` (each an object or null) instead of
  ``details["scaling"]`` ... ``details["llm"]`` and the flat ``details["compile_*"]`` keys; the JSON Schema is
  generated from the types (:mod:`hwregress.store.schemas.generate`). Versions 1 and 2 are read with those details
  moved into the sub-records (:func:`hwregress.store.figures.migrate_legacy_details`).
- **2** (hwregress 0.2): ``verdict`` is one of :class:`hwregress.store.verdicts.Verdict` (adds ``invalid`` and
  ``other-hardware``); new record fields ``wanted_threshold``, ``identity_changes``, ``health`` and
  ``diagnosis``; the telemetry summary counts its ``readings`` (was ``samples``, which now only means
  per-round throughput observations).
- **1** (hwregress 0.1): the first format. Read by this version: its telemetry ``samples`` count becomes
  ``readings``.

A file of any other version is refused with its name and the version found.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwregress.store.ab_figures import ABFigures
from hwregress.store.field_types import type_problem
from hwregress.store.figures import (
    AllreduceFigures,
    ColocatedFigures,
    CompileFigures,
    DeclaredFigures,
    LlmFigures,
    LookFigures,
    ReachFigures,
    ScalingFigures,
    SparkFigures,
    doc,
    migrate_legacy_details,
)
from hwregress.store.legacy_records import LEGACY_VIEWS, derive_legacy_traits, type_legacy_details
from hwregress.store.metrics import REACH_FIELDS
from hwregress.store.serving_figures import ServingFigures
from hwregress.store.sub_records import LIST_SUB_RECORDS, SUB_RECORDS
from hwregress.store.verdicts import Verdict, parse_verdict, verdict_rank

FAMILY_VIEW = "<the family's>"
"""``TestRecord.view``'s default: a record built without a view takes its family's (None given: it has none)."""
RESULTS_SCHEMA_VERSION = 9
READABLE_RESULTS_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9)


@dataclass
class TestRecord:
    """One test's measurements and verdict (a row of ``results.json``).

    Family figures live in typed sub-records (:mod:`hwregress.store.figures`; None where the family does not apply):
    ``scaling``, ``allreduce``, ``colocated``, ``spark``, ``serving``, ``llm`` and ``compile``; the looks at the timed
    window in ``looks``; what each judged figure's verdict could catch in ``reach`` (throughput), ``latency_reach``,
    ``efficiency_reach`` and ``speedup_reach`` (:meth:`reaches`). ``details`` holds the rest, the
    open-ended facts a view or a plugin may add: ``worker``, the variant (``compiler``, ``memory_format``,
    ``context``), the window's ``extended_rounds``, ``verdict_rounds``, ``warmup_steps`` and ``telemetry_series``,
    ``profile_steps``, ``max_batch``, ``quantized_layers``/``quantized_base_dtype``, ``samples_per_s``/
    ``tokens_per_sample`` (text models), a speedup's ``cpu_throughput``, published ceilings (``published``,
    ``published_source``, ``published_missing``, link facts), output parity's errors (``relative_error``,
    ``max_abs_error``, ``tolerance``, ``decisive_agreement``) and ``participant`` (a node other than 0 of a multi-node
    job). The hardware (``identity``, ``device_facts``) and what the verdict was judged with (``stable``,
    ``reference_samples``) are typed fields. Field descriptions (``doc``) are the JSON Schema's."""

    __test__ = False  # not a pytest test class despite its name

    test_id: str = field(metadata={"doc": "pytest node id of the test"})
    family: str = doc("test family: throughput, speedup, ceiling, parity, output-parity, scaling, colocated, spark",
                      "throughput")
    hardware_key: str | None = doc("the baseline file's hardware key of the device")
    device: str | None = doc("torch device, e.g. cuda:0 or cpu")
    device_name: str | None = doc("the device's marketing name")
    model: str | None = doc("workload name (ceilings: the roof, e.g. gemm)")
    mode: str | None = doc("train, infer, prefill, decode, roof, batch, stream, ...")
    batch_size: int | None = doc("samples per step (ceilings: the size measured)")
    dtype: str | None = doc("fp32, bf16, fp16, int8, ...")
    unit: str = doc("samples/s for models, TFLOP/s or GB/s for ceilings, accuracy for parity", "samples/s")
    throughput: float | None = doc("median of samples, in unit")
    throughput_iqr: float | None = doc("interquartile range of samples, in unit")
    samples: list[float] = doc("per-round throughput observations, in unit (the only meaning of 'samples')",
                               factory=list)
    rounds: int | None = doc("timed rounds")
    steps_per_round: int | None = doc("steps timed in each round")
    latency_ms: float | None = doc("ms, lower is better: a model's median step time; decode: the inter-token latency "
                                   "p50 (one decode step, judged); spark stream: the p50 latency per image (judged)")
    latency_judged: bool = doc("whether latency_ms is judged against the baseline (its family declares the mode's "
                               "latency judged: a decode window's, a stream's)", False)
    measures_roof: bool = doc("whether throughput is a device roof (GEMM TFLOP/s, copy GB/s, ...) named by model, as "
                              "the ceiling family measures: the roof physics checks and diagnoses take", False)
    view: str | None = doc("the report view that shows the record beyond the generic tables, as its family declares it "
                           "(report/family_views.py): models (the charts over batch size and of the GPU over the CPU), "
                           "parity, ceilings, scaling, colocation, spark, serving; null: none", FAMILY_VIEW)
    peak_memory_bytes: int | None = doc("peak device memory (CUDA allocator) or process RSS (CPU), bytes")
    accuracy: float | None = doc("fraction: parity accuracy, top-1 agreement")
    reference_accuracy: float | None = doc("fraction: the CPU's accuracy in the same session (parity off the CPU)")
    speedup: float | None = doc("x, throughput over the CPU's in the same session")
    efficiency: float | None = doc(
        "scaling: T(W) / (W x T(1)) with T(1) from the same session; colocated: mean of each process's throughput "
        "over its solo throughput; spark batch: Spark images/s over plain torch images/s of the same model, batch and "
        "device in the same session (fraction, 1 = no loss)")
    baseline_throughput: float | None = doc("the baseline entry's throughput, in unit")
    baseline_peak_memory_bytes: int | None = doc("the baseline entry's peak memory, bytes")
    baseline_accuracy: float | None = doc("the baseline entry's accuracy (fraction)")
    baseline_speedup: float | None = doc("the baseline entry's speedup (x)")
    baseline_efficiency: float | None = doc("the baseline entry's efficiency")
    baseline_latency_ms: float | None = doc("the baseline entry's judged latency (ms; spark stream: the median of its "
                                            "sessions' p50 latencies)")
    ratio: float | None = doc("throughput / baseline throughput")
    threshold: float | None = doc("fraction, the throughput loss the verdict tolerates: a ratio below 1 - threshold is "
                                  "a regression (0.05: below 0.95; A/B: B/A outside 1 +- threshold is a change)")
    p_value: float | None = doc("p-value of the test of samples against the baseline's")
    alpha: float | None = doc("the significance level the throughput verdict was judged at: the level of the last "
                              "look taken (looks), else the session's alpha")
    memory_ratio: float | None = doc("peak memory / baseline peak memory")
    wanted_threshold: float | None = doc("what the noise/history bounds asked for when the cap cut it")
    verdict: Verdict = field(default=Verdict.NEW, metadata={"doc": "the test's verdict"})
    outcome: str | None = doc("pytest's outcome", enum=["passed", "failed", "skipped", None])
    message: str = doc("why the verdict, in words", "")
    environment: dict[str, Any] = doc("software and settings fingerprint", factory=dict)
    identity: dict[str, Any] = doc("the hardware identity a baseline entry is matched on (CPU model and stepping, GPU "
                                   "name, memory, power limit, ...: hwregress.hardware.identity)", factory=dict)
    device_facts: dict[str, Any] = doc("facts of the device (multiprocessors, memory bytes, MIG, compute capability, "
                                       "...: hwregress.hardware.devices.describe)", factory=dict)
    stable: bool | None = doc("whether the timed window's IQR/median stayed within the plan's bound after its "
                              "extensions; None: no timed window")
    reference_samples: list[float] = doc(
        "per-round throughput of the same-session reference a judged ratio divides by, in its own unit: a speedup's "
        "CPU side, a scaling efficiency's one-rank job, a co-located group's solo runs, Spark's plain torch; its "
        "noise widens that ratio's threshold", factory=list)
    env_changes: list[str] = doc("fingerprint differences from the baseline's", factory=list)
    identity_changes: list[str] = doc("hardware identity differences from the baseline's", factory=list)
    health: dict[str, Any] = doc("host and device health findings during the window", factory=dict)
    diagnosis: list[str] = doc("likely causes of a regression, most likely first", factory=list)
    baseline_recorded_at: str | None = doc("when the baseline entry was recorded (ISO 8601)")
    baseline_action: str | None = doc("what the session did to the baseline entry")
    flops_per_sample: float | None = doc("FLOPs per sample (2 x MACs)")
    achieved_tflops: float | None = doc("TFLOP/s achieved: flops_per_sample x samples/s")
    mfu: float | None = doc("model FLOPs utilization: achieved over the device's published peak (fraction)")
    arithmetic_intensity: float | None = doc("FLOP/byte")
    energy_j_per_sample: float | None = doc("J per sample over the window")
    samples_per_joule: float | None = doc("samples/J over the window")
    telemetry: dict[str, Any] | None = doc("the window's telemetry summary (readings, metrics, energy_j, ...)")
    top_ops: list[dict[str, Any]] = doc("top operators by self device time", factory=list)
    top_cpu_ops: list[dict[str, Any]] = doc("top operators by self CPU time", factory=list)
    op_categories: dict[str, float] = doc("fraction of profiled time per operator category", factory=dict)
    throttled: bool = doc("whether the device reported throttling in the window: the telemetry's throttle_reasons "
                          "name any (the assembler derives it)", False)
    trace_path: str | None = doc("path of the profiler trace, when written")
    details: dict[str, Any] = doc("open-ended facts (see TestRecord's docstring): identity, device_facts, variant, "
                                  "window and reference figures", factory=dict)
    duration_s: float | None = doc("s, wall time of the test's call phase (a setup that failed: of the setup); the "
                                   "digits parity: of its training")
    scaling: ScalingFigures | None = doc("data-parallel scaling figures (family scaling)")
    allreduce: AllreduceFigures | None = doc("all-reduce sweep (family ceiling, model allreduce)")
    colocated: ColocatedFigures | None = doc("co-located processes (family colocated)")
    spark: SparkFigures | None = doc("Spark engine and pipeline figures (family spark)")
    serving: ServingFigures | None = doc("a served model under a seeded load (family serving; docs/serving.md)")
    llm: LlmFigures | None = doc("prefill and decode windows of a causal LM (hwregress.measure.llm)")
    compile: CompileFigures | None = doc("the compiling first call, or the compile error (compiled variants)")
    looks: LookFigures | None = doc("the planned looks at the timed window and those taken (null: no baseline "
                                    "steered the window)")
    reach: ReachFigures | None = doc("what the throughput verdict could catch: its minimum detectable slowdown "
                                     "(null: the throughput was not judged)")
    latency_reach: ReachFigures | None = doc("what the judged latency's verdict could catch (null: not judged)")
    efficiency_reach: ReachFigures | None = doc("what the efficiency verdict could catch (null: not judged)")
    speedup_reach: ReachFigures | None = doc("what the speedup verdict could catch (null: not judged)")
    declared: list[DeclaredFigures] = doc("the figures of the metrics a project declares (hwregress.store.metrics."
                                          "register), in the order measured: each judged by the threshold rule",
                                          factory=list)
    ab: ABFigures | None = doc("B against A in an interleaved A/B session (--ab-python, --ab-env; docs/ab.md); null "
                               "outside one")

    def __post_init__(self) -> None:
        if self.view == FAMILY_VIEW:  # built without a view: its family's, as hwregress's families declare them
            self.view = LEGACY_VIEWS.get(self.family)

    def reaches(self) -> list[ReachFigures]:
        """The reach of each judged figure, the throughput's first (the one a test's MDS is quoted by where it
        was judged), then latency, efficiency, speedup and the declared metrics'; empty when nothing was judged."""
        built_in = [getattr(self, name) for name in REACH_FIELDS]
        return [reach for reach in (*built_in, *(figure.reach for figure in self.declared)) if reach is not None]

    def headline_reach(self) -> ReachFigures | None:
        """The reach a test's minimum detectable slowdown is quoted by (the report's summary line, JUnit, the job
        summary, the history): the throughput's where it was judged, else the first judged figure's; None when
        nothing was judged."""
        return next(iter(self.reaches()), None)

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON types (the verdict as its string, sub-records as objects)."""
        data = dataclasses.asdict(self)
        data["verdict"] = str(self.verdict)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TestRecord:
        """Build a record, ignoring keys this version does not know (forward compatible); sub-record objects become
        their :mod:`hwregress.store.figures` classes (an unknown key inside one is ignored too); the details an older
        version kept untyped move to their fields, and a record of a version <= 5 gets the traits its family had
        then (:mod:`hwregress.store.legacy_records`)."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in derive_legacy_traits(type_legacy_details(dict(data))).items() if k in known}
        for name, kind in SUB_RECORDS.items():
            if isinstance(values.get(name), Mapping):
                values[name] = kind.from_json(values[name])
        for name, kind in LIST_SUB_RECORDS.items():
            if isinstance(values.get(name), list):
                values[name] = [kind.from_json(item) if isinstance(item, Mapping) else item for item in values[name]]
        if "verdict" in values:
            values["verdict"] = parse_verdict(str(values["verdict"]))
        return cls(**values)


@dataclass
class SessionResults:
    """One session: its metadata (machine, software, options, timing) and its records."""

    meta: dict[str, Any] = field(default_factory=dict)
    records: list[TestRecord] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": RESULTS_SCHEMA_VERSION,
            "meta": self.meta,
            "records": [_finite(r.to_json()) for r in sorted(self.records, key=lambda r: r.test_id)],
        }

    def counts(self) -> dict[str, int]:
        """Number of records per verdict, worst first (:class:`hwregress.store.verdicts.Verdict` order)."""
        found = sorted({str(r.verdict) for r in self.records}, key=lambda v: (verdict_rank(v), v))
        return {v: sum(str(r.verdict) == v for r in self.records) for v in found}


def record_problem(values: Mapping[str, Any]) -> str | None:
    """The first field of ``values`` (a record's JSON, or ``vars(record)``) whose value does not have the
    type :class:`TestRecord` declares for it, as ``"'throughput' must be float | None, found 'fast'"``; a field of
    a sub-record is named by its path (``'scaling.world_size'``). None when all do. Unknown keys are ignored."""
    return type_problem(values, TestRecord)


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None: JSON has no spelling for them, and a results file
    must always be writable."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def load(path: str | Path) -> SessionResults:
    """Read a ``results.json`` of any readable schema version (see the format history above).

    Raises:
        ValueError: the file is not JSON, not a results file, of an unknown schema version, or holds a
            malformed record; the message names the file (and the record).
    """
    source = Path(path)
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{source}: cannot read results ({error})") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version not in READABLE_RESULTS_VERSIONS:
        found = version if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{source}: not a hwregress results file this version reads (schema version {found!r}; "
                         f"readable: {', '.join(map(str, READABLE_RESULTS_VERSIONS))}); upgrade hwregress to read it")
    records = data.get("records")
    if not isinstance(records, list) or not isinstance(data.get("meta", {}), dict):
        raise ValueError(f"{source}: 'records' must be a list and 'meta' an object")
    return SessionResults(data.get("meta", {}),
                          [_record(item, source, index, version) for index, item in enumerate(records)])


def _record(item: Any, source: Path, index: int, version: int) -> TestRecord:
    try:
        if not isinstance(item, dict) or not isinstance(item.get("test_id"), str):
            raise TypeError("not an object with a test_id")
        if version == 1 and isinstance(item.get("telemetry"), dict) and "samples" in item["telemetry"]:
            item["telemetry"]["readings"] = item["telemetry"].pop("samples")
        if version < 3:
            migrate_legacy_details(item)
        problem = record_problem(item)
        if problem is not None:
            raise TypeError(problem)
        return TestRecord.from_json(item)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: record {index} is malformed ({error}); the file was edited or truncated") from None


def machine_label(results: SessionResults) -> str:
    """A column title for one machine's results: its hardware keys, or its host name."""
    keys = sorted({r.hardware_key for r in results.records if r.hardware_key})
    return ", ".join(keys) or str(results.meta.get("hostname", "unknown"))


def merge_sessions(sessions: Iterable[SessionResults]) -> list[SessionResults]:
    """Sessions in a stable order (by machine label) for side-by-side reports."""
    return sorted(sessions, key=machine_label)

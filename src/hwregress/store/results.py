"""Plain records of one measured test and of one session; JSON in and out; merging across machines.

Units: throughput in ``unit`` (samples/s for models, TFLOP/s or GB/s for ceilings), latency in ms,
memory in bytes, energy in J, power in W, accuracy as a fraction. ``samples`` always means the per-round
throughput observations of the timed window.

The contract of ``results.json`` is the JSON Schema ``hwregress/store/schemas/results.schema.json``.

Format history (``schema_version``), in the manner of pyperf's:

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
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from hwregress.store.verdicts import Verdict, parse_verdict, verdict_rank

RESULTS_SCHEMA_VERSION = 2
READABLE_RESULTS_VERSIONS = (1, 2)

@dataclass
class TestRecord:
    """One test's measurements and verdict (a row of ``results.json``)."""

    __test__ = False  # not a pytest test class despite its name

    test_id: str
    family: str = "throughput"
    hardware_key: str | None = None
    device: str | None = None
    device_name: str | None = None
    model: str | None = None
    mode: str | None = None
    batch_size: int | None = None
    dtype: str | None = None
    unit: str = "samples/s"
    throughput: float | None = None
    throughput_iqr: float | None = None
    samples: list[float] = field(default_factory=list)
    rounds: int | None = None
    steps_per_round: int | None = None
    latency_ms: float | None = None
    peak_memory_bytes: int | None = None
    accuracy: float | None = None
    reference_accuracy: float | None = None
    speedup: float | None = None
    efficiency: float | None = None  # scaling: T(W) / (W x T(1)); colocated: mean throughput vs solo; spark: vs torch
    baseline_throughput: float | None = None
    baseline_peak_memory_bytes: int | None = None
    baseline_accuracy: float | None = None
    baseline_speedup: float | None = None
    baseline_efficiency: float | None = None
    baseline_latency_ms: float | None = None  # where the latency is judged (compare.judges_latency)
    ratio: float | None = None
    threshold: float | None = None
    p_value: float | None = None
    memory_ratio: float | None = None
    wanted_threshold: float | None = None  # what the noise/history bounds asked for when the cap cut it
    verdict: Verdict = Verdict.NEW
    outcome: str | None = None
    message: str = ""
    environment: dict[str, Any] = field(default_factory=dict)
    env_changes: list[str] = field(default_factory=list)
    identity_changes: list[str] = field(default_factory=list)
    health: dict[str, Any] = field(default_factory=dict)
    diagnosis: list[str] = field(default_factory=list)
    baseline_recorded_at: str | None = None
    baseline_action: str | None = None
    flops_per_sample: float | None = None
    achieved_tflops: float | None = None
    mfu: float | None = None
    arithmetic_intensity: float | None = None
    energy_j_per_sample: float | None = None
    samples_per_joule: float | None = None
    telemetry: dict[str, Any] | None = None
    top_ops: list[dict[str, Any]] = field(default_factory=list)
    top_cpu_ops: list[dict[str, Any]] = field(default_factory=list)
    op_categories: dict[str, float] = field(default_factory=dict)
    throttled: bool = False
    trace_path: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    duration_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON types (the verdict as its string)."""
        data = dataclasses.asdict(self)
        data["verdict"] = str(self.verdict)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TestRecord:
        """Build a record, ignoring keys this version does not know (forward compatible)."""
        known = {f.name for f in dataclasses.fields(cls)}
        record = cls(**{k: v for k, v in data.items() if k in known})
        record.verdict = parse_verdict(str(record.verdict))
        return record


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
    type :class:`TestRecord` declares for it, as ``"'throughput' must be float | None, found 'fast'"``;
    None when all do. Unknown keys are ignored."""
    hints = _record_hints()
    for name, value in values.items():
        hint = hints.get(name)
        if hint is not None and not _conforms(value, hint):
            return f"'{name}' must be {_hint_name(hint)}, found {json.dumps(value, default=str)[:40]}"
    return None


_HINTS: dict[str, Any] = {}


def _record_hints() -> dict[str, Any]:
    if not _HINTS:
        _HINTS.update(typing.get_type_hints(TestRecord))
        _HINTS.pop("__test__", None)
    return _HINTS


def _conforms(value: Any, hint: Any, depth: int = 0) -> bool:
    """Whether a JSON value fits a type hint (one level into lists and dicts; floats may be NaN: a
    journal keeps what the session measured)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or depth > 1:
        return True
    if origin in (Union, types.UnionType):
        return any(_conforms(value, arg, depth) for arg in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is list:
        return isinstance(value, list) and all(_conforms(item, args[0], depth + 1) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(_conforms(item, args[1], depth + 1) for item in value.values())
    if isinstance(hint, type):
        return isinstance(value, str) if issubclass(hint, str) else isinstance(value, hint)
    return True


def _hint_name(hint: Any) -> str:
    return str(hint).replace("typing.", "") if not isinstance(hint, type) else hint.__name__


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
    return SessionResults(data.get("meta", {}), [_record(item, source, index, version) for index, item in enumerate(records)])


def _record(item: Any, source: Path, index: int, version: int) -> TestRecord:
    try:
        if not isinstance(item, dict) or not isinstance(item.get("test_id"), str):
            raise TypeError("not an object with a test_id")
        if version == 1 and isinstance(item.get("telemetry"), dict) and "samples" in item["telemetry"]:
            item["telemetry"]["readings"] = item["telemetry"].pop("samples")
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

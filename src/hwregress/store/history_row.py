"""One row of the session history (:mod:`hwregress.store.history`): its fields and their types, declared once.

:class:`HistoryRow` is what :func:`row_from_record` builds from a test's record; its JSON Schema
(``schemas/history_row.schema.json``) is generated from it (:mod:`hwregress.store.schemas.generate`), and
:func:`row_problem` checks a row read back against the same types, field by field, fast enough for a history of
60,000 rows (a per-field check compiled once from the type hints; a generic schema validator took several times
as long as parsing the JSON).

A row needs ``v``, ``session``, ``time``, ``test_id``, ``hardware_key`` and ``median``; every other field may be
absent (rows written before the field existed; ``hwregress_version`` on the rows of a session recovered from the
journal of a hwregress that did not write its version there), but when present it must have its type.

:class:`SharedRows` holds the strings and session objects that rows repeat once, so that a long history read whole
takes a fifth of the memory.
"""

from __future__ import annotations

import json
import math
import typing
from collections.abc import Callable
from typing import Annotated, Any, TypedDict, Union

from hwregress import __version__
from hwregress.store.metrics import figures_of
from hwregress.store.results import TestRecord
from hwregress.summary import summarize

HISTORY_ROW_VERSION = 1


class _RequiredFields(TypedDict):
    v: Annotated[int, f"row format version, {HISTORY_ROW_VERSION}"]
    session: Annotated[str, "id of the pytest session (the same on every row it wrote)"]
    time: Annotated[str, "the session's start, UTC, ISO 8601"]
    test_id: Annotated[str, "pytest node id of the test"]
    hardware_key: Annotated[str, "the baselines file's hardware key of the device (the history file's name)"]
    median: Annotated[float, "median of the per-round samples, in unit (> 0)"]


class HistoryRow(_RequiredFields, total=False):
    """One history row: one measured test of one session (see the module doc for which fields are required)."""

    device: Annotated[str | None, "torch device, e.g. cuda:0 or cpu"]
    device_name: Annotated[str | None, "the device's marketing name"]
    family: Annotated[str, "test family: throughput, speedup, ceiling, ..."]
    model: Annotated[str | None, "workload name"]
    mode: Annotated[str | None, "train, infer, prefill, decode, ..."]
    batch_size: Annotated[int | None, "samples per step"]
    dtype: Annotated[str | None, "fp32, bf16, fp16, int8, ..."]
    identity: Annotated[dict[str, Any], "hardware identity (hwregress.hardware.identity)"]
    machine_id: Annotated[str, "machine-id(5) of the host that ran the session, the fleet store's host id of a CPU "
                          "host (absent where the session did not know it, and on older rows)"]
    hwregress_version: Annotated[str, "the hwregress version that wrote the row"]
    environment: Annotated[dict[str, Any], "software fingerprint (hwregress.hardware.devices.environment_fingerprint)"]
    packages: Annotated[str, "hash of the installed packages; the list is in packages/<hash>.json"]
    unit: Annotated[str, "unit of median, q1, q3 and iqr, e.g. samples/s"]
    q1: Annotated[float, "first quartile of the per-round samples, in unit"]
    q3: Annotated[float, "third quartile of the per-round samples, in unit"]
    iqr: Annotated[float, "q3 - q1, in unit"]
    n: Annotated[int, "number of per-round samples"]
    verdict: Annotated[str, "the session's verdict on the test (pass, regression, new, ...)"]
    ratio: Annotated[float | None, "median over the baseline median"]
    threshold: Annotated[float | None, "the ratio below which the session judged a regression"]
    baseline_median: Annotated[float | None, "the baseline median the session judged against, in unit"]
    baseline_recorded_at: Annotated[str | None, "when that baseline was recorded, ISO 8601"]
    telemetry: Annotated[dict[str, float], "window means: power_w, sm_clock_mhz, temperature_c, cpu_util_pct"]
    health: Annotated[dict[str, float], "CPU health probe: other_cpu_fraction, steal_fraction, cpu_freq_mhz"]
    diagnosis: Annotated[list[str], "the first two likely causes of a regression (hwregress.judge.diagnosis)"]
    interrupted: Annotated[bool, "true on the rows of a session that did not run to its end (absent otherwise)"]
    figures: Annotated[dict[str, float], "the test's judged figures beside the throughput, by metric name (latency, "
                       "peak_memory, accuracy, efficiency, speedup, and those a project declares: "
                       "hwregress.store.metrics), each in its metric's unit (absent where there is none, and on rows "
                       "written before hwregress 0.8)"]
    mds: Annotated[float | None, "the minimum detectable slowdown of the session's verdict on the test, a fraction at "
                   "90% power (its headline reach: the throughput's where judged; hwregress.judge.reach); null: not "
                   "judged or no number stated (absent on rows written before hwregress 0.5)"]


def _other_figures(record: TestRecord) -> dict[str, float]:
    """The record's judged figures beside the throughput, by metric (:func:`hwregress.store.metrics.figures_of`)."""
    return {figure.metric: figure.value for figure in figures_of(record)
            if figure.metric != "throughput" and figure.value is not None}


TELEMETRY_FIELDS = ("power_w", "sm_clock_mhz", "temperature_c", "cpu_util_pct")
HEALTH_FIELDS = ("other_cpu_fraction", "steal_fraction", "cpu_freq_mhz")


def row_from_record(record: TestRecord, session: str, time: str, packages: str, interrupted: bool = False,
                    hwregress_version: str | None = __version__, machine_id: str | None = None) -> HistoryRow | None:
    """The history row of one finished test; None when it measured nothing (no samples, no hardware key).

    Args:
        record: the test's record (``samples`` in ``record.unit``, e.g. samples/s).
        session: the id of the pytest session (same for every row it writes).
        time: the session's start, UTC ISO 8601 (same for every row it writes: one session, one x position).
        packages: :func:`hwregress.store.history.package_hash` of the installed packages ("" when unknown).
        interrupted: the session did not run to its end: the row gets ``"interrupted": true``.
        hwregress_version: the version of the hwregress that measured it (this one's by default); None when unknown
            (the journal of an older hwregress): the row has no ``hwregress_version``.
        machine_id: the machine id of the host that ran it (``results.json``'s ``meta.machine_id``); None when unknown:
            the row has no ``machine_id``.
    """
    values = [float(s) for s in record.samples
              if isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s > 0]
    if not values or not record.hardware_key:
        return None
    summary = summarize(values)
    return {
        "v": HISTORY_ROW_VERSION, "session": session, "time": time, "test_id": record.test_id,
        "hardware_key": record.hardware_key, "device": record.device, "device_name": record.device_name,
        "family": record.family, "model": record.model, "mode": record.mode, "batch_size": record.batch_size,
        "dtype": record.dtype, "identity": record.identity, **({"machine_id": machine_id} if machine_id else {}),
        **({"hwregress_version": hwregress_version} if hwregress_version is not None else {}),
        "environment": dict(record.environment), "packages": packages, "unit": record.unit,
        "median": summary.median, "q1": summary.q1, "q3": summary.q3, "iqr": summary.iqr, "n": summary.n,
        "verdict": str(record.verdict),
        "ratio": _finite_or_none(record.ratio), "threshold": _finite_or_none(record.threshold),
        "baseline_median": _finite_or_none(record.baseline_throughput),
        "baseline_recorded_at": record.baseline_recorded_at,
        "telemetry": _telemetry_means(record.telemetry or {}),
        "health": {key: value for key in HEALTH_FIELDS
                   if (value := _finite_or_none((record.health or {}).get(key))) is not None},
        "diagnosis": list(record.diagnosis[:2]),
        **({"figures": others} if (others := _other_figures(record)) else {}),
        **({"interrupted": True} if interrupted else {}),
        "mds": _finite_or_none(headline.mds) if (headline := record.headline_reach()) is not None else None,
    }


def _finite_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _telemetry_means(summary: dict[str, Any]) -> dict[str, float]:
    metrics = summary.get("metrics") or {}
    means = {key: _finite_or_none((metrics.get(key) or {}).get("mean")) for key in TELEMETRY_FIELDS}
    return {key: value for key, value in means.items() if value is not None}


Check = Callable[[Any], bool]
_UNION_TYPE = type(int | None)
_PLAIN: dict[Any, tuple[Check, str, str]] = {
    # JSON gives exactly these Python types, so ``type(x) is`` is exact (and keeps True out of the numbers)
    str: (lambda value: type(value) is str, "a string", "strings"),
    int: (lambda value: type(value) is int, "an integer", "integers"),
    float: (lambda value: type(value) is int or (type(value) is float and math.isfinite(value)), "a finite number",
            "finite numbers"),
    bool: (lambda value: type(value) is bool, "true or false", "true or false"),
    Any: (lambda value: True, "anything", "anything"),
}


def field_docs() -> dict[str, str]:
    """The description of each field of :class:`HistoryRow`, in declaration order."""
    hints = typing.get_type_hints(HistoryRow, include_extras=True)
    return {name: hint.__metadata__[0] for name, hint in hints.items()}


def _compile(hint: Any) -> tuple[Check, str]:
    """A check of one JSON value against a type hint, and what the hint asks for in words.

    Raises:
        TypeError: a hint this module cannot check (name it here to add it).
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _PLAIN:
        return _PLAIN[hint][:2]
    if origin in (Union, _UNION_TYPE) and len(args) == 2 and type(None) in args:
        inner, words = _compile(next(a for a in args if a is not type(None)))
        return (lambda value: value is None or inner(value)), f"{words} or null"
    if origin is list and args[0] in _PLAIN:
        item, items = _PLAIN[args[0]][0], _PLAIN[args[0]][2]
        return (lambda value: type(value) is list and all(map(item, value))), f"a list of {items}"
    if origin is dict and args[0] is str and args[1] in _PLAIN:
        item, items = _PLAIN[args[1]][0], _PLAIN[args[1]][2]
        if args[1] is Any:
            return (lambda value: type(value) is dict), "an object"
        return (lambda value: type(value) is dict and all(map(item, value.values()))), f"an object of {items}"
    raise TypeError(f"history row: no check for the type hint {hint!r}; teach hwregress.store.history_row._compile")


ROW_TYPES: dict[str, Any] = typing.get_type_hints(HistoryRow)
REQUIRED_FIELDS: frozenset[str] = HistoryRow.__required_keys__
_CHECKS: dict[str, tuple[Check, str]] = {name: _compile(hint) for name, hint in ROW_TYPES.items()}


def row_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with the types of a parsed history row, or None when nothing is.

    Names every field that is missing though required or whose value does not have its declared type, e.g.
    ``'iqr' must be a finite number, found "x"``; fields not declared (a newer hwregress's) are not checked.
    """
    problems = [f"'{name}' is missing" for name in sorted(REQUIRED_FIELDS) if name not in row]
    for name, value in row.items():
        check = _CHECKS.get(name)
        if check is not None and not check[0](value):
            problems.append(f"'{name}' must be {check[1]}, found {_shown(value)}")
    return "; ".join(problems) if problems else None


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)  # NaN and Infinity print as such: json.loads read them
    return text if len(text) <= 40 else text[:37] + "..."


SESSION_OBJECTS = ("identity", "environment")  # the same on every row of a session: held once per read


class SharedRows:
    """Equal strings, and equal :data:`SESSION_OBJECTS`, of the rows of one read held once: the rows of a session
    repeat its ids, identity and environment: a parsed row of a CPU session takes 7.8 KB apart, 1.5 KB sharing
    (60,000 rows: 470 MB, 92 MB). The rows a read yields are therefore read-only, as every reader treats them."""

    def __init__(self) -> None:
        self.strings: dict[str, str] = {}
        self.objects: dict[tuple[Any, ...], dict[str, Any]] = {}

    def row(self, row: HistoryRow) -> HistoryRow:
        """``row`` rebuilt from the strings and session objects held so far (equal to it, value and type)."""
        held: dict[str, Any] = {}
        for name, value in row.items():
            kind = type(value)
            if kind is str:
                value = self.string(value)
            elif kind is dict:
                value = self.session_object(name, value) if name in SESSION_OBJECTS else self.flat(value)
            elif kind is list:
                value = [self.string(item) if type(item) is str else item for item in value]
            held[self.string(name)] = value
        return typing.cast(HistoryRow, held)

    def string(self, text: str) -> str:
        return self.strings.setdefault(text, text)

    def flat(self, mapping: dict[str, Any]) -> dict[str, Any]:
        return {self.string(key): self.string(value) if type(value) is str else value for key, value in mapping.items()}

    def session_object(self, name: str, mapping: dict[str, Any]) -> dict[str, Any]:
        key = (name, tuple(mapping.items()), tuple(map(type, mapping.values())))  # types: True == 1, but differs
        try:
            found = self.objects.get(key)
        except TypeError:  # a list or object inside: kept as parsed
            return mapping
        if found is None:
            found = self.objects[key] = self.flat(mapping)
        return found

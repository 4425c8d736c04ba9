"""A baselines file: its layout (schema version 1), reading and validating it entry by entry, and merging two.

File layout (schema version 1)::

    {"schema_version": 1, "hwregress_version": "0.1.0", "hardware_key": "nvidia-h100-80gb-hbm3",
     "device_name": "NVIDIA H100 80GB HBM3",
     "entries": {"throughput/resnet50/train/bs64/fp32": {...entry...}, ...}}

An entry holds the test identity, the raw per-round samples of its metric with their summary, the
secondary figures (latency, peak memory, accuracy, speedup), the environment fingerprint, and when and
with which hwregress it was recorded.

Reading validates each entry on its own: one bad entry is kept out of :attr:`BaselineFile.entries` (and
listed in :attr:`BaselineFile.bad_entries`) so that only its test fails, while its raw content is kept in
the file until an update replaces it. A file that is not JSON, not of this layout, or of a schema version
this hwregress cannot read fails as a whole (the folder of such files: :mod:`hwregress.store.baselines`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwregress import __version__
from hwregress.store.atomic import NotARegularFileError, read_regular_file

SCHEMA_VERSION = 1
READABLE_VERSIONS = (1,)
RESTORE = "restore it from version control"
FORCE = "--update-baselines=force"


class BaselineError(Exception):
    """A baselines file, or one entry of it, that cannot be trusted.

    Attributes:
        source: the file named in the message.
        key: the entry key when only that entry is bad (None: the whole file is).
        version: the file's ``schema_version`` when it is one this hwregress cannot read.
    """

    def __init__(self, message: str, source: str = "", key: str | None = None, version: int | None = None) -> None:
        super().__init__(message)
        self.source, self.key, self.version = source, key, version


@dataclass
class BaselineFile:
    """The parsed content of ``baselines/<hardware_key>.json``.

    Attributes:
        entries: the entries that passed validation, by test key.
        bad_entries: entry key -> the one-line error (file, key, problem, fix) of each entry that failed it.
        bad_raw: the raw JSON of the bad entries, written back unchanged until an update replaces them.
        source: the file read ("" for a file built in memory).
    """

    hardware_key: str
    device_name: str
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    bad_entries: dict[str, str] = field(default_factory=dict)
    bad_raw: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    def entry(self, key: str) -> dict[str, Any] | None:
        """The entry of ``key``; None when there is none.

        Raises:
            BaselineError: the entry exists but failed validation (the message names file, key and fix).
        """
        if key in self.bad_entries:
            raise BaselineError(self.bad_entries[key], self.source, key)
        return self.entries.get(key)

    def put(self, entries: Mapping[str, dict[str, Any]]) -> None:
        """Add or replace ``entries`` (a bad entry of the same key is replaced too)."""
        for key, value in entries.items():
            self.entries[key] = value
            self.bad_entries.pop(key, None)
            self.bad_raw.pop(key, None)

    def to_json(self) -> dict[str, Any]:
        """The file's JSON: valid entries and the raw bad ones, sorted by key."""
        everything = {**self.bad_raw, **self.entries}
        return {
            "schema_version": SCHEMA_VERSION,
            "hwregress_version": __version__,
            "hardware_key": self.hardware_key,
            "device_name": self.device_name,
            "entries": {key: everything[key] for key in sorted(everything)},
        }


# -- validation --------------------------------------------------------------------------------------------
_TEXT_FIELDS = ("family", "model", "mode", "dtype", "device_name", "unit", "recorded_at", "hwregress_version",
                "compile_cache")
_COUNT_FIELDS = ("batch_size", "steps_per_round", "n", "visits")
_FIGURE_FIELDS = ("median", "iqr", "latency_ms", "peak_memory_bytes", "accuracy", "speedup", "efficiency", "comm_share",
                  "compile_s")
_SAMPLE_FIELDS = ("samples", "history", "efficiency_history", "compile_history")
_OBJECT_FIELDS = ("environment", "identity", "telemetry_means", "health")
_LIST_FIELDS = ("top_ops", "throttle_reasons")
CHECKED_FIELDS: frozenset[str] = frozenset((*_TEXT_FIELDS, *_COUNT_FIELDS, *_FIGURE_FIELDS, *_SAMPLE_FIELDS,
                                            *_OBJECT_FIELDS, *_LIST_FIELDS, "session_samples", "metrics",
                                            "metric_history"))
"""Every entry key :func:`check_entry` checks; any other key is kept unchecked."""


def check_entry(entry: Any) -> str | None:
    """What is wrong with one entry's content, None when nothing is.

    Checked: an object; text fields (``unit``, ``recorded_at``, ...) strings or null; counts
    (``batch_size``, ``n``, ``steps_per_round``, ``visits``) non-negative integers or null; figures (``median``,
    ``latency_ms``, ``peak_memory_bytes``, ``accuracy``, ...) finite non-negative numbers or null;
    ``samples`` and ``history`` lists of finite positive numbers; ``session_samples`` a list of such lists;
    ``environment``, ``identity``, ``telemetry_means`` and ``health`` objects; ``top_ops`` and ``throttle_reasons``
    lists; a declared metric's ``metrics`` value a finite positive number and its ``metric_history`` a list of them.
    Other keys are accepted unchecked (a newer hwregress may add them).
    """
    if not isinstance(entry, dict):
        return f"is {_json_type(entry)}, not an object"
    for name in _TEXT_FIELDS:
        if entry.get(name) is not None and not isinstance(entry[name], str):
            return f"'{name}' must be text, found {_json_type(entry[name])}"
    for name in _COUNT_FIELDS:
        value = entry.get(name)
        if value is not None and (not _is_int(value) or value < 0):
            return f"'{name}' must be a non-negative integer, found {_short(value)}"
    for name in _FIGURE_FIELDS:
        value = entry.get(name)
        if value is not None and (not _is_number(value) or value < 0):
            return f"'{name}' must be a finite non-negative number, found {_short(value)}"
    for name in _SAMPLE_FIELDS:
        problem = _check_samples(name, entry.get(name))
        if problem:
            return problem
    sessions = entry.get("session_samples")
    if sessions is not None:
        if not isinstance(sessions, list):
            return f"'session_samples' must be a list of sample lists, found {_json_type(sessions)}"
        for index, session in enumerate(sessions):
            problem = _check_samples(f"session_samples[{index}]", session)
            if problem:
                return problem
    for name in _OBJECT_FIELDS:
        if entry.get(name) is not None and not isinstance(entry[name], dict):
            return f"'{name}' must be an object, found {_json_type(entry[name])}"
    problem = _check_declared(entry.get("metrics"), entry.get("metric_history"))
    if problem:
        return problem
    for name in _LIST_FIELDS:
        if entry.get(name) is not None and not isinstance(entry[name], list):
            return f"'{name}' must be a list, found {_json_type(entry[name])}"
    return None


def _check_declared(values: Any, histories: Any) -> str | None:
    """What is wrong with a declared metrics' ``metrics`` (name -> finite positive number) and ``metric_history`` (name
    -> list of them), None when nothing is."""
    for name, found in (("metrics", values), ("metric_history", histories)):
        if found is not None and not isinstance(found, dict):
            return f"'{name}' must be an object of metric names, found {_json_type(found)}"
    for metric, value in (values or {}).items():
        if not _is_number(value) or value <= 0:
            return f"'metrics.{metric}' must be a finite positive number, found {_short(value)}"
    for metric, history in (histories or {}).items():
        problem = _check_samples(f"metric_history.{metric}", history)
        if problem:
            return problem
    return None


def _check_samples(name: str, values: Any) -> str | None:
    if values is None:
        return None
    if not isinstance(values, list):
        return f"'{name}' must be a list of numbers, found {_json_type(values)}"
    for index, value in enumerate(values):
        if not _is_number(value) or value <= 0:
            return f"'{name}'[{index}] must be a finite positive number, found {_short(value)}"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "text", bool: "a boolean", type(None): "null",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


# -- parsing -----------------------------------------------------------------------------------------------
class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(f"holds {name}, which JSON does not allow")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(f"holds the number {text}, too large for a float")
    return value


def parse(text: str, source: str) -> BaselineFile:
    """Parse a baselines file's text; entries that fail :func:`check_entry` go to ``bad_entries``.

    Raises:
        BaselineError: not JSON (NaN and Infinity included), not the expected layout, or a schema version
            this hwregress cannot read; the message names ``source`` and the fix.
    """
    data = _decode(text, source)
    _check_version(data, source)
    _check_layout(data, source)
    result = BaselineFile(data.get("hardware_key") or "", data.get("device_name") or "", source=source)
    for key, entry in data["entries"].items():
        problem = check_entry(entry)
        if problem is None:
            result.entries[key] = entry
        else:
            result.bad_raw[key] = entry
            result.bad_entries[key] = (f"{source}: entry {key!r} {problem} (re-record it with {FORCE}, "
                                       f"or {RESTORE})")
    return result


def _decode(text: str, source: str) -> Any:
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NonFinite as error:
        raise BaselineError(f"{source}: {error} ({RESTORE}, or move it aside with {FORCE})", source) from None
    except json.JSONDecodeError as error:
        raise BaselineError(f"{source}: not valid JSON: {error.msg} at line {error.lineno} column {error.colno} "
                            f"({RESTORE}, or move it aside with {FORCE})", source) from None
    except (ValueError, RecursionError) as error:  # digits beyond int's limit, nesting beyond the stack
        raise BaselineError(f"{source}: not a readable JSON document: {str(error)[:80] or type(error).__name__} "
                            f"({RESTORE}, or move it aside with {FORCE})", source) from None


def _check_version(data: Any, source: str) -> None:
    fix = f"{RESTORE}, or move it aside with {FORCE}"
    if not isinstance(data, dict) or "schema_version" not in data:
        raise BaselineError(f"{source}: not a hwregress baselines file (no schema_version) ({fix})", source)
    version = data["schema_version"]
    if not _is_int(version):
        raise BaselineError(f"{source}: schema_version must be an integer, found {_short(version)} ({fix})", source)
    if version not in READABLE_VERSIONS:
        writer = data.get("hwregress_version")
        written = f"written by hwregress {writer}, " if isinstance(writer, str) else ""
        raise BaselineError(
            f"{source}: schema version {version} is not supported ({written}this hwregress {__version__} reads "
            f"{', '.join(map(str, READABLE_VERSIONS))}) (upgrade hwregress to read it, or run with {FORCE} to move "
            f"it aside as {Path(source).name}.v{version}.bak and record anew)", source, version=version)


def _check_layout(data: dict[str, Any], source: str) -> None:
    fix = f"{RESTORE}, or move it aside with {FORCE}"
    if not isinstance(data.get("entries"), dict):
        raise BaselineError(f"{source}: 'entries' must map test keys to objects, found "
                            f"{_json_type(data.get('entries'))} ({fix})", source)
    for name in ("hardware_key", "device_name"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise BaselineError(f"{source}: '{name}' must be text, found {_json_type(data[name])} ({fix})", source)


def load_file(path: str | os.PathLike[str]) -> BaselineFile:
    """Read and parse one baselines file (a regular file, UTF-8).

    Raises:
        FileNotFoundError: there is no file at ``path``.
        BaselineError: a folder or device, unreadable, not UTF-8, or refused by :func:`parse`.
    """
    try:
        raw = read_regular_file(path)
    except NotARegularFileError as error:
        raise BaselineError(f"{error} (a baselines file is a JSON file; move this out of the way)", str(path)) from None
    except FileNotFoundError:
        raise
    except OSError as error:
        raise BaselineError(f"{path}: cannot be read: {error.strerror or error} (check its permissions)",
                            str(path)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BaselineError(f"{path}: not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start}) "
                            f"(re-save it as UTF-8, or {RESTORE})", str(path)) from None
    return parse(text, str(path))


def merge(first: BaselineFile, second: BaselineFile) -> BaselineFile:
    """Union of two files' entries; where both hold a key the entry recorded later wins (ties broken by
    content, so ``merge(a, b) == merge(b, a)``). A bad entry survives only where neither file has a good one."""
    entries = dict(first.entries)
    for key, entry in second.entries.items():
        if key not in entries or _newer(entry, entries[key]):
            entries[key] = entry
    result = BaselineFile(first.hardware_key or second.hardware_key, first.device_name or second.device_name, entries)
    for side in (first, second):
        for key in set(side.bad_entries) - set(entries):
            result.bad_entries.setdefault(key, side.bad_entries[key])
            result.bad_raw.setdefault(key, side.bad_raw.get(key))
    return result


def _newer(candidate: Mapping[str, Any], incumbent: Mapping[str, Any]) -> bool:
    def rank(entry: Mapping[str, Any]) -> tuple[str, str]:
        return str(entry.get("recorded_at", "")), json.dumps(entry, sort_keys=True, default=str)

    return rank(candidate) > rank(incumbent)


def entry_key(family: str, model: str, mode: str, batch_size: int, dtype: str) -> str:
    """The identity of a test inside a hardware file, e.g. ``"throughput/resnet50/train/bs64/fp32"``."""
    return f"{family}/{model}/{mode}/bs{batch_size}/{dtype}"

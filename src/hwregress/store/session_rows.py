"""A session's rows for the fleet store (:mod:`hwregress.store.tables`), from a ``results.json`` document: pure, no
database. :func:`session_rows` gives the host row, the session row and one figure row per judged figure of each
test (its throughput, latency, peak memory, accuracy, speedup or efficiency, whichever the record has).

The session's id is a UUIDv7 (RFC 9562) whose 48-bit time is the session's start in ms and whose other bits come
from a hash of its name, so that pushing the same session twice, from anywhere, gives the same id; ids sort by start.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hwregress.store.figures import ReachFigures
from hwregress.store.history import parse_time
from hwregress.store.legacy_records import type_legacy_details
from hwregress.store.metrics import BY_NAME, Figure, figures_of, finite_number
from hwregress.store.results import TestRecord, record_problem
from hwregress.store.tables import HOST_ID_LENGTH
from hwregress.summary import summarize

UNKNOWN_HOST = "unknown"  # the host id of a session that names no GPU, machine id or hostname
RESULTS_FIX = "give a results.json written by hwregress (its meta has session and started_at)"


class MalformedResults(ValueError):
    """A results document a push cannot take: ``what`` is wrong (the record and the field where it is one), ``fix``
    what to do; ``str()`` is ``"<what> (<fix>)"``, so that a caller that names the file can say each once."""

    def __init__(self, what: str, fix: str = RESULTS_FIX) -> None:
        self.what, self.fix = what, fix
        super().__init__(f"{what} ({fix})")


@dataclass(frozen=True)
class SessionRows:
    """The rows of one session: ``host`` (a ``hosts`` row), ``session`` (a ``sessions`` row without ``pushed_at``)
    and ``figures`` (``figures`` rows without ``session_id`` and ``id``), column name -> value."""

    host: dict[str, Any]
    session: dict[str, Any]
    figures: list[dict[str, Any]]


def session_rows(results: Mapping[str, Any]) -> SessionRows:
    """The rows of the session of a ``results.json`` document (as parsed JSON).

    Raises:
        MalformedResults: not a results document (no ``meta`` object with a ``session`` string and an ISO 8601
            ``started_at``, ``records`` not a list of objects), a ``meta.hostname`` not a string or a
            ``meta.hardware`` not a list, or a record without a ``test_id``, with a field not of
            the type :class:`TestRecord` declares (:func:`hwregress.store.results.record_problem`) or an unknown
            verdict; the message names what is missing, or the record (its index and test id) and the field.
    """
    meta = results.get("meta") if isinstance(results, Mapping) else None
    records = results.get("records") if isinstance(results, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(records, list):
        raise MalformedResults("not a results document: no 'meta' object and 'records' list")
    name, started = meta.get("session"), parse_time(str(meta.get("started_at") or ""))
    if not isinstance(name, str) or not name or started is None:
        raise MalformedResults(f"meta.session {name!r} or meta.started_at {meta.get('started_at')!r} is missing or not "
                               "ISO 8601")
    for field, kind, what in (("hostname", str, "a string"), ("hardware", list, "a list of devices")):
        if meta.get(field) is not None and not isinstance(meta[field], kind):
            raise MalformedResults(f"meta.{field} {json.dumps(meta[field], default=str)[:40]} is not {what}")
    typed = [typed_record(index, item) for index, item in enumerate(records)]
    hardware_key = session_hardware_key(typed)
    host = {"host_id": host_id(typed, meta), "aliases": [meta["hostname"]] if meta.get("hostname") else [],
            "hardware_key": hardware_key, "first_seen": started, "last_seen": started}
    session = {
        "id": session_uuid(name, started), "name": name, "host_id": host["host_id"], "hostname": meta.get("hostname"),
        "hardware_key": hardware_key, "started_at": started,
        "finished_at": parse_time(str(meta.get("finished_at") or "")),
        "exitstatus": meta.get("exitstatus") if type(meta.get("exitstatus")) is int else None,
        "interrupted": meta.get("interrupted") is True, **source_control(meta),
        "environment": environments(meta, typed), "meta": dict(meta),
    }
    return SessionRows(host, session, [row for record in typed for row in figure_rows(record)])


def typed_record(index: int, item: Any) -> TestRecord:
    """Record ``index`` of a results document's ``records`` (its JSON) as a :class:`TestRecord`, once checked.

    Raises:
        MalformedResults: not an object, no string ``test_id``, a field not of its declared type, or an unknown
            verdict; the message names the record (index and test id) and the field.
    """
    if not isinstance(item, Mapping):
        raise MalformedResults(f"record {index} is malformed: not an object but {type(item).__name__}")
    if "test_id" not in item:
        raise MalformedResults(f"record {index} is malformed: no 'test_id' (the test's pytest node id)")
    label = f"record {index} ({item['test_id']})" if isinstance(item["test_id"], str) else f"record {index}"
    values = type_legacy_details(dict(item))  # a copy: the details an older version kept untyped are checked too
    problem = record_problem(values)
    if problem is None:
        try:
            return TestRecord.from_json(values)
        except (TypeError, ValueError) as error:  # an unknown verdict
            problem = str(error)
    raise MalformedResults(f"{label} is malformed: {problem}")


def session_uuid(name: str, started: _dt.datetime) -> str:
    """The session's UUIDv7 as text: 48 bits of ``started`` in Unix ms, then 74 bits of the SHA-256 of ``name``."""
    ms = int(started.timestamp() * 1000) & ((1 << 48) - 1)
    bits = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:10], "big")
    rand_a, rand_b = (bits >> 68) & 0xFFF, bits & ((1 << 62) - 1)
    return str(uuid.UUID(int=ms << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b))


def host_id(records: Sequence[TestRecord], meta: Mapping[str, Any]) -> str:
    """A host's stable id (:func:`stable_host_id`) from its records' GPU UUIDs, ``meta["machine_id"]``
    (/etc/machine-id read when the session ran) and ``meta["hostname"]``."""
    return stable_host_id([str(r.identity["gpu_uuid"]) for r in records if r.identity.get("gpu_uuid")],
                          meta.get("machine_id"), meta.get("hostname"))


def stable_host_id(gpu_uuids: Iterable[str], machine_id: Any, hostname: Any) -> str:
    """A host's stable id: its GPUs' UUIDs (sorted, duplicates dropped, joined by ``,``; their SHA-256 where that is
    longer than the column, :data:`hwregress.store.tables.HOST_ID_LENGTH`) where there are any, else the machine id,
    else the hostname (each where a non-blank string), else :data:`UNKNOWN_HOST`."""
    gpus = sorted(set(gpu_uuids))
    if gpus:
        joined = ",".join(gpus)
        # 12 UUIDs fit the column (tables.HOST_ID_LENGTH); a 16-GPU host is known by their digest (and its names)
        return joined if len(joined) <= HOST_ID_LENGTH else f"gpus-sha256:{hashlib.sha256(joined.encode()).hexdigest()}"
    for name in (machine_id, hostname):
        if isinstance(name, str) and name.strip():
            return name.strip()
    return UNKNOWN_HOST


def session_hardware_key(records: Sequence[TestRecord]) -> str | None:
    """The hardware key a session is filed under: the most frequent key of its accelerator records, else of all its
    records (a GPU session also measures the CPU); None when no record has one."""
    for chosen in ([r for r in records if r.hardware_key and not str(r.device or "cpu").startswith("cpu")], records):
        counts = Counter(r.hardware_key for r in chosen if r.hardware_key)
        if counts:
            return counts.most_common(1)[0][0]
    return None


def source_control(meta: Mapping[str, Any]) -> dict[str, str | None]:
    """``git_sha``, ``git_branch`` and ``ci_build_url``: from ``meta["provenance"]`` (what the plugin records:
    :mod:`hwregress.plugin.provenance`), else from ``meta["ci"]`` or ``meta["git"]`` as a
    ``pytest_hwregress_session_meta`` hook of a user's may set them (keys ``commit`` or ``sha``, ``branch``, ``build``
    or ``build_url`` or ``url``); None where absent."""
    sources = [meta.get(key) for key in ("ci", "git") if isinstance(meta.get(key), Mapping)]

    def first(*names: str) -> str | None:
        found = [str(s[n]) for s in sources for n in names if isinstance(s.get(n), (str, int)) and str(s[n])]
        return found[0] if found else None

    recorded = meta.get("provenance") if isinstance(meta.get("provenance"), Mapping) else {}

    def known(name: str, *fallbacks: str) -> str | None:
        value = recorded.get(name)
        return str(value) if isinstance(value, str) and value else first(*fallbacks)

    return {"git_sha": known("git_sha", "commit", "sha"), "git_branch": known("git_branch", "branch"),
            "ci_build_url": known("ci_build_url", "build_url", "build", "url")}


def environments(meta: Mapping[str, Any], records: Sequence[TestRecord]) -> dict[str, Any]:
    """The software fingerprint per device: ``meta["hardware"]``'s, else the first record's of that device."""
    found: dict[str, Any] = {}
    for entry in meta.get("hardware") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("environment"), Mapping):
            found[str(entry.get("device"))] = dict(entry["environment"])
    for record in records:
        if record.environment and str(record.device) not in found:
            found[str(record.device)] = dict(record.environment)
    return found


def figure_rows(record: TestRecord) -> list[dict[str, Any]]:
    """One row per judged metric the record has a value of (a finite number): its built-in metrics
    (:data:`hwregress.store.metrics.METRICS`) and declared ones (:func:`hwregress.store.metrics.figures_of`); the
    throughput's row carries the per-round samples and their quartiles, the others one value (``median``, ``n`` 1)."""
    rows = []
    for figure in figures_of(record):
        samples = _finite_samples(record.samples) if figure.metric == "throughput" else []
        if figure.value is None and not samples:
            continue
        summary = summarize(samples) if samples else None
        rows.append({
            "test_id": record.test_id, "hardware_key": record.hardware_key, "device_name": record.device_name,
            "family": record.family, "model": record.model, "mode": record.mode, "batch_size": record.batch_size,
            "dtype": record.dtype, "device": record.device, "metric": figure.metric,
            "unit": figure.unit, "direction": figure.direction, "samples": samples or None,
            "median": summary.median if summary else figure.value, "q1": summary.q1 if summary else None,
            "q3": summary.q3 if summary else None, "n": summary.n if summary else 1,
            "verdict": str(record.verdict), **_judged(record, figure),
            "mds": finite_number(figure.reach.mds) if isinstance(figure.reach, ReachFigures) else None,
            "baseline_median": figure.baseline,
            "baseline_recorded_at": record.baseline_recorded_at,
            "identity": dict(record.identity), "diagnosis": list(record.diagnosis),
        })
    return rows


def _judged(record: TestRecord, figure: Figure) -> dict[str, float | None]:
    """The figure's ratio to its baseline where the record keeps one; the throughput's threshold and p-value, a
    declared metric's threshold."""
    if figure.metric == "throughput":
        return {"ratio": figure.ratio, "threshold": figure.threshold, "p_value": finite_number(record.p_value)}
    declared = figure.metric not in BY_NAME
    return {"ratio": figure.ratio, "threshold": figure.threshold if declared else None, "p_value": None}


def _finite_samples(samples: Sequence[Any]) -> list[float]:
    return [float(s) for s in samples if finite_number(s) is not None]

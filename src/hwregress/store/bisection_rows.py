"""A bisection's rows for the fleet store (:data:`hwregress.store.tables.bisections` and
:data:`hwregress.store.tables.bisection_probes`) from what ``python -m hwregress bisect`` knows as it runs and from its
final JSON document (``hwregress.cli.bisect.bisection_json``), and the document again from the rows of a bisection
that never finished: pure, no database.

What a row keeps is what both engines can hold, whatever the caller gives:

- a figure (``ratio``, ``ratio_low``, ``ratio_high``, ``seconds``) that is NaN or infinite is stored as None, in a
  column and anywhere in a JSON value (the document, a probe's ``details``, the settings): PostgreSQL's JSON and most
  JSON readers refuse ``NaN`` and ``Infinity``, and SQLite stores a NaN in a column as NULL anyway;
- a text's NUL characters and surrogates become U+FFFD, in a column and anywhere in a JSON value (its keys too):
  PostgreSQL's text holds no NUL, UTF-8 no surrogate, and JSON reads two escaped surrogates back as one character;
- a probe that ran has a ``verdict``, and reads back with every figure of it (None where it had none); a probe without
  a verdict (skipped: its candidate could not be probed) reads back with ``candidate``, ``reference``, ``side`` and
  ``skipped`` only, as the document writes it.

Anything else that does not fit (a field of the wrong type, a text longer than its column, a value that is not JSON)
is a :class:`ValueError` naming the field and the value, raised before anything is written.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from hwregress.store.times import utc

RUNNING = "running"  # the status of a bisection that has not finished (or never will: killed)
ID_LENGTH = 36  # characters of a bisection's id (tables.bisections.id): a UUID as text
_LIMITS = {"hostname": 300, "kind": 16, "status": 64, "side": 16, "verdict": 32}  # the String columns' lengths
_INT32 = 2**31 - 1  # PostgreSQL's integer: exit codes, probe numbers and pairs beyond it are no such figure
OUTCOME = ("verdict", "ratio", "ratio_low", "ratio_high", "pairs", "seconds", "details")  # a probe that ran
_FIGURES = ("ratio", "ratio_low", "ratio_high", "seconds")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # NUL and surrogates: no PostgreSQL text or UTF-8 holds them
_SHOWN = 60  # characters of a value a message shows


def bisection_row(bisection_id: str, started_at: _dt.datetime, hostname: str | None, kind: str,
                  candidates: Sequence[str], labels: Sequence[str], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The ``bisections`` row of a bisection as it starts: status :data:`RUNNING`, ``started_at`` aware UTC (a naive
    time is UTC), no document.

    Raises:
        ValueError: an id that is no 1 to 36 printable characters, a time that is no datetime, a hostname or kind not
            text or too long, candidates or labels not lists of texts of the same length, settings no JSON object.
    """
    if not isinstance(started_at, _dt.datetime):
        raise ValueError(f"bisection started_at {_shown(started_at)} is not a datetime")
    return {"id": checked_id(bisection_id), "started_at": utc(started_at),
            "hostname": _text(hostname, "bisection hostname", "hostname", optional=True),
            "kind": _text(kind, "bisection kind", "kind"),
            **_candidates(candidates, labels), "settings": _object(settings, "bisection settings"), "status": RUNNING}


def probe_row(bisection_id: str, number: int, probe: Mapping[str, Any]) -> dict[str, Any]:
    """The ``bisection_probes`` row of probe ``number`` (1 the first) of a bisection, from the probe as the document
    writes it (``candidate``, ``reference``, ``side``, ``skipped``; where it ran ``verdict``, ``ratio``,
    ``ratio_low``, ``ratio_high`` (B/A), ``pairs``, ``seconds`` (s), ``details``), the rules of the module doc applied.

    Raises:
        ValueError: a number that is no whole number from 1 to 2**31 - 1, a probe that is no object, a missing or
            malformed field (a figure not a number or None, pairs not a whole number), figures without a verdict.
    """
    if type(number) is not int or not 1 <= number <= _INT32:
        raise ValueError(f"probe number {_shown(number)} is not a whole number from 1 to {_INT32}")
    where = f"probe {number}"
    if not isinstance(probe, Mapping):
        raise ValueError(f"{where} {_shown(probe)} is not an object")
    row = {"bisection_id": checked_id(bisection_id), "number": number,
           "candidate": _text(probe.get("candidate"), f"{where} candidate"),
           "reference": _text(probe.get("reference"), f"{where} reference"),
           "side": _text(probe.get("side"), f"{where} side", "side"),
           "skipped": _text(probe.get("skipped"), f"{where} skipped", optional=True)}
    ran = any(key in probe for key in OUTCOME)
    if ran and (not isinstance(probe.get("verdict"), str) or not probe["verdict"]):
        raise ValueError(f"{where} verdict {_shown(probe.get('verdict'))}: a probe with figures names its verdict")
    figures = {key: _figure(probe.get(key), f"{where} {key}") for key in _FIGURES}
    return {**row, **figures, "verdict": _text(probe.get("verdict"), f"{where} verdict", "verdict", optional=True),
            "pairs": _integer(probe.get("pairs"), f"{where} pairs", 0),
            "details": storable_json(probe.get("details"), f"{where} details")}


def finished_rows(bisection_id: str, document: Mapping[str, Any],
                  finished_at: _dt.datetime) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What a bisection's end writes: the values of its ``bisections`` row (``status``, ``exit_code``, ``culprit``,
    ``last_good``, ``first_bad``, ``seconds``, the whole ``document`` and ``finished_at``, aware UTC) and the rows of
    every probe of ``document["probes"]``, numbered from 1 in order.

    Raises:
        ValueError: a document that is no object or not JSON, a status not text or too long, an exit code not a whole
            number, bounds not texts, seconds not a number, probes not a list, a malformed probe (:func:`probe_row`).
    """
    checked_id(bisection_id)
    if not isinstance(document, Mapping):
        raise ValueError(f"bisection document {_shown(document)} is not an object")
    if not isinstance(finished_at, _dt.datetime):
        raise ValueError(f"bisection finished_at {_shown(finished_at)} is not a datetime")
    probes = document.get("probes")
    if not isinstance(probes, list):
        raise ValueError(f"document probes {_shown(probes)} is not a list")
    values = {"status": _text(document.get("status"), "document status", "status"),
              "exit_code": _integer(document.get("exit_code"), "document exit_code", -_INT32 - 1),
              **{key: _text(document.get(key), f"document {key}", optional=True)
                 for key in ("culprit", "last_good", "first_bad")},
              "seconds": _figure(document.get("seconds"), "document seconds"),
              "document": _object(document, "bisection document"), "finished_at": utc(finished_at)}
    return values, [probe_row(bisection_id, number, probe) for number, probe in enumerate(probes, start=1)]


def running_document(row: Mapping[str, Any], probes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON document of a bisection that has not finished (killed, or still running) from its ``bisections`` row
    and its probe rows (by number), in the shape of the final one: its status as the row says (:data:`RUNNING`), its
    exit code, bounds and seconds as the row has them (None before the end), every stored probe, and ``skipped``: each
    skipped probe's candidate with why."""
    shown = [probe_document(probe) for probe in sorted(probes, key=lambda probe: probe["number"])]
    return {"status": row["status"], "exit_code": row["exit_code"], "kind": row["kind"],
            "candidates": row["candidates"], "labels": row["labels"], "culprit": row["culprit"],
            "last_good": row["last_good"], "first_bad": row["first_bad"], "probes": shown,
            "skipped": {probe["candidate"]: probe["skipped"] for probe in shown if probe["skipped"] is not None},
            "seconds": row["seconds"], "settings": row["settings"]}


def probe_document(row: Mapping[str, Any]) -> dict[str, Any]:
    """A ``bisection_probes`` row as the document writes the probe: its figures only where it ran (has a verdict)."""
    probe = {key: row[key] for key in ("candidate", "reference", "side", "skipped")}
    return probe if row["verdict"] is None else {**probe, **{key: row[key] for key in OUTCOME}}


def checked_id(bisection_id: Any) -> str:
    """``bisection_id`` where it is 1 to :data:`ID_LENGTH` printable characters, no space at either end.

    Raises:
        ValueError: anything else.
    """
    if (not isinstance(bisection_id, str) or not 1 <= len(bisection_id) <= ID_LENGTH
            or not bisection_id.isprintable() or bisection_id != bisection_id.strip()):
        raise ValueError(f"bisection id {_shown(bisection_id)} is not 1 to {ID_LENGTH} printable characters (a UUID)")
    return bisection_id


def storable_json(value: Any, where: str) -> Any:
    """``value`` as a JSON value both engines store and give back equal: lists for tuples, None for NaN and infinite
    floats, texts (keys too) with U+FFFD for NUL and surrogates, at any depth.

    Raises:
        ValueError: a value that is no JSON (an object, a mapping with a key that is not text), naming where.
    """
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [storable_json(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str):
                raise ValueError(f"{where} has the key {_shown(key)}, not a text (JSON's keys are)")
        return {_UNSTORABLE.sub("\ufffd", key): storable_json(item, f"{where}.{key}") for key, item in value.items()}
    raise ValueError(f"{where} {_shown(value)} is a {type(value).__name__}, not a JSON value")


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} {_shown(value)} is not an object")
    return storable_json(value, where)


def _candidates(candidates: Any, labels: Any) -> dict[str, list[str]]:
    for name, values in (("candidates", candidates), ("labels", labels)):
        if not isinstance(values, (list, tuple)) or not all(isinstance(value, str) for value in values):
            raise ValueError(f"bisection {name} {_shown(values)} is not a list of texts")
    if len(candidates) != len(labels):
        raise ValueError(f"bisection candidates and labels differ in length: {len(candidates)} ids, {len(labels)} "
                         "labels (one label per candidate)")
    return {"candidates": storable_json(candidates, "bisection candidates"),
            "labels": storable_json(labels, "bisection labels")}


def _text(value: Any, where: str, column: str | None = None, optional: bool = False) -> str | None:
    """``value``, a text no longer than ``column``'s length (:data:`_LIMITS`; any length without ``column``), its NUL
    characters and surrogates U+FFFD; None where ``optional`` and None."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{where} {_shown(value)} is not a text")
    limit = _LIMITS[column] if column is not None else None
    if limit is not None and len(value) > limit:
        raise ValueError(f"{where} {_shown(value)} is longer than {limit} characters")
    return _UNSTORABLE.sub("\ufffd", value)


def _figure(value: Any, where: str) -> float | None:
    """``value`` as a float; None where it is None, NaN or infinite."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} {_shown(value)} is not a number or None")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{where} {_shown(value)} is beyond a float's range") from None
    return number if math.isfinite(number) else None


def _integer(value: Any, where: str, low: int) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not low <= value <= _INT32:
        raise ValueError(f"{where} {_shown(value)} is not a whole number from {low} to {_INT32} or None")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}..."

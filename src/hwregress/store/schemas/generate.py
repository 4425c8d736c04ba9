"""The JSON Schemas built from the types: ``results.json``'s record part from the dataclass hints of
:class:`hwregress.store.results.TestRecord` and its sub-records (:mod:`hwregress.store.figures`), descriptions from
each field's ``metadata["doc"]``; the session metadata part (``meta``) is written here by hand, as it has no type.
A history row's (one line of ``<hardware-key>.jsonl``) from :class:`hwregress.store.history_row.HistoryRow`.

The committed ``results.schema.json`` and ``history_row.schema.json`` must equal :func:`results_schema` and
:func:`history_row_schema` (self-tests check it). Regenerate them with::

    python -m hwregress.store.schemas.generate
"""

from __future__ import annotations

import dataclasses
import enum
import json
import typing
from pathlib import Path
from typing import Any, Union

from hwregress.store.figures import Figures
from hwregress.store.history_row import HISTORY_ROW_VERSION, REQUIRED_FIELDS, HistoryRow, field_docs
from hwregress.store.results import RESULTS_SCHEMA_VERSION, TestRecord

SCHEMA_PATH = Path(__file__).with_name("results.schema.json")
HISTORY_ROW_SCHEMA_PATH = Path(__file__).with_name("history_row.schema.json")
REGENERATE = "python -m hwregress.store.schemas.generate"

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}
_UNION_TYPE = type(int | None)

_TRENDS = {"type": "object", "required": ["test_id", "hardware_key", "status", "summary", "sessions"],
           "properties": {"test_id": {"type": "string"}, "hardware_key": {"type": "string"},
                          "status": {"enum": ["regression", "drift", "improvement", "accepted", "steady", "short"]},
                          "summary": {"type": "string"}, "sessions": {"type": "integer", "minimum": 1},
                          "change_points": {"type": "integer", "minimum": 0}}}
META_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "hostname": {"type": "string"},
        "session": {"description": "the session's id (host-pid-start), as in its history rows and archive names",
                    "type": "string"},
        "started_at": {"type": "string"}, "finished_at": {"type": "string"},
        "duration_s": {"type": "number", "minimum": 0}, "exitstatus": {"type": "integer"},
        "interrupted": {"type": "boolean"}, "args": {"type": "array", "items": {"type": "string"}},
        "workers": {"type": "integer", "minimum": 0}, "python": {"type": "string"}, "platform": {"type": "string"},
        "hardware": {"type": "array", "items": {"type": "object", "required": ["device"]}},
        "baseline_dir": {"type": "string"}, "update_mode": {"type": ["string", "null"]},
        "tolerances": {"type": "object"}, "pid": {"type": "integer"},
        "store_push": {"description": "\"failed\" when the session's push to its fleet store failed under "
                                      "--require-store (its exitstatus then says 1); absent otherwise",
                       "enum": ["failed"]},
        "machine_id": {"description": "machine-id(5) of the host (null where none): the store's host id of a "
                                      "machine without GPUs", "type": ["string", "null"]},
        "provenance": {"description": "the commit and branch the session ran (the CI's variables, else git in the "
                                      "rootdir) and the CI build's URL; null where unknown",
                       "type": "object",
                       "properties": {key: {"type": ["string", "null"]}
                                      for key in ("git_sha", "git_branch", "ci_build_url")}},
        "history": {"description": "the trends of this session's tests, from its history folder and its fleet store "
                                   "(absent with neither, or when nothing was measured)",
                    "type": "object", "required": ["trends"],
                    "properties": {"dir": {"description": "the history folder the session was appended to",
                                           "type": "string"},
                                   "sources": {"description": "what the trends were read from: the history folder, "
                                                              "the store's URL (password masked)",
                                               "type": "array", "items": {"type": "string"}},
                                   "warnings": {"type": "array", "items": {"type": "string"}},
                                   "trends": {"type": "array", "items": _TRENDS}}},
        "ab": {"description": "an interleaved A/B session's stacks as given (--ab-python, --ab-env), its threshold "
                              "(fraction), planned looks (pair counts) and order seed (absent outside one)",
               "type": "object", "required": ["stacks", "threshold", "looks", "seed"],
               "properties": {"stacks": {"type": "object"}, "threshold": {"type": "number"},
                              "looks": {"type": "array", "items": {"type": "integer"}},
                              "seed": {"type": "integer"}}},
    },
}
"""The session metadata (``SessionResults.meta``): written by hand, it is an open mapping in the code."""


def results_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``results.json`` of this version: ``schema_version``, ``meta`` and the
    records, each :class:`TestRecord` (``$defs/record``) with its sub-records (``$defs/<class name>``)."""
    defs: dict[str, Any] = {}
    record = dataclass_schema(TestRecord, defs)
    record["required"] = ["test_id", "verdict"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://hwregress.dev/schemas/results-{RESULTS_SCHEMA_VERSION}.schema.json",
        "title": f"hwregress results.json, schema version {RESULTS_SCHEMA_VERSION}",
        "description": "One pytest session of hwregress: metadata and one record per hardware test. Format history: "
                       "see hwregress.store.results. Generated from the types: " + REGENERATE,
        "type": "object",
        "required": ["schema_version", "meta", "records"],
        "properties": {"schema_version": {"const": RESULTS_SCHEMA_VERSION}, "meta": META_SCHEMA,
                       "records": {"type": "array", "items": {"$ref": "#/$defs/record"}}},
        "$defs": {"record": record, **dict(sorted(defs.items()))},
    }


_ROW_VALUE_RULES: dict[str, dict[str, Any]] = {
    "v": {"const": HISTORY_ROW_VERSION}, "time": {"format": "date-time"}, "median": {"exclusiveMinimum": 0}}
"""What the reader checks of a history row beyond the types (hwregress.store.history._parse_row)."""


def history_row_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one history row: one property per field of
    :class:`~hwregress.store.history_row.HistoryRow` with its type and description; other properties allowed (the
    reader ignores fields it does not know)."""
    docs = field_docs()
    properties = {}
    for name, hint in typing.get_type_hints(HistoryRow).items():
        properties[name] = {**type_schema(hint, {}), **_ROW_VALUE_RULES.get(name, {}), "description": docs[name]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://hwregress.dev/schemas/history-row-{HISTORY_ROW_VERSION}.schema.json",
        "title": f"hwregress history row (one line of <hardware-key>.jsonl), row version {HISTORY_ROW_VERSION}",
        "description": "One measured test of one session, appended by the session (hwregress.store.history). "
                       "Generated from the types: " + REGENERATE,
        "type": "object",
        "required": [name for name in properties if name in REQUIRED_FIELDS],
        "properties": properties,
    }


def dataclass_schema(kind: type, defs: dict[str, Any]) -> dict[str, Any]:
    """The object schema of a dataclass: one property per field (its type, its ``doc`` as description and any
    ``metadata["schema"]`` keywords), no other properties; sub-records it names are added to ``defs``."""
    hints = typing.get_type_hints(kind)
    properties = {}
    for item in dataclasses.fields(kind):
        schema = type_schema(hints[item.name], defs)
        schema.update(item.metadata.get("schema") or {})
        if item.metadata.get("doc"):
            schema["description"] = item.metadata["doc"]
        properties[item.name] = schema
    out: dict[str, Any] = {"type": "object"}
    if kind.__doc__ and issubclass(kind, Figures):
        out["description"] = " ".join(kind.__doc__.split())
    return {**out, "properties": properties, "additionalProperties": False}


def type_schema(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of one type hint: str/int/float/bool, an Enum (its values), ``list[X]``, ``dict[str, X]``,
    ``X | None``, ``Any`` and sub-records (a ``$ref`` into ``defs``).

    Raises:
        TypeError: a hint without a JSON spelling (name it in this function to add one).
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return {}
    if origin in (Union, _UNION_TYPE):
        return _nullable([a for a in args if a is not type(None)], defs)
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [member.value for member in hint]}
    if isinstance(hint, type) and issubclass(hint, Figures):
        name = _def_name(hint)
        if name not in defs:
            defs[name] = {}  # taken before recursing: a sub-record that names itself would not end
            defs[name] = dataclass_schema(hint, defs)
        return {"$ref": f"#/$defs/{name}"}
    if origin is list:
        items = type_schema(args[0], defs)
        return {"type": "array", "items": items} if items else {"type": "array"}
    if origin is dict:
        values = type_schema(args[1], defs)
        return {"type": "object", "additionalProperties": values} if values else {"type": "object"}
    raise TypeError(f"no JSON Schema for the type hint {hint!r}; teach hwregress.store.schemas.generate.type_schema")


def _nullable(options: list[Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``X | None``: ``type: [x, "null"]`` where X is one plain type, else ``anyOf`` X and null."""
    schemas = [type_schema(option, defs) for option in options]
    if len(schemas) == 1 and set(schemas[0]) == {"type"} and isinstance(schemas[0]["type"], str):
        return {"type": [schemas[0]["type"], "null"]}
    return {"anyOf": [*schemas, {"type": "null"}]}


def _def_name(kind: type) -> str:
    """``ScalingFigures`` -> ``scaling_figures``."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in kind.__name__).lstrip("_")


def schema_text(schema: dict[str, Any] | None = None) -> str:
    """A schema (:func:`results_schema` by default) as the committed file's text (indent 1, a final newline)."""
    return json.dumps(results_schema() if schema is None else schema, indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    for path, generated in ((SCHEMA_PATH, results_schema()), (HISTORY_ROW_SCHEMA_PATH, history_row_schema())):
        path.write_text(schema_text(generated), encoding="utf-8")
        print(f"wrote {path}")

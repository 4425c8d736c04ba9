"""The history row's shipped JSON Schema and values of the wrong type for any field of it, generated from the schema:
for the row reader's self-tests (tests/store/test_history_rows.py) and the history command's
(tests/cli/test_history_cli.py)."""

from __future__ import annotations

from typing import Any

from hwregress.store import schemas

ROW_SCHEMA = schemas.schema("history_row")
# one value of each JSON type; "integer" is also a "number"
JSON_SAMPLES: dict[str, Any] = {"string": "x", "integer": 7, "number": 2.5, "boolean": True, "null": None,
                                "array": [], "object": {}}


def allowed_types(schema: dict[str, Any]) -> set[str]:
    kinds = schema.get("type", list(JSON_SAMPLES))
    kinds = {kinds} if isinstance(kinds, str) else set(kinds)
    return kinds | {"integer"} if "number" in kinds else kinds


def wrong_values(schema: dict[str, Any]) -> list[Any]:
    """Values that break ``schema``'s type: a sample of every JSON type it does not allow, and for a typed array or
    object one holding an item of a type its items do not allow."""
    allowed = allowed_types(schema)
    wrong = [sample for kind, sample in JSON_SAMPLES.items() if kind not in allowed]
    inner = schema.get("items") or schema.get("additionalProperties")
    if isinstance(inner, dict) and "type" in inner:
        bad_item = next(sample for kind, sample in JSON_SAMPLES.items() if kind not in allowed_types(inner))
        wrong.append([bad_item] if "items" in schema else {"key": bad_item})
    return wrong

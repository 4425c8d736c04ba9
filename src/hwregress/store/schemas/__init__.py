"""The JSON Schemas (draft 2020-12) of hwregress's files, shipped as package data: ``results.schema.json``
(``reports/results.json``), ``baselines.schema.json`` (``baselines/<hardware_key>.json``) and
``history_row.schema.json`` (one line of ``reports/history/<hardware_key>.jsonl``). Validate with any
JSON Schema validator, e.g. ``jsonschema.validate(data, hwregress.store.schemas.schema("results"))``."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

NAMES = ("results", "baselines", "history_row")


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema named ``name`` (one of :data:`NAMES`) as a dict.

    Raises:
        ValueError: an unknown name.
    """
    if name not in NAMES:
        raise ValueError(f"unknown schema {name!r}; one of {', '.join(NAMES)}")
    text = resources.files(__package__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)

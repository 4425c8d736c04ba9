"""Defensive reads of a record's figures for the report's views: a results file may come from another version,
a failed test or a hand edit, so every value is checked before it is shown or drawn."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

NUMBER_LIMIT = 10**300  # an int figure beyond this is not a measurement; it counts as not recorded


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def number(value: Any) -> int | float | None:
    """``value`` if it is a finite real number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return value if abs(value) <= NUMBER_LIMIT else None  # beyond it float() overflows
    return value if math.isfinite(value) else None


def text(value: Any) -> str | None:
    """``value`` as text; None stays None."""
    return None if value is None else str(value)


def sort_key(value: Any) -> tuple[int, float, str]:
    """A sort key for mixed values: numbers first by value, then anything else by its text."""
    found = number(value)
    return (0, float(found), "") if found is not None else (1, 0.0, "" if value is None else str(value))

"""Whether JSON values fit the type hints of a dataclass (a :class:`hwregress.store.results.TestRecord`, a sub-record
of :mod:`hwregress.store.figures`), field by field, naming the first that does not: how a results file, a journal
line or a pushed document is checked before a record is built from it."""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Union

from hwregress.store.figures import Figures

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(kind: type) -> dict[str, Any]:
    if kind not in _HINTS:
        hints = typing.get_type_hints(kind)
        hints.pop("__test__", None)
        _HINTS[kind] = hints
    return _HINTS[kind]


def type_problem(values: Mapping[str, Any], kind: type, prefix: str = "") -> str | None:
    """The first field of ``values`` whose value does not have the type ``kind`` declares for it, as ``"'throughput'
    must be float | None, found 'fast'"`` (a sub-record's field by its path, after ``prefix``); None when all do.
    Unknown keys are ignored."""
    hints = _hints(kind)
    for name, value in values.items():
        hint = hints.get(name)
        if hint is None:
            continue
        nested = _sub_record(hint)
        if nested is not None and isinstance(value, (Mapping, nested)):
            inner = type_problem(value if isinstance(value, Mapping) else vars(value), nested, f"{prefix}{name}.")
            if inner is not None:
                return inner
        elif not _conforms(value, hint):
            return f"'{prefix}{name}' must be {_hint_name(hint)}, found {json.dumps(value, default=str)[:40]}"
    return None


def _sub_record(hint: Any) -> type[Figures] | None:
    """The sub-record class of ``X | None`` (or ``X``), None for any other hint."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else (hint,)
    return next((o for o in options if isinstance(o, type) and issubclass(o, Figures)), None)


def _conforms(value: Any, hint: Any, depth: int = 0) -> bool:
    """Whether a JSON value fits a type hint (one level into lists and dicts; floats may be NaN: a
    journal keeps what the session measured; an int may be written as an integral float, ``1073741824.0``: JSON has
    one kind of number, and other writers of a results file do so). A sub-record in a list is checked field by
    field."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and issubclass(hint, Figures):
        return isinstance(value, hint) or (isinstance(value, Mapping) and type_problem(value, hint) is None)
    if hint is Any or depth > 1:
        return True
    if origin in (Union, types.UnionType):
        return any(_conforms(value, arg, depth) for arg in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        integral = isinstance(value, float) and math.isfinite(value) and value.is_integer()
        return (isinstance(value, int) and not isinstance(value, bool)) or integral
    if origin is list:
        return isinstance(value, list) and all(_conforms(item, args[0], depth + 1) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(_conforms(item, args[1], depth + 1) for item in value.values())
    if isinstance(hint, type):
        return isinstance(value, str) if issubclass(hint, str) else isinstance(value, hint)
    return True


def _hint_name(hint: Any) -> str:
    return str(hint).replace("typing.", "") if not isinstance(hint, type) else hint.__name__

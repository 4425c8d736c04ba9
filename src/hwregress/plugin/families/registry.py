"""The registry of test families (:class:`hwregress.plugin.families.protocol.Family`): the built-in ones in a fixed
order, then those a project adds, in the order they register.

A family of your own is one module that builds a family object; hand it to the suite either way:

1. **An installed package with an entry point** (loaded by the plugin at ``pytest_configure``, like pytest's
   ``pytest11``)::

       [project.entry-points."hwregress.families"]
       echo = "my_package.echo_family:FAMILY"   # a family object: registered
       more = "my_package.more_families"        # a module: importing it registers (calls register)

2. **A module that calls** :func:`register` when pytest imports it: a plugin named with ``-p my_module``, or one in
   the root ``conftest.py``'s ``pytest_plugins``. Later than ``pytest_configure`` is too late for its marker.

The plugin then parametrizes every test carrying the family's marker over :func:`cases` and runs
``hwbench.measure(name, **case)`` through :func:`get`. ``tests/plugin/test_families.py`` registers one from a test
project.
"""

from __future__ import annotations

import importlib.metadata
import re
import types
from typing import Any

import pytest

from hwregress.plugin.families import (
    ceiling,
    colocated,
    output_parity,
    parity,
    scaling,
    serving,
    spark,
    speedup,
    throughput,
)
from hwregress.plugin.families.protocol import Family, FamilyTraits, missing_members, traits_of
from hwregress.plugin.matrix import Selection
from hwregress.report.family_views import record_views

ENTRY_POINT_GROUP = "hwregress.families"
BUILT_IN = (throughput.FAMILY, parity.FAMILY, output_parity.FAMILY, speedup.FAMILY, ceiling.FAMILY, scaling.FAMILY,
            colocated.FAMILY, spark.FAMILY, serving.FAMILY)
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # one part of a baseline key (family/model/mode/bs/dtype)

_REGISTERED: dict[str, Family] = {}
_LOADED: set[tuple[str, str, str]] = set()  # (distribution, name, value) of the entry points loaded in this process


class FamilyError(ValueError):
    """A family that cannot be registered or found, or an entry point that does not load; the message says which,
    why, and the fix."""


def register(family: Family, *, replace: bool = False) -> Family:
    """Add ``family`` to the registry, after those registered before it; returns it (a module may write
    ``FAMILY = register(Echo())``). Registering the very same object again changes nothing.

    Raises:
        FamilyError: ``family`` lacks a member of the protocol, its name is not one part of a baseline key, its marker
            is not a Python name, its name is taken (unless ``replace``: the new object takes the old one's place), or
            another family has its marker and the same ``requires`` (no test could tell them apart), or a trait it
            declares is of the wrong type (:func:`hwregress.plugin.families.protocol.traits_of`), or its view is none
            the report reads (:func:`hwregress.report.family_views.record_views`).
    """
    missing = missing_members(family)
    if missing:
        raise FamilyError(f"{family!r} is not a test family: it lacks {', '.join(missing)} (see "
                          "hwregress.plugin.families.protocol.Family)")
    try:
        traits_of(family)
    except TypeError as error:
        raise FamilyError(str(error)) from None
    where = f"test family {family.name!r} ({type(family).__module__}.{type(family).__qualname__})"
    if not isinstance(family.name, str) or not NAME.fullmatch(family.name):
        raise FamilyError(f"{where}: the name must be letters, digits, '_', '.' or '-' (it starts baseline keys)")
    if not isinstance(family.marker, str) or not family.marker.isidentifier():
        raise FamilyError(f"{where}: marker {family.marker!r} is not a Python name (@pytest.mark.<marker>)")
    if family.view is not None and family.view not in record_views():
        raise FamilyError(f"{where}: view {family.view!r} is no view the report reads; use one of "
                          f"{', '.join(sorted(record_views()))}, or None for the generic tables only")
    taken = _REGISTERED.get(family.name)
    if taken is family:
        return family
    if taken is not None and not replace:
        raise FamilyError(f"{where} is already registered by {type(taken).__module__}; give the family another name, "
                          "or pass replace=True to override it")
    twin = next((f for f in _REGISTERED.values() if f.name != family.name and f.marker == family.marker
                 and frozenset(f.requires) == frozenset(family.requires)), None)
    if twin is not None:
        raise FamilyError(f"{where}: marker {family.marker!r} with the fixtures {sorted(family.requires)} already "
                          f"selects family {twin.name!r}; use a marker of its own")
    _REGISTERED[family.name] = family
    return family


def names() -> list[str]:
    """The registered families' names, built-ins first, then in registration order."""
    return list(_REGISTERED)


def families() -> list[Family]:
    """The registered families, in :func:`names` order."""
    return list(_REGISTERED.values())


def get(name: str) -> Family:
    """The family called ``name``.

    Raises:
        FamilyError: no family of that name; the message lists the registered ones.
    """
    try:
        return _REGISTERED[name]
    except KeyError:
        raise FamilyError(f"unknown test family {name!r}; registered: {', '.join(names())} (add one with "
                          f"hwregress.plugin.families.registry.register or the entry point group "
                          f"{ENTRY_POINT_GROUP})") from None


def traits(name: str | None) -> FamilyTraits:
    """What family ``name`` declares for the judge, the fleet check and the workers
    (:class:`hwregress.plugin.families.protocol.FamilyTraits`); a name no family is registered under (None, a record
    of a family this process does not have) declares nothing."""
    family = _REGISTERED.get(name or "")
    return traits_of(family) if family is not None else FamilyTraits()


def cases(selection: Selection, name: str) -> list[dict[str, Any]]:
    """The parameter sets of family ``name`` in ``selection`` (:meth:`Family.cases`).

    Raises:
        FamilyError: unknown family.
    """
    return get(name).cases(selection)


def markers() -> dict[str, str]:
    """marker -> its help line, of every registered family, in :func:`names` order (a shared marker once)."""
    found: dict[str, str] = {}
    for family in families():
        found.setdefault(family.marker, family.marker_help)
    return found


def family_of(item: pytest.Item) -> str | None:
    """The family of a hardware test (an item or a function definition): the first registered marker it carries,
    and of the families with that marker the one whose ``requires`` it meets with the most fixtures; None: it
    carries none."""
    fixtures = set(getattr(item, "fixturenames", ()))
    for marker in markers():
        if item.get_closest_marker(marker) is None:
            continue
        claiming = [f for f in families() if f.marker == marker and set(f.requires) <= fixtures]
        if claiming:
            return max(claiming, key=lambda f: len(f.requires)).name
    return None


def load_entry_points() -> list[str]:
    """Register the families of the installed entry points of :data:`ENTRY_POINT_GROUP` (see the module docstring);
    each entry point at most once per process.

    Returns:
        The registered families' names (:func:`names`).

    Raises:
        FamilyError: an entry point failed to import, or names neither a family nor a module, or its family cannot
            be registered; the message names the entry point, its distribution and the fix.
    """
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(entry_point, "dist", None)
        key = (dist.name if dist is not None else "", entry_point.name, entry_point.value)
        if key in _LOADED:
            continue
        source = (f"test family entry point {entry_point.name!r} (= {entry_point.value!r}) of "
                  f"{f'{dist.name} {dist.version}' if dist is not None else 'an unknown distribution'}")
        try:
            loaded = entry_point.load()
            if not isinstance(loaded, types.ModuleType):
                register(loaded)
        except Exception as error:
            lines = str(error).strip().splitlines()
            raise FamilyError(f"{source} failed to load: {type(error).__name__}: {lines[0] if lines else ''}; fix or "
                              f"uninstall {dist.name if dist is not None else 'the package that declares it'}"
                              ) from error
        _LOADED.add(key)
    return names()


for _family in BUILT_IN:
    register(_family)

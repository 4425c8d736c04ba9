"""Workload plugins: let a team add its models to the registry without editing the suite.

A plugin is any importable Python module that calls :func:`hwregress.workloads.register` when it is
imported (or exposes a function that does). There are two ways to hand one to the suite:

1. **An installed package with an entry point** (found automatically, like pytest's ``pytest11``).
   In the package's ``pyproject.toml``::

       [project.entry-points."hwregress.workloads"]
       my_models = "my_package.workloads"            # a module: importing it registers
       more_models = "my_package.zoo:register_all"   # or a callable: called with no arguments, it registers

   and in ``my_package/workloads.py``::

       from torch import nn
       from hwregress.workloads import Workload, register

       def build() -> nn.Module:
           return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))

       register(Workload(name="my_mlp", build=build, input_shape=(3, 32, 32), num_classes=10), replace=True)

   After ``pip install -e path/to/my_package`` the models are selectable with ``--models my_mlp``.
   :func:`load_entry_points` loads every entry point of the group :data:`ENTRY_POINT_GROUP`.

2. **A module named on the command line or in the ini file** (no installation; the module's folder must be
   on ``sys.path``, e.g. through ``PYTHONPATH``): ``--workloads my_package.workloads[,other_module]``.
   :func:`import_modules` imports them.

Pass ``replace=True`` to ``register`` in a plugin so that importing it twice (e.g. by entry point and by
``--workloads``) does not fail; leave it False to be told when a plugin collides with a built-in name.
See ``examples/custom_workload/`` for an installable example.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import types
from collections.abc import Sequence

from hwregress import workloads

ENTRY_POINT_GROUP = "hwregress.workloads"

# (distribution name, entry point name, entry point value) -> entry point name, for entry points already loaded
_LOADED: dict[tuple[str, str, str], str] = {}


class WorkloadPluginError(ValueError):
    """A workload plugin (entry point or ``--workloads`` module) could not be loaded; the message says which,
    why, and how to fix it."""


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _distribution_of(entry_point: importlib.metadata.EntryPoint) -> tuple[str, str]:
    """(name, "name version") of the distribution that declares ``entry_point``; ("", "an unknown distribution")
    when the entry point does not say."""
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return "", "an unknown distribution"
    return dist.name, f"{dist.name} {dist.version}"


def _load_entry_point(entry_point: importlib.metadata.EntryPoint) -> None:
    """Import the entry point's module or object; call it if it is a callable rather than a module.

    Raises:
        WorkloadPluginError: the import or the call raised, or the object is neither a module nor callable.
    """
    dist_name, dist_label = _distribution_of(entry_point)
    try:
        loaded = entry_point.load()
        if isinstance(loaded, types.ModuleType):
            return
        if not callable(loaded):
            raise TypeError(f"it names a {type(loaded).__name__}, not a module or a callable")
        loaded()
    except Exception as error:
        package = f"the package ({dist_name})" if dist_name else "the package that declares it"
        raise WorkloadPluginError(
            f"workload plugin entry point {entry_point.name!r} (= {entry_point.value!r}) of {dist_label} failed to "
            f"load: {_first_line(error)}; fix or uninstall {package}") from error


def load_entry_points() -> list[str]:
    """Load every entry point of the group ``hwregress.workloads`` (see the module docstring for the format).

    An entry point naming a module is imported (the module registers on import); one naming a callable
    (``module:function``) is imported and called with no arguments. Each entry point is loaded at most once
    per process: a second call loads only entry points not seen before (e.g. after ``sys.path`` grew).

    Returns:
        The names of all entry points of the group loaded in this process so far, in load order.

    Raises:
        WorkloadPluginError: an entry point failed to import, raised when called, or names neither a module
            nor a callable; the message names the entry point, its distribution and version, the error's
            first line and the fix. Entry points loaded before the failing one stay loaded.
    """
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        key = (_distribution_of(entry_point)[0], entry_point.name, entry_point.value)
        if key in _LOADED:
            continue
        _load_entry_point(entry_point)
        _LOADED[key] = entry_point.name
    return list(_LOADED.values())


def _is_missing(module_name: str, error: ModuleNotFoundError) -> bool:
    """Whether ``error`` says ``module_name`` itself (or a parent package of it) is not importable, as opposed
    to a dependency that the module imports."""
    return error.name is not None and (module_name == error.name or module_name.startswith(f"{error.name}."))


def _import_one(module_name: str, source: str) -> None:
    """Import ``module_name`` for ``source``.

    Raises:
        WorkloadPluginError: the module is not found or raised while importing.
    """
    try:
        importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if not _is_missing(module_name, error):
            raise WorkloadPluginError(
                f"workload module {module_name!r} (from {source}) failed to import: {_first_line(error)}; "
                f"install the missing dependency or fix the module") from error
        raise WorkloadPluginError(
            f"workload module {module_name!r} (from {source}) cannot be imported: {_first_line(error)}; "
            f"install the package that provides it, or put its folder on PYTHONPATH") from error
    except Exception as error:
        raise WorkloadPluginError(
            f"workload module {module_name!r} (from {source}) raised while importing: {_first_line(error)}; "
            f"fix the module") from error


def import_modules(names: Sequence[str], source: str) -> list[str]:
    """Import the workload modules ``names`` (dotted module names, e.g. from ``--workloads a,b.c``).

    Each module registers its workloads when imported. A module already imported is not run again, so it adds
    nothing the second time. Blank names (from ``"a,,b"`` or surrounding spaces) are skipped.

    Args:
        names: module names, imported in order.
        source: where the names came from, for error messages, e.g. ``"--workloads"`` or
            ``"ini option hwregress_workloads"``.

    Returns:
        The workload names that the imports registered: new names, and names whose registered workload was
        replaced, in registry order.

    Raises:
        WorkloadPluginError: a module cannot be found or raised while importing; the message names the module,
            ``source``, the error and the fix. Modules imported before the failing one stay registered.
    """
    before = {name: workloads.get(name) for name in workloads.names()}
    for module_name in (name.strip() for name in names):
        if module_name:
            _import_one(module_name, source)
    return [name for name in workloads.names() if before.get(name) is not workloads.get(name)]

"""The house rules of the package layout (issue 22), checked over the import graph that every ``import`` statement of
``src/hwregress`` draws: module level, inside functions and under ``TYPE_CHECKING`` alike, so that a lazy import
cannot hide a circle or a heavy dependency.

- no import circles;
- each room imports only the rooms below it (:data:`MAY_IMPORT`) and the floor (:data:`FLOOR`: modules that
  import nothing of hwregress, which every room may import);
- ``judge/``, ``store/``, ``report/``, ``cli/`` and ``serving/`` reach neither torch nor pytest, however indirectly (a
  server under load runs in a process of its own);
- only ``plugin/`` and the shipped suite import pytest;
- no room below ``plugin/`` tells records apart by their family's name (a family declares what the judge needs to
  know: :class:`hwregress.plugin.families.protocol.FamilyTraits`, and the report view of its records);
- a room's ``__init__`` imports nothing (``workloads`` and the hook modules ``plugin``, ``report``, ``cli`` aside), so
  reading one torch-free module never loads a torch-using sibling;
- a record's fields are written only by its assembler (:data:`RECORD_ASSEMBLER`): the families, the judge and the
  plugin build frozen stages and hand them to it; every other write of an attribute of a record field's name (an
  assignment, ``setattr``, a mutation such as ``.update`` or ``[key] =``) outside a class's own ``self`` is one of
  :data:`NOT_RECORDS`;
- a record's verdict is set in one function (:data:`VERDICT_SETTER`): the judge and the A/B family return what they
  concluded, the plugin settles the verdict with pytest's outcome of the test; the other ``.verdict`` assignments
  are :data:`VERDICT_BUILDERS`, the builders of values that are not records;
- no module is longer than :data:`MAX_LINES`;
- docs/development.md's Layout section describes every room and names only modules that exist; its "One record's way"
  names only modules, classes, functions and methods that exist;
- a name is imported from the module that defines it, never through another module's import of it (no
  compatibility re-exports), in ``src/``, ``tests/`` and ``scripts/`` alike; :data:`FACES` aside;
- ``python -m hwregress baselines``/``history``/``report`` never import torch (a subprocess, ``sys.modules`` at exit);
- the self-tests mirror the rooms: every ``test_*.py`` lies in ``tests/<room>/`` for a room of ``src/hwregress`` or in
  ``tests/project/`` (the project as a whole), none in ``tests/`` itself, each under a name of its own; a test file
  imports another test file only from its own folder (what two folders share lives in ``tests/support/``).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from support.project import REPO

from hwregress.store.results import TestRecord

SRC = REPO / "src"
PACKAGE = SRC / "hwregress"
MAX_LINES = 400
HEAVY = {"torch", "torchvision", "transformers", "torchao", "pytest", "_pytest", "xdist", "pytest_benchmark", "pyspark"}
TORCH_FREE_ROOMS = ("judge", "store", "report", "cli", "serving")
PYTEST_ROOMS = ("plugin", "suite")
# the floor: single modules of hwregress that import nothing of it, so that every room may import them
FLOOR = ("summary", "process_group")
# room -> the rooms (or single modules, as dotted names under hwregress) it may import besides itself and the floor
MAY_IMPORT: dict[str, set[str]] = {
    "summary": set(),
    "process_group": set(),
    "process_keeper": set(),
    "store": set(),
    "judge": {"store", "hardware.facts", "hardware.roofline", "hardware.health"},
    "hardware": set(),
    "workloads": {"hardware"},
    "measure": {"hardware", "workloads", "store"},
    "scaleout": {"measure", "hardware", "workloads", "judge.window_verdict", "store"},
    "spark": {"measure", "hardware", "workloads", "store"},
    "check": {"measure", "hardware", "workloads", "store"},
    "ab": {"judge", "measure", "hardware", "workloads", "store"},
    "bisect": {"ab.session", "ab.pairs", "store", "process_keeper"},
    "serving": {"judge", "hardware.facts", "process_keeper"},
    "report": {"store", "judge", "hardware.roofline"},
    "cli": {"report", "store", "judge", "bisect"},
    "plugin": {"report", "store", "judge", "measure", "hardware", "workloads", "scaleout", "spark", "ab", "serving"},
    "suite": {"plugin", "store", "measure", "hardware", "workloads", "judge"},
}
# the rooms below plugin/ that may still test a family's name: none (the report's views pick their records by the view
# a family declares, TestRecord.view)
FAMILY_NAMES_ALLOWED: set[str] = set()
# the one function that sets a test record's verdict (issue 40), and the assignments to a ``verdict`` attribute that
# build other values: (module, function, the assigned object's name)
VERDICT_SETTER = ("hwregress.store.assembly", "put_outcome", "record")
VERDICT_BUILDERS = {("hwregress.judge.compare", "judge", "judgement"),  # the judge's _Judging, frozen by done()
                    ("hwregress.judge.compare", "_judge_throughput", "judgement"),
                    ("hwregress.judge.compare", "_judge_environment", "judgement"),
                    ("hwregress.judge.session", "_day_one_throughput", "concluding"),  # the session's _Concluding
                    ("hwregress.judge.session", "_day_one_memory", "concluding"),
                    ("hwregress.judge.session", "_update_baseline", "concluding"),
                    ("hwregress.judge.session_compare", "compare_records", "row"),  # a row of two sessions' table
                    ("hwregress.plugin.record", "__init__", "self")}  # HwSkip: the verdict a skip carries
# the module that writes a test record's fields (issue 40), and the other objects whose attributes share a record
# field's name: (module, the written object's expression)
RECORD_ASSEMBLER = "hwregress.store.assembly"
NOT_RECORDS = {("hwregress.judge.compare", "judgement"),  # the judge's _Judging, frozen by done()
               ("hwregress.judge.session", "concluding"),  # the session's _Concluding, likewise
               ("hwregress.judge.session_compare", "row"),  # a row of two sessions' table
               ("hwregress.measure.window", "measurement"),  # a window's Measurement, before it is returned
               ("hwregress.measure.llm.window", "measurement"),
               ("hwregress.measure.profiling", "result"),  # the profiler's operator tables
               ("hwregress.measure.precision.torchao_calls", "inductor_config"),  # torch._inductor.config
               ("hwregress.store.baselines", "current"),  # a baseline entry
               ("hwregress.plugin.record", "report")}  # pytest's report: setattr of the record's JSON
INIT_MAY_IMPORT = {"hwregress.workloads", "hwregress.plugin", "hwregress.report", "hwregress.cli"}
# modules whose documented purpose is to hand on names defined elsewhere: the workloads API a plugin imports
FACES = {"hwregress.workloads"}
TESTS = REPO / "tests"
# the folder of tests/ for the tests of the project as a whole (layout, docs, packaging, scripts/), beside the rooms'
WHOLE = "project"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str) -> str:
    """The module of hwregress that ``name`` (a module, or a name inside one) lies in."""
    while name not in modules() and "." in name:
        name = name.rpartition(".")[0]
    return name


def imports_of(name: str, source: str, is_package: bool = False) -> list[str]:
    """Every module name ``source`` imports, wherever the statement stands (module level, function, class,
    ``if TYPE_CHECKING``); ``from a import b`` gives ``a.b``, relative imports resolved against ``name``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found += [f"{base}.{alias.name}" for alias in node.names] if base.startswith("hwregress") else [base]
    return found


@cache
def graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> hwregress modules it imports, module -> top-level external packages it imports)."""
    internal: dict[str, set[str]] = defaultdict(set)
    external: dict[str, set[str]] = defaultdict(set)
    for name, path in modules().items():
        for target in imports_of(name, path.read_text(encoding="utf-8"), path.name == "__init__.py"):
            if target == "hwregress" or target.startswith("hwregress."):
                found = _resolve(target)
                if found != name:
                    internal[name].add(found)
            elif target != "__future__":
                external[name].add(target.split(".")[0])
    return internal, external


def room(module: str) -> str | None:
    """The room of ``module``: its folder under hwregress, or the floor module it is; None for the package root
    and its other single modules (``__main__``)."""
    parts = module.split(".")
    if len(parts) > 1 and ((PACKAGE / parts[1]).is_dir() or parts[1] in FLOOR):
        return parts[1]
    return None


def closure(module: str) -> set[str]:
    internal, _ = graph()
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo += internal[current]
    return seen


def cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    internal, _ = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for neighbour in internal[node]:
            if neighbour not in index:
                visit(neighbour)
                low[node] = min(low[node], low[neighbour])
            elif neighbour in stack:
                low[node] = min(low[node], index[neighbour])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(modules()):
        if module not in index:
            visit(module)
    return found


def test_the_graph_is_read_from_every_module():
    internal, external = graph()
    assert len(modules()) > 50
    assert "hwregress.measure.window" in internal["hwregress.plugin.families.model_window"]
    assert "torch" in external["hwregress.measure.window"]


def test_there_are_no_import_circles():
    assert cycles() == []


def test_imports_inside_functions_and_type_checking_blocks_count():
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hwregress.plugin.fixture import HwBench\n"
              "def f():\n    from hwregress.measure import window\n    import torch\n"
              "from . import stats\n")
    assert sorted(imports_of("hwregress.judge.compare", source)) == sorted([
        "typing", "hwregress.plugin.fixture.HwBench", "hwregress.measure.window", "torch", "hwregress.judge.stats"])


def test_a_circle_through_a_lazy_import_is_found(monkeypatch):
    internal, external = graph()
    circled = defaultdict(set, {k: set(v) for k, v in internal.items()})
    circled["hwregress.store.atomic"].add("hwregress.store.baselines")  # as a lazy import in atomic would
    monkeypatch.setattr(sys.modules[__name__], "graph", lambda: (circled, external))
    assert any({"hwregress.store.atomic", "hwregress.store.baselines"} <= set(c) for c in cycles())


def test_each_room_imports_only_the_rooms_below_it():
    internal, _ = graph()
    wrong = []
    for module, targets in internal.items():
        home = room(module)
        if home is None:
            continue
        allowed = MAY_IMPORT[home] | {home} | (set() if home in FLOOR else set(FLOOR))
        for target in targets:
            if target == "hwregress":
                continue  # the package root: __version__
            inside = target.removeprefix("hwregress.")
            if not any(inside == rule or inside.startswith(rule + ".") for rule in allowed):
                wrong.append(f"{module} imports {target}")
    assert wrong == []


@pytest.mark.parametrize("floor", FLOOR)
def test_the_floor_imports_nothing_of_hwregress(floor):
    internal, external = graph()
    module = f"hwregress.{floor}"
    assert module in modules(), f"the floor module {module} is missing"
    assert sorted(internal[module]) == []
    assert external[module] & HEAVY == set()


def test_the_floor_is_a_room_that_imports_nothing():
    assert all(MAY_IMPORT[floor] == set() and room(f"hwregress.{floor}") == floor for floor in FLOOR)


@pytest.mark.parametrize("home", TORCH_FREE_ROOMS)
def test_torch_free_rooms_reach_neither_torch_nor_pytest(home):
    _, external = graph()
    heavy = {}
    for module in modules():
        if room(module) == home:
            reached = {f"{m}: {sorted(external[m] & HEAVY)}" for m in closure(module) if external[m] & HEAVY}
            if reached:
                heavy[module] = sorted(reached)
    assert heavy == {}


def _is_family(node: ast.AST) -> bool:
    """``x.family``, ``family``, ``x.get("family")`` or ``x["family"]``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        node = node.args[0]
        return isinstance(node, ast.Constant) and node.value == "family"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "family"
    return (isinstance(node, ast.Attribute) and node.attr == "family") or (isinstance(node, ast.Name)
                                                                           and node.id == "family")


def _names_a_string(node: ast.AST) -> bool:
    """A string constant, or a tuple, list or set holding one."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_string(element) for element in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def family_name_tests(source: str) -> list[int]:
    """The lines of ``source`` that compare a family with a name written out (``record.family == "ceiling"``,
    ``entry.get("family") in ("spark", ...)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_family(side) for side in sides) and any(_names_a_string(side) for side in sides):
                found.append(node.lineno)
    return found


def test_rooms_below_the_plugin_never_test_a_family_by_its_name():
    below = {home for home, allowed in MAY_IMPORT.items() if home not in PYTEST_ROOMS} - FAMILY_NAMES_ALLOWED
    found = [f"{module}:{line}" for module, path in modules().items() if room(module) in below
             for line in family_name_tests(path.read_text(encoding="utf-8"))]
    assert found == []


@pytest.mark.parametrize(("source", "lines"), [
    ('if record.family == "ceiling":\n    pass', [1]),
    ('x = [e for e in entries if e.get("family") in ("spark", "throughput")]', [1]),
    ('ok = row["family"] != "scaling"', [1]),
    ('ok = record.family == other.family or record.model == "gemm"', []),
    ('ok = (record.family, record.mode) in LEGACY', []),
])
def test_a_family_tested_by_its_name_is_found(source, lines):
    assert family_name_tests(source) == lines


def verdict_assignments(module: str, source: str) -> set[tuple[str, str, str]]:
    """Every assignment to a ``verdict`` attribute in ``source`` (``x.verdict = ...``, ``x.verdict, y = ...``,
    ``setattr(x, "verdict", ...)``), as (module, enclosing function, the assigned object's expression)."""
    found = set()

    def targets(node: ast.AST) -> list[ast.AST]:
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            heads = node.targets if isinstance(node, ast.Assign) else [node.target]
            return [t for head in heads for t in (head.elts if isinstance(head, ast.Tuple) else [head])
                    if isinstance(t, ast.Attribute) and t.attr == "verdict"]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "verdict":
            return [ast.Attribute(value=node.args[0], attr="verdict")]
        return []

    def visit(node: ast.AST, function: str) -> None:
        for target in targets(node):
            found.add((module, function, ast.unparse(target.value)))
        for child in ast.iter_child_nodes(node):
            visit(child, child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function)

    visit(ast.parse(source), "<module>")
    return found


def test_a_records_verdict_is_set_in_one_function():
    found = {site for module, path in modules().items()
             for site in verdict_assignments(module, path.read_text(encoding="utf-8"))}
    assert found - VERDICT_BUILDERS == {VERDICT_SETTER}


@pytest.mark.parametrize(("source", "sites"), [
    ("def finish(record):\n    record.verdict = 1", {("m", "finish", "record")}),
    ("def f(record):\n    record.verdict, record.message = 1, ''", {("m", "f", "record")}),
    ("def g(r):\n    setattr(r, 'verdict', 1)", {("m", "g", "r")}),
    ("class A:\n    def h(self):\n        self.record.verdict = 2", {("m", "h", "self.record")}),
    ("def f(record):\n    record.verdicts = 1\n    x = record.verdict", set()),
])
def test_an_assignment_to_a_verdict_is_found(source, sites):
    assert verdict_assignments("m", source) == sites


RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(TestRecord))
_MUTATORS = frozenset({"update", "append", "extend", "insert", "setdefault", "pop", "popitem", "remove", "clear"})


def record_writes(module: str, source: str) -> set[tuple[str, str]]:
    """Every write in ``source`` of an attribute named as a :class:`~hwregress.store.results.TestRecord` field, on any
    object but ``self``: an assignment (``x.unit = ...``, ``x.a, x.b = ...``, ``x.details[k] = ...``, ``+=``), a
    mutation (``x.details.update(...)``, ``x.samples.append(...)``) and a ``setattr`` of such a name or of a name
    not written out (``setattr(x, name, ...)``); as (module, the written object's expression)."""
    found = set()

    def written(node: ast.AST) -> list[ast.AST]:
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            heads = node.targets if isinstance(node, ast.Assign) else [node.target]
            flat = [t for head in heads for t in (head.elts if isinstance(head, ast.Tuple) else [head])]
            return [t.value if isinstance(t, ast.Subscript) else t for t in flat]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
            return [node.func.value]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and len(node.args) > 1:
            name = node.args[1]
            return [ast.Attribute(value=node.args[0], attr=name.value if isinstance(name, ast.Constant)
                                  else next(iter(RECORD_FIELDS)))]
        return []

    for node in ast.walk(ast.parse(source)):
        for target in written(node):
            if isinstance(target, ast.Attribute) and target.attr in RECORD_FIELDS \
                    and ast.unparse(target.value) != "self":
                found.add((module, ast.unparse(target.value)))
    return found


def test_only_the_assembler_writes_a_records_fields():
    found = {site for module, path in modules().items()
             for site in record_writes(module, path.read_text(encoding="utf-8"))}
    assert {site for site in found if site[0] != RECORD_ASSEMBLER} == NOT_RECORDS
    assert (RECORD_ASSEMBLER, "record") in found


@pytest.mark.parametrize(("source", "sites"), [
    ("def f(record):\n    record.unit = 'x'", {("m", "record")}),
    ("def f(record):\n    record.rounds, record.steps_per_round = 1, 2", {("m", "record")}),
    ("def f(r):\n    r.details['worker'] = 'gw0'", {("m", "r")}),
    ("def f(bench):\n    bench.record.details.update(a=1)", {("m", "bench.record")}),
    ("def f(r):\n    r.samples.append(1.0)\n    r.latency_ms += 1", {("m", "r")}),
    ("def f(r, name):\n    setattr(r, name, 1)", {("m", "r")}),
    ("def f(r):\n    setattr(r, 'throughput', 1)", {("m", "r")}),
    ("class A:\n    def __init__(self):\n        self.samples = []", set()),  # a class's own attributes
    ("def f(r):\n    r.unknown_field = 1\n    x = r.unit\n    setattr(r, 'other', 1)", set()),
])
def test_a_write_of_a_record_field_is_found(source, sites):
    assert record_writes("m", source) == sites


def test_only_the_plugin_and_the_suite_import_pytest():
    _, external = graph()
    importers = sorted(m for m, packages in external.items() if packages & {"pytest", "_pytest", "xdist"}
                       and room(m) not in PYTEST_ROOMS and m != "hwregress.plugin")
    assert importers == []


def test_room_inits_import_nothing():
    internal, _ = graph()
    busy = {m: sorted(internal[m]) for m, path in modules().items()
            if path.name == "__init__.py" and m != "hwregress" and m not in INIT_MAY_IMPORT and internal[m]}
    assert busy == {}


def test_no_module_is_longer_than_the_limit():
    lengths = {m: len(path.read_text(encoding="utf-8").splitlines()) for m, path in modules().items()}
    long = {m: n for m, n in lengths.items() if n > MAX_LINES}
    assert long == {}


def top_level_names(path: Path) -> set[str]:
    """The names a module defines itself: its functions, classes and assigned names, at module level or under a
    module-level ``if``/``try`` (what it imports is not counted)."""
    names: set[str] = set()
    for statement in ast.parse(path.read_text(encoding="utf-8")).body:
        nodes = ast.walk(statement) if isinstance(statement, (ast.If, ast.Try)) else [statement]
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def imports_through_another_module(path: Path) -> list[str]:
    """``file:line: module.name`` for each ``from hwregress.<module> import name`` in ``path`` where ``module`` neither
    defines ``name`` nor has it as a submodule (it only imported it), :data:`FACES` aside."""
    found, shown = [], path.relative_to(REPO) if path.is_relative_to(REPO) else path
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or node.level or node.module not in modules():
            continue
        if node.module in FACES:
            continue
        defined = top_level_names(modules()[node.module])
        found += [f"{shown}:{node.lineno}: {node.module}.{alias.name}" for alias in node.names
                  if alias.name not in defined and f"{node.module}.{alias.name}" not in modules()]
    return found


def test_a_re_export_is_found(tmp_path):
    importer = tmp_path / "importer.py"
    importer.write_text("from hwregress.judge.stats import summarize, compare\nfrom hwregress.store import atomic\n")
    assert [line.split(": ", 1)[1] for line in imports_through_another_module(importer)] == [
        "hwregress.judge.stats.summarize"]


def test_names_are_imported_from_the_module_that_defines_them():
    files = [path for folder in (SRC, REPO / "tests", REPO / "scripts") for path in sorted(folder.rglob("*.py"))]
    assert [line for path in files for line in imports_through_another_module(path)] == []


LAYOUT_PAGE = REPO / "docs" / "development.md"
LAYOUT_ENTRY = re.compile(r"^(?P<indent>(?:  )+)(?P<name>[A-Za-z_]\w*(?:/|\.py)?)(?:  +(?P<what>\S.*))?$")


def layout_entries(text: str) -> tuple[list[tuple[Path, str]], list[str]]:
    """The entries under ``src/hwregress/`` in the code block of the page's "## Layout" section, and the lines there
    that are no entry. An entry is ``<2 spaces per level><name>  <what it is>``: ``name/`` a folder, ``name.py`` or
    a bare module name a file of the folder above it. Returns ([(path under src/hwregress, what)], [bad lines])."""
    section = text.partition("\n## Layout\n")[2].partition("\n## ")[0]
    block = section.split("```")[1] if section.count("```") >= 2 else ""
    entries: list[tuple[Path, str]] = []
    bad: list[str] = []
    inside, folders = False, []
    for line in block.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            inside = line.split()[0] == "src/hwregress/"
            continue
        match = LAYOUT_ENTRY.match(line) if inside else None
        depth = len(match["indent"]) // 2 if match else 0
        if inside and (match is None or depth > len(folders) + 1):
            bad.append(line)
            continue
        if not inside:
            continue
        folders = folders[: depth - 1]
        name = match["name"]
        entries.append((Path(*folders, name if name.endswith(("/", ".py")) else f"{name}.py"), match["what"] or ""))
        if name.endswith("/"):
            folders.append(name.removesuffix("/"))
    return entries, bad


def test_the_layout_reader_follows_folders_and_finds_bad_lines():
    text = ("# Dev\n\n## Layout\n\n```\ntests/  self-tests\n  ignored  outside src\nsrc/hwregress/\n"
            "  summary.py     the floor\n  store/         on disk\n    atomic       atomic writes\n    schemas/\n"
            "      generate   the schemas\n  cli/           the CLI\n    common\n                 a continuation\n"
            "```\n\n## Next\n")
    entries, bad = layout_entries(text)
    assert entries == [(Path("summary.py"), "the floor"), (Path("store/"), "on disk"),
                       (Path("store/atomic.py"), "atomic writes"), (Path("store/schemas/"), ""),
                       (Path("store/schemas/generate.py"), "the schemas"), (Path("cli/"), "the CLI"),
                       (Path("cli/common.py"), "")]
    assert bad == ["                 a continuation"]


def test_the_layout_names_only_modules_that_exist():
    entries, bad = layout_entries(LAYOUT_PAGE.read_text(encoding="utf-8"))
    assert bad == [], "docs/development.md, Layout: lines that are no '<name>  <what it is>' entry"
    assert entries, "docs/development.md has no Layout section with a src/hwregress/ block"
    assert [str(path) for path, _ in entries if not (PACKAGE / path).exists()] == []


DOTTED = re.compile(r"`(hwregress(?:\.\w+)+)`")


def defined_in_the_code(dotted: str) -> bool:
    """Whether ``dotted`` (``hwregress.judge.session.BenchSession.conclude``) is a module of hwregress, or a class,
    function or constant of one followed by members of it, found in the source by its AST (nothing is imported)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in modules():
            body = ast.parse(modules()[module].read_text(encoding="utf-8")).body
            for name in parts[cut:]:
                found = next((node for node in body if _defines(node, name)), None)
                if found is None:
                    return False
                body = getattr(found, "body", [])
            return True
    return False


def _defines(node: ast.AST, name: str) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return any(isinstance(target, ast.Name) and target.id == name for target in targets)


def test_one_records_way_names_only_what_the_code_defines():
    section = LAYOUT_PAGE.read_text(encoding="utf-8").partition("\n## One record's way\n")[2].partition("\n## ")[0]
    names = DOTTED.findall(section)
    assert len(names) >= 15, "docs/development.md has no \"One record's way\" section naming the code it walks"
    assert [name for name in names if not defined_in_the_code(name)] == []


@pytest.mark.parametrize(("dotted", "defined"), [
    ("hwregress.judge.session.BenchSession.conclude", True), ("hwregress.store.metrics.METRICS", True),
    ("hwregress.report", True), ("hwregress.judge.session.BenchSession.judge", False),
    ("hwregress.judge.compare.judges_latency", False), ("hwregress.nowhere.thing", False),
])
def test_a_name_the_walk_gives_is_found_in_the_code_or_not(dotted, defined):
    assert defined_in_the_code(dotted) is defined


def test_the_layout_describes_every_room():
    entries, _ = layout_entries(LAYOUT_PAGE.read_text(encoding="utf-8"))
    described = {path.stem for path, what in entries if len(path.parts) == 1 and what}
    assert sorted(set(MAY_IMPORT) - described) == []


_PROBE = """
import json, runpy, sys
sys.argv = ["hwregress", *json.loads(sys.argv[1])]
try:
    runpy.run_module("hwregress", run_name="__main__")
except SystemExit as stop:
    code = stop.code
else:
    code = 0
heavy = sorted(name for name in ("torch", "torchvision", "transformers", "pytest") if name in sys.modules)
store = sorted(name for name in ("sqlalchemy", "alembic") if name in sys.modules)
print(f"CODE={code}", file=sys.stderr)
print("HEAVY=" + json.dumps(heavy), file=sys.stderr)
print("STORE=" + json.dumps(store), file=sys.stderr)
"""


def _probe(args: list[str]) -> dict[str, Any]:
    """Run ``python -m hwregress ARGS`` in a fresh interpreter: its exit code and the modules it imported."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(args)], capture_output=True, text=True,
                            env=env, timeout=300)
    assert "CODE=0" in result.stderr, result.stdout + result.stderr
    lines = dict(line.split("=", 1) for line in result.stderr.splitlines() if line.startswith(("HEAVY=", "STORE=")))
    return {name: json.loads(value) for name, value in lines.items()}


@pytest.fixture
def stored(tmp_path: Path) -> dict[str, str]:
    """A baselines folder, a history and a results file, written by the library in this (torch-using) process."""
    from hwregress.store.baselines import BaselineStore
    from hwregress.store.history import HistoryStore
    from hwregress.store.result_files import write_results
    from hwregress.store.results import SessionResults, TestRecord

    record = TestRecord("t", family="throughput", hardware_key="cpu-a", model="resnet18", mode="train", batch_size=8,
                        dtype="fp32", throughput=5.0, samples=[5.0, 5.1, 4.9], unit="samples/s", device="cpu")
    BaselineStore(tmp_path / "baselines").write_entries("cpu-a", "CPU A", {"throughput/resnet18": {"median": 5.0}})
    HistoryStore(tmp_path / "history").append_session([record], "s1", "2026-11-22T10:00:00+00:00")
    results = write_results(SessionResults({}, [record]), tmp_path / "reports").paths["results"]
    return {"baselines": str(tmp_path / "baselines"), "history": str(tmp_path / "history"), "results": str(results),
            "html": str(tmp_path / "page.html")}


@pytest.mark.parametrize("command", [["baselines", "list", "--dir", "{baselines}"],
                                     ["baselines", "show", "cpu-a", "--dir", "{baselines}"],
                                     ["history", "--dir", "{history}"],
                                     ["report", "render", "{results}", "-o", "{html}"]],
                         ids=["baselines-list", "baselines-show", "history", "report-render"])
def test_the_cli_reads_baselines_history_and_reports_without_torch(command, stored):
    args = [part.format(**stored) for part in command]
    assert _probe(args)["HEAVY"] == [], args


@pytest.mark.parametrize("command", [["history", "render", "--dir", "{history}", "-o", "{html}"],
                                     ["report", "render", "{results}", "-o", "{html}"]],
                         ids=["history-render", "report-render"])
def test_a_command_without_a_store_imports_neither_sqlalchemy_nor_alembic(command, stored):
    """The store's libraries load only for a command given a store (~1 s of a command's start otherwise)."""
    args = [part.format(**stored) for part in command]
    assert _probe(args)["STORE"] == [], args


def test_self_tests_share_helpers_through_tests_support_never_through_conftest():
    """tests/conftest.py holds fixtures, markers and settings; a helper two test files share lives in tests/support/,
    where a module imports it by name (``from support.project import HwProject``), never as ``conftest``."""
    importing = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) else
                     [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            if "conftest" in names:
                importing.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert importing == []


def misplaced_test_files(tests: Path) -> list[str]:
    """Each ``test_*.py`` under ``tests`` that lies elsewhere than ``tests/<room>/`` (a folder of src/hwregress) or
    ``tests/project/``, each that shares its name with another (pytest's default "prepend" import mode imports a test
    file by its name: folders without ``__init__.py`` cannot hold two of one name), and each import of a test file
    from another folder (found only where that folder is on ``sys.path`` already: by chance of the order)."""
    rooms = {path.name for path in PACKAGE.iterdir() if path.is_dir() and not path.name.startswith(("_", "."))}
    files = sorted(tests.rglob("test_*.py"))
    found, first = [], {}
    for path in files:
        shown = path.relative_to(tests).as_posix()
        if len(path.relative_to(tests).parts) != 2 or path.parent.name not in rooms | {WHOLE}:
            found.append(f"tests/{shown}: not in tests/<room>/ for a room of src/hwregress, nor in tests/{WHOLE}/")
        if path.name in first:
            found.append(f"tests/{shown}: the name of tests/{first[path.name]} too")
        first.setdefault(path.name, shown)
    folders: dict[str, set[Path]] = defaultdict(set)
    for path in files:
        folders[path.stem].add(path.parent)
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else
                     [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                homes = folders.get(name.split(".")[0], set())
                if homes and path.parent not in homes:
                    found.append(f"tests/{path.relative_to(tests).as_posix()}:{node.lineno}: imports {name} from "
                                 f"another folder of tests/; share it through tests/support/")
    return found


def test_the_self_tests_lie_in_the_folders_of_their_rooms_or_of_the_project():
    assert misplaced_test_files(TESTS) == []


def test_a_misplaced_test_file_a_shared_name_and_an_import_from_another_folder_are_found(tmp_path):
    files = {"judge/test_a.py": "from test_b import x\n", "judge/test_b.py": "x = 1\n",
             "store/test_c.py": "import test_a\n", "project/test_d.py": "", "test_e.py": "",
             "nowhere/test_f.py": "", "judge/deeper/test_g.py": "", "store/test_b.py": "", "support/helper.py": ""}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert sorted(line.partition(":")[0] for line in misplaced_test_files(tmp_path)) == [
        "tests/judge/deeper/test_g.py", "tests/nowhere/test_f.py", "tests/store/test_b.py", "tests/store/test_c.py",
        "tests/test_e.py"]

"""The test families behind one protocol and one registry (:mod:`hwregress.plugin.families`): the built-ins in their
order, a family of a project's own registered by object or by entry point, and the refusals, each naming the family
and the fix. ``test_family_e2e.py`` runs a family of a test project's own end to end."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from hwregress.plugin.families import registry
from hwregress.plugin.families.protocol import FamilyTraits
from hwregress.plugin.matrix import Selection
from hwregress.store.figures import WINDOW_SUB_RECORDS, Figures
from hwregress.store.metrics import REACH_FIELDS
from hwregress.store.results import TestRecord
from hwregress.store.sub_records import LIST_SUB_RECORDS

BUILT_IN = ["throughput", "parity", "output-parity", "speedup", "ceiling", "scaling", "colocated", "spark", "serving"]


class Echo:
    """A family of a project's own, as small as the protocol allows."""

    name = "echo"
    marker = "echo"
    marker_help = "echoes its batch size"
    requires: frozenset[str] = frozenset()
    sub_records: tuple[str, ...] = ()
    view = None

    def cases(self, selection):
        return [{"device": device, "batch_size": 2, "dtype": "fp32"} for device in selection.devices]

    def measure(self, bench, **params):
        raise AssertionError("not measured here")


@pytest.fixture
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry as the built-ins left it, restored after the test."""
    monkeypatch.setattr(registry, "_REGISTERED", {f.name: f for f in registry.BUILT_IN})
    monkeypatch.setattr(registry, "_LOADED", set())


def test_the_built_in_families_are_registered_in_their_order_with_their_markers():
    assert registry.names()[:len(BUILT_IN)] == BUILT_IN
    assert list(registry.markers())[:8] == ["throughput", "parity", "speedup", "ceiling", "scaling", "colocated",
                                            "spark", "serving"]


def test_a_family_of_ones_own_comes_after_the_built_ins_and_gives_its_cases(clean_registry):
    echo = registry.register(Echo())
    assert registry.names() == [*BUILT_IN, "echo"] and registry.get("echo") is echo
    assert registry.markers()["echo"] == "echoes its batch size"
    assert registry.cases(Selection(["cpu"]), "echo") == [{"device": "cpu", "batch_size": 2, "dtype": "fp32"}]
    assert registry.register(echo) is echo and registry.names().count("echo") == 1  # the same object: no change


def test_a_taken_name_is_refused_unless_replaced(clean_registry):
    registry.register(Echo())
    with pytest.raises(registry.FamilyError, match=r"test family 'echo' \(test_families.Echo\) is already registered "
                                                   r"by test_families; give the family another name, or pass "
                                                   r"replace=True"):
        registry.register(Echo())
    taken = type("Throughput", (Echo,), {"name": "throughput", "marker": "mine"})()
    with pytest.raises(registry.FamilyError, match=r"'throughput' .* is already registered by "
                                                   r"hwregress\.plugin\.families\.throughput"):
        registry.register(taken)
    newer = registry.register(Echo(), replace=True)
    assert registry.get("echo") is newer and registry.names() == [*BUILT_IN, "echo"]


def test_an_unknown_family_names_the_registered_ones():
    with pytest.raises(registry.FamilyError, match="unknown test family 'nope'; registered: throughput, parity, "
                                                   "output-parity, speedup, ceiling, scaling, colocated, spark, "
                                                   "serving"):
        registry.get("nope")
    with pytest.raises(registry.FamilyError, match="unknown test family 'nope'"):
        registry.cases(Selection(["cpu"]), "nope")


@pytest.mark.parametrize(("change", "message"), [
    ({"name": "a/b"}, r"test family 'a/b' .*: the name must be letters, digits, '_', '.' or '-'"),
    ({"marker": "my-marker"}, r"marker 'my-marker' is not a Python name"),
    ({"marker": "parity"}, r"marker 'parity' with the fixtures \[\] already selects family 'parity'; use a marker"),
    ({"roof": "yes"}, r"test family 'echo': roof = 'yes' is not a bool \(see hwregress.plugin.families.protocol."
                      r"FamilyTraits\)"),
    ({"judged_latency_modes": "decode"}, r"test family 'echo': judged_latency_modes = 'decode' is not a frozenset"),
    ({"view": "scaleout"}, r"test family 'echo' .*: view 'scaleout' is no view the report reads; use one of "
                           r"ceilings, colocation, models, parity, scaling, serving, spark, or None"),
])
def test_a_family_that_no_test_could_select_is_refused(clean_registry, change, message):
    with pytest.raises(registry.FamilyError, match=message):
        registry.register(type("Bad", (Echo,), change)())
    assert registry.names() == BUILT_IN


def test_what_the_judge_needs_to_know_is_declared_by_the_families_and_none_by_default(clean_registry):
    assert registry.traits("throughput") == FamilyTraits(judged_latency_modes=frozenset({"decode"}), host_evidence=True,
                                                         worker_window=True)
    assert registry.traits("ceiling") == FamilyTraits(roof=True, host_evidence=True)
    assert registry.traits("spark") == FamilyTraits(judged_latency_modes=frozenset({"stream"}))
    assert registry.traits("serving") == FamilyTraits(own_ab=True)  # its A/B: servers of both stacks
    plain = ("parity", "output-parity", "speedup", "scaling", "colocated")
    assert {name: registry.traits(name) for name in plain} == dict.fromkeys(plain, FamilyTraits())
    registry.register(type("Timed", (Echo,), {"judged_latency_modes": ["echo"], "host_evidence": True})())
    assert registry.traits("echo") == FamilyTraits(judged_latency_modes=frozenset({"echo"}), host_evidence=True)
    assert registry.traits("no-such-family") == registry.traits(None) == FamilyTraits()


def test_an_object_that_is_no_family_is_refused_naming_what_it_lacks(clean_registry):
    class Half:
        name = "half"

        def cases(self, selection):
            return []

    with pytest.raises(registry.FamilyError, match="is not a test family: it lacks marker, marker_help, requires, "
                                                   "sub_records, view, measure"):
        registry.register(Half())


def test_a_test_belongs_to_the_family_of_its_marker_and_the_fixtures_it_asks_for(pytester):
    items = pytester.getitems("""
        import pytest

        @pytest.mark.parity
        def test_digits(device, dtype): pass

        @pytest.mark.parity
        def test_outputs(device, workload, dtype): pass

        @pytest.mark.spark
        def test_spark(device, workload): pass

        def test_other(device): pass
    """)
    assert [registry.family_of(item) for item in items] == ["parity", "output-parity", "spark", None]


def test_every_typed_sub_record_of_a_record_is_declared_by_the_families_that_fill_it():
    hints = typing.get_type_hints(TestRecord)
    typed = {f.name for f in dataclasses.fields(TestRecord)
             if any(isinstance(t, type) and issubclass(t, Figures) for t in typing.get_args(hints[f.name]))}
    declared = {name: family.sub_records for family in registry.families() for name in [family.name]}
    # the judge's own (what each verdict could catch), the timed window's (its looks) and the metrics a project
    # declares (any family's measurement may hold some) are filled for every family, declared by none
    shared = set(REACH_FIELDS) | set(WINDOW_SUB_RECORDS) | set(LIST_SUB_RECORDS)
    assert {field for fields in declared.values() for field in fields} == typed - shared
    assert declared["scaling"] == ("scaling",) and declared["ceiling"] == ("allreduce",)


def _install(root: Path, entry_points: str, module: str, source: str) -> None:
    """A distribution ``echo-family 1.0`` installed under ``root`` (its ``.dist-info`` beside its module), as pip
    leaves one in site-packages."""
    info = root / "echo_family-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-family\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[hwregress.families]\n{entry_points}\n")
    (root / f"{module}.py").write_text(source)


def test_an_installed_entry_point_registers_its_family_once(clean_registry, tmp_path, monkeypatch):
    _install(tmp_path, "echo = echo_family_module:FAMILY", "echo_family_module",
             "from test_families import Echo\nFAMILY = Echo()\n")
    monkeypatch.syspath_prepend(tmp_path)
    assert registry.load_entry_points() == [*BUILT_IN, "echo"]
    assert registry.load_entry_points() == [*BUILT_IN, "echo"]  # loaded once: no duplicate


def test_an_entry_point_that_fails_to_load_names_itself_its_distribution_and_the_fix(clean_registry, tmp_path,
                                                                                    monkeypatch):
    _install(tmp_path, "broken = broken_family_module:FAMILY", "broken_family_module",
             "raise RuntimeError('no GPU driver here')\n")
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(registry.FamilyError, match=r"test family entry point 'broken' \(= "
                                                   r"'broken_family_module:FAMILY'\) of echo-family 1\.0 failed to "
                                                   r"load: RuntimeError: no GPU driver here; fix or uninstall "
                                                   r"echo-family"):
        registry.load_entry_points()


def test_every_family_view_is_a_record_view_the_report_reads():
    from hwregress.report import family_views

    named = {family.name: family.view for family in registry.families()}
    assert named["scaling"] == "scaling" and named["colocated"] == "colocation" and named["throughput"] == "models"
    assert named["speedup"] is None  # its records show in the generic tables and the speedup chart
    assert {view for view in named.values() if view is not None} <= family_views.record_views()
    assert family_views.get("scaleout").reads == ("scaling", "colocation", "ceilings")


def test_a_module_that_registers_a_family_when_pytest_imports_it_parametrizes_the_familys_tests(pytester,
                                                                                                clean_registry):
    pytester.makepyfile(echo_plugin="from hwregress.plugin.families import registry\n"
                                    "from test_families import Echo\n"
                                    "registry.register(Echo())\n")
    pytester.syspathinsert()
    pytester.makeconftest('pytest_plugins = ["hwregress.suite.fixtures.devices", "hwregress.suite.fixtures.dtypes", '
                          '"hwregress.suite.fixtures.batch_sizes"]\n')
    pytester.makepyfile(test_echo="import pytest\n\n@pytest.mark.echo\n"
                                  "def test_echo(hwbench, device, batch_size, dtype):\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "echo_plugin", "--strict-markers", "--devices", "cpu",
                                          "--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_echo.py::test_echo[[]cpu-bs2-fp32[]]", "1 test collected*"])

"""Packaging (issue 22): the plugin installs through a ``pytest11`` entry point, the suite ships in the package,
dependencies sit where they are used, one version source, markers registered once, a workload whose optional
package is missing is skipped with the extra that installs it."""

from __future__ import annotations

import importlib.util
import re
import sys

from support.project import REPO

import hwregress
from hwregress import workloads
from hwregress.plugin import MARKERS
from hwregress.plugin.families import registry as families
from hwregress.workloads import registry

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10, which pyproject supports: pytest itself depends on tomli there
    import tomli as tomllib
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


def test_the_plugin_is_a_pytest11_entry_point_named_like_the_module_the_conftests_name():
    # the same name in both places: pytest then skips the conftest's pytest_plugins entry instead of registering
    # the plugin twice ("Plugin already registered under a different name")
    assert PROJECT["entry-points"]["pytest11"] == {"hwregress.plugin": "hwregress.plugin"}
    assert '"hwregress.plugin"' in (REPO / "conftest.py").read_text()
    assert '"hwregress.plugin"' in (REPO / "src/hwregress/suite/conftest.py").read_text()


def test_dependencies_sit_where_they_are_used():
    required = _names(PROJECT["dependencies"])
    extras = {name: _names(values) for name, values in PROJECT["optional-dependencies"].items()}
    assert {"numpy", "markupsafe", "jinja2", "torch", "pytest"} <= required
    assert not {"hypothesis", "jsonschema", "transformers", "torchao", "pytest-benchmark", "ruff"} & required
    assert {"hypothesis", "jsonschema", "ruff", "pytest-timeout"} <= extras["test"]
    assert extras["llm"] == {"transformers"} and extras["quant"] == {"torchao"}
    assert "pytest-benchmark" in extras["benchmark"]
    assert extras["serving"] == {"transformers", "httpx"} and not {"httpx", "fastapi", "uvicorn"} & required


def test_one_version_source_and_the_metadata_of_a_pytest_plugin():
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", PROJECT["version"])
    assert not re.search(r"__version__\s*=\s*[\"']\d", (REPO / "src/hwregress/__init__.py").read_text())  # no 2nd copy
    assert hwregress.__version__  # read from the installed distribution's metadata
    assert "Framework :: Pytest" in PROJECT["classifiers"]
    assert (REPO / "LICENSE").is_file() and (REPO / "CHANGELOG.md").is_file()


def test_markers_are_registered_once_by_the_plugin_and_pytester_only_for_the_self_tests():
    ini = PYPROJECT["tool"]["pytest"]["ini_options"]
    assert "markers" not in ini
    assert "pytester" not in " ".join(ini["addopts"])
    markers = {**MARKERS, **families.markers()}  # the plugin's, and each family's own
    assert {"cpu", "gpu", "throughput", "spark", "scaling", "colocated"} <= set(markers)
    assert all(description and "hwregress test family" not in description for description in markers.values())


def test_the_suite_ships_in_the_package_and_bench_tests_re_export_it():
    shipped = sorted(path.name for path in (REPO / "src/hwregress/suite").glob("test_*.py"))
    assert shipped == sorted(path.name for path in (REPO / "bench_tests").glob("test_*.py"))
    for name in shipped:
        text = (REPO / "bench_tests" / name).read_text()
        assert f"from hwregress.suite.{name[:-3]} import " in text and "def test_" not in text


def test_a_workload_whose_package_is_missing_names_the_extra_that_installs_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(registry.importlib.util, "find_spec",
                        lambda name, *args: None if name == "transformers" else real(name, *args))
    reason = workloads.get("bert_base").unavailable_reason()
    assert reason == "bert_base needs the Python package transformers: pip install 'hwregress[llm]'"
    assert workloads.get("resnet18").unavailable_reason() is None


def test_the_workload_fixture_skips_such_a_workload_as_unsupported(pytester, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(registry.importlib.util, "find_spec",
                        lambda name, *args: None if name == "transformers" else real(name, *args))
    pytester.makeconftest('pytest_plugins = ["hwregress.suite.fixtures.models"]')
    pytester.makepyfile("""
        import pytest

        @pytest.mark.parametrize("workload", ["bert_base", "resnet18"], indirect=True)
        def test_one(workload):
            pass
    """)
    result = pytester.runpytest_inprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    assert "bert_base needs the Python package transformers: pip install 'hwregress[llm]'" in result.stdout.str()
    assert "hwregress.suite" in sys.modules


def test_device_scheduling_holds_when_the_plugin_is_registered_before_xdist(hw_project):
    # an entry point can be registered before xdist's (entry points load in distribution order); "-p" registers the
    # plugin before every entry point, as that order does: xdist's own first-called pytest_cmdline_main then sets
    # --dist load before the plugin could tell that the user chose no --dist
    hw_project.run("-p", "hwregress.plugin", "-n", "2").assert_outcomes(passed=2)
    workers = {r["details"]["worker"] for r in hw_project.results["records"]}
    assert len(workers) == 1 and workers != {"main"}  # one device, one worker

"""The hooks of :mod:`hwregress.plugin.hookspecs`: each is called where its docstring says, with what it says,
and each specification shows an example implementation."""

from __future__ import annotations

import inspect
import json

import pytest

from hwregress.plugin import hookspecs

HOOKS = [name for name, value in vars(hookspecs).items() if name.startswith("pytest_hwregress_") and callable(value)]

OBSERVER = '''
import json, os

def pytest_hwregress_session_meta(config, meta):
    meta["ci"] = {"build": "https://ci.example/42", "worker": os.environ.get("PYTEST_XDIST_WORKER")}

def pytest_hwregress_record_judged(config, record):
    with open("judged.jsonl", "a", encoding="utf-8") as stream:
        stream.write(json.dumps({"test_id": record.test_id, "verdict": str(record.verdict),
                                 "ratio": record.ratio, "worker": os.environ.get("PYTEST_XDIST_WORKER")}) + "\\n")
'''


def test_every_hook_is_specified_with_an_example_and_its_arguments():
    assert set(HOOKS) == {"pytest_hwregress_round_timer", "pytest_hwregress_session_meta",
                          "pytest_hwregress_record_judged"}
    for name in HOOKS:
        spec = getattr(hookspecs, name)
        assert "Example" in spec.__doc__ and "def " + name in spec.__doc__, name
        assert next(iter(inspect.signature(spec).parameters)) == "config", name


@pytest.mark.slow
def test_a_conftest_adds_to_the_session_meta_and_sees_each_judged_record_on_the_controller(hw_project):
    # under -n 2, where "on the controller" means something: two workers measure, one process hears of each record
    (hw_project.path / "conftest.py").write_text((hw_project.path / "conftest.py").read_text() + OBSERVER)
    hw_project.run("--update-baselines", "-n", "2").assert_outcomes(passed=2)
    hw_project.run("-n", "2", env={"HWREGRESS_SELFTEST_SLOWDOWN": "2.0"}).assert_outcomes(failed=2)
    assert hw_project.results["meta"]["ci"] == {"build": "https://ci.example/42", "worker": None}
    lines = (hw_project.path / "judged.jsonl").read_text().splitlines()
    judged = [json.loads(line) for line in lines]
    assert [j["verdict"] for j in judged] == ["new", "new", "regression", "regression"]
    assert all(j["worker"] is None for j in judged)  # the controller, never an xdist worker
    assert all(j["ratio"] < 0.6 for j in judged[2:])

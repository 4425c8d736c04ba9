"""The two stacks of an A/B session (hwregress.ab.stacks): --ab-env, --ab-python and --ab-python-a refused with the
value, the flag and the fix; what differs between two fingerprints, in lines; a worker's imports from its stack's
path before the working folder's (hwregress.ab.worker_environment)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hwregress.ab.stacks import Stack, fingerprint_difference, parse_ab_env, stacks_for
from hwregress.ab.worker_environment import WORKER_BOOT, WORKING_FOLDER_LAST


def test_ab_env_values_become_settings_in_order_empty_values_and_equals_signs_kept():
    settings = parse_ab_env(["OMP_NUM_THREADS=1", "PYTHONPATH=", "PYTORCH_CUDA_ALLOC_CONF=a=b,c:d", "_X1=y"])
    assert settings == {"OMP_NUM_THREADS": "1", "PYTHONPATH": "", "PYTORCH_CUDA_ALLOC_CONF": "a=b,c:d", "_X1": "y"}
    assert list(settings) == ["OMP_NUM_THREADS", "PYTHONPATH", "PYTORCH_CUDA_ALLOC_CONF", "_X1"]


@pytest.mark.parametrize(("values", "named", "fix"), [
    (["OMP_NUM_THREADS"], "'OMP_NUM_THREADS'", "give KEY=VALUE"),
    (["=1"], "'=1'", "give KEY=VALUE"),
    (["1OMP=1"], "'1OMP=1'", "not starting with a digit"),
    (["MY-VAR=1"], "'MY-VAR=1'", "use letters, digits and '_'"),
    ([" A=1"], "' A=1'", "use letters, digits and '_'"),
    (["A=1", "B=2", "A=3"], "'A=3'", "give each setting once"),
], ids=["no-equals", "empty-key", "leading-digit", "hyphen", "space", "duplicate"])
def test_a_bad_ab_env_value_is_refused_naming_it_the_flag_and_the_fix(values, named, fix):
    with pytest.raises(ValueError) as raised:
        parse_ab_env(values)
    message = str(raised.value)
    assert named in message and "--ab-env" in message and fix in message
    assert "\n" not in message


def test_stack_a_is_this_interpreter_and_b_defaults_to_it_with_the_ab_env_settings():
    a, b = stacks_for(None, ["OMP_NUM_THREADS=1"])
    assert a == Stack("A", sys.executable, {})
    assert b == Stack("B", sys.executable, {"OMP_NUM_THREADS": "1"})
    assert b.environment({"PATH": "/bin", "OMP_NUM_THREADS": "4"}) == {"PATH": "/bin", "OMP_NUM_THREADS": "1"}
    assert b.describe() == f"B ({sys.executable}, OMP_NUM_THREADS=1)"


def test_stack_b_runs_the_interpreter_ab_python_names(tmp_path):
    python = tmp_path / "python"
    python.symlink_to(sys.executable)
    assert stacks_for(str(python), [])[1].python == str(python)


def test_stack_a_runs_the_interpreter_ab_python_a_names_and_a_bad_one_is_refused_naming_the_flag(tmp_path):
    python = tmp_path / "python-a"
    python.symlink_to(sys.executable)
    a, b = stacks_for(sys.executable, [], str(python))
    assert a == Stack("A", str(python), {}) and b.python == sys.executable
    with pytest.raises(ValueError, match=r"--ab-python-a '.*no-such': No such file"):
        stacks_for(sys.executable, [], str(tmp_path / "no-such"))


def _missing(tmp_path):
    return tmp_path / "no-such" / "python", "No such file or directory"


def _not_executable(tmp_path):
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o644)
    return path, "is not executable"


def _folder(tmp_path):
    return tmp_path, "is a folder, not an interpreter"


@pytest.mark.parametrize("make", [_missing, _not_executable, _folder], ids=["missing", "not-executable", "folder"])
def test_an_ab_python_that_cannot_run_is_refused_naming_it_the_flag_and_the_fix(tmp_path, make):
    path, why = make(tmp_path)
    with pytest.raises(ValueError) as raised:
        stacks_for(str(path), [])
    message = str(raised.value)
    assert str(path) in message and "--ab-python" in message and why in message
    assert "give the path of a Python interpreter" in message


def test_a_bad_ab_env_is_refused_before_the_interpreter_is_looked_at(tmp_path):
    with pytest.raises(ValueError, match="--ab-env"):
        stacks_for(str(tmp_path / "missing"), ["NOEQUALS"])


def test_the_fingerprint_difference_names_each_changed_field_and_setting_in_order():
    a = {"python": "3.12.3", "torch": "2.13.0", "cuda": None, "torch_threads": 2,
         "env": {"OMP_NUM_THREADS": None, "PYTHONPATH": "/src", "SAME": "x"}}
    b = {"python": "3.12.3", "torch": "2.11.0", "cuda": "12.8", "torch_threads": 1, "extra": "new",
         "env": {"OMP_NUM_THREADS": "1", "PYTHONPATH": "", "SAME": "x"}}
    assert fingerprint_difference(a, b) == [
        "torch 2.13.0 -> 2.11.0", "cuda none -> 12.8", "torch_threads 2 -> 1", "extra none -> new",
        "env OMP_NUM_THREADS: unset -> 1", 'env PYTHONPATH: /src -> ""']


def test_alike_fingerprints_have_no_difference():
    fingerprint = {"torch": "2.13.0", "env": {"OMP_NUM_THREADS": None}}
    assert fingerprint_difference(fingerprint, dict(fingerprint)) == []
    assert fingerprint_difference({"torch": "2.13.0"}, {"torch": "2.13.0", "env": {}}) == []


def test_the_environment_a_stack_adds_to_never_changes_the_sessions():
    before = dict(os.environ)
    Stack("B", sys.executable, {"OMP_NUM_THREADS": "1"}).environment(os.environ)
    assert dict(os.environ) == before


def test_a_stacks_package_fingerprint_is_read_by_its_own_interpreter_with_its_settings(tmp_path):
    import importlib.metadata

    from hwregress.ab.stacks import package_fingerprint

    stack = Stack("B", sys.executable, {"HWREGRESS_AB_TEST_TAG": "b"})
    found = package_fingerprint(stack, ["pytest", "no-such-package-hwregress"], ["HWREGRESS_AB_TEST_TAG", "UNSET_X"],
                                base={"PATH": os.environ.get("PATH", "")})
    assert found["pytest"] == importlib.metadata.version("pytest") and found["no-such-package-hwregress"] is None
    assert found["python_executable"] == sys.executable and found["python"] == ".".join(map(str, sys.version_info[:3]))
    assert found["env"] == {"HWREGRESS_AB_TEST_TAG": "b", "UNSET_X": None}
    assert fingerprint_difference(found, {**found, "pytest": "0.0"}) == [f"pytest {found['pytest']} -> 0.0"]
    failing = tmp_path / "python"
    failing.write_text("#!/bin/sh\necho 'no interpreter here' >&2\nexit 3\n")
    failing.chmod(0o755)
    broken = package_fingerprint(Stack("B", str(failing)), ["torch"], [])
    assert broken == {"error": f"B ({failing}) could not report its packages (exit 3): no interpreter here"}


def test_a_worker_imports_its_stacks_modules_before_the_working_folders(tmp_path):
    for folder, where in (("checkout", "cwd"), ("stack", "stack")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "shadow_mod.py").write_text(f"WHERE = {where!r}\n")
    probe = "import shadow_mod; print(shadow_mod.WHERE)"

    def imported(boot: str, pythonpath: str | None) -> str:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        env.update({"PYTHONPATH": pythonpath} if pythonpath else {})
        return subprocess.run([sys.executable, "-c", boot + probe], cwd=tmp_path / "checkout", env=env,
                              capture_output=True, text=True, check=True).stdout.strip()

    assert imported("", str(tmp_path / "stack")) == "cwd"  # why: `python -c` puts the working folder first
    assert imported(WORKING_FOLDER_LAST, str(tmp_path / "stack")) == "stack"
    assert imported(WORKING_FOLDER_LAST, None) == "cwd"  # still a last resort
    assert WORKER_BOOT.startswith(WORKING_FOLDER_LAST)

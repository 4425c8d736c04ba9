"""Workload plugins: entry points (fake distributions on sys.path, and a real pip install of the example)
and ``--workloads`` modules."""

from __future__ import annotations

import json
import site
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from support.project import REPO

from hwregress import workloads
from hwregress.workloads import plugins as workload_plugins
from hwregress.workloads import registry
from hwregress.workloads.plugins import WorkloadPluginError, import_modules, load_entry_points

EXAMPLE = REPO / "examples" / "custom_workload"

# modules the tests import; dropped from sys.modules around each test so that each import runs its registration
TEST_MODULES = ("custom_workload_example", "fake_plugin_module", "fake_plugin_callable", "fake_plugin_broken",
                "fake_plugin_raises", "fake_plugin_constant")


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Snapshot and restore the workload registry, the entry point cache and the test modules in sys.modules."""
    saved = dict(registry._REGISTRY)
    monkeypatch.setattr(workload_plugins, "_LOADED", {})
    saved_modules = {name: sys.modules.pop(name) for name in TEST_MODULES if name in sys.modules}
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)
    for name in TEST_MODULES:
        sys.modules.pop(name, None)
    sys.modules.update(saved_modules)


def _fake_distribution(root: Path, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    """Write an installed-looking distribution ``fake-dist 0.1`` into ``root``: its dist-info with the given
    ``hwregress.workloads`` entry points (name -> value) and the given modules (name -> source)."""
    dist_info = root / "fake_dist-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-dist\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (dist_info / "entry_points.txt").write_text(f"[{workload_plugins.ENTRY_POINT_GROUP}]\n{lines}")
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source))


def _registering_module(workload_name: str, function: str | None = None) -> str:
    """Source of a module registering a 4-feature linear workload, on import or (``function``) when called."""
    register = (f"register(Workload(name={workload_name!r}, build=lambda: nn.Linear(4, 2), input_shape=(4,), "
                f"num_classes=2))")
    if function is None:
        body = register
    else:
        body = f"CALLS = []\ndef {function}():\n    CALLS.append(1)\n    {register}"
    return f"from torch import nn\nfrom hwregress.workloads import Workload, register\n{body}\n"


def test_module_entry_point_registers_on_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_distribution(tmp_path, {"fake": "fake_plugin_module"},
                       {"fake_plugin_module": _registering_module("fake_module_model")})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "fake_module_model" not in workloads.names()

    loaded = load_entry_points()

    assert "fake" in loaded
    assert workloads.get("fake_module_model").input_shape == (4,)


def test_callable_entry_point_is_called_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_distribution(tmp_path, {"fake_call": "fake_plugin_callable:register_all"},
                       {"fake_plugin_callable": _registering_module("fake_callable_model", "register_all")})
    monkeypatch.syspath_prepend(str(tmp_path))

    first = load_entry_points()
    second = load_entry_points()

    assert "fake_call" in first
    assert first == second
    assert "fake_callable_model" in workloads.names()
    assert sys.modules["fake_plugin_callable"].CALLS == [1]  # the cache kept the second call from calling again


@pytest.mark.parametrize(("value", "source", "error_line"), [
    ("fake_plugin_broken", "import missing_dependency_of_fake_plugin\n",
     "ModuleNotFoundError: No module named 'missing_dependency_of_fake_plugin'"),
    ("fake_plugin_raises", "raise RuntimeError('bad weights file\\nsecond line')\n", "RuntimeError: bad weights file"),
    ("fake_plugin_constant:VALUE", "VALUE = 3\n", "TypeError: it names a int, not a module or a callable"),
], ids=["import-error", "exception", "not-callable"])
def test_broken_entry_point_names_entry_point_distribution_and_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, source: str, error_line: str) -> None:
    module = value.split(":")[0]
    _fake_distribution(tmp_path, {"broken": value}, {module: source})
    monkeypatch.syspath_prepend(str(tmp_path))

    with pytest.raises(WorkloadPluginError) as caught:
        load_entry_points()

    message = str(caught.value)
    assert "'broken'" in message
    assert "fake-dist 0.1" in message
    assert error_line in message
    assert "second line" not in message
    assert "fix or uninstall the package (fake-dist)" in message
    assert isinstance(caught.value, ValueError)
    assert "broken" not in workload_plugins._LOADED.values()  # a failure is not cached: the next call retries


def test_example_package_by_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))

    added = import_modules(["custom_workload_example"], "--workloads")

    assert added == ["example_mlp"]
    workload = workloads.get("example_mlp")
    assert (workload.input_shape, workload.num_classes) == ((1, 28, 28), 10)
    inputs, labels = workloads.make_batch(workload, batch_size=3, device="cpu")
    logits = workload.build()(inputs)
    assert logits.shape == (3, 10)
    assert torch.isfinite(workload.loss(logits, labels))


def test_import_modules_skips_blanks_and_reports_replacements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fake_plugin_module.py").write_text(
        "from torch import nn\nfrom hwregress.workloads import Workload, register\n"
        "register(Workload(name='resnet18', build=lambda: nn.Linear(4, 2), input_shape=(4,), num_classes=2), "
        "replace=True)\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    assert import_modules([" fake_plugin_module ", ""], "--workloads") == ["resnet18"]
    assert import_modules(["fake_plugin_module"], "--workloads") == []  # already imported: not run again


def test_missing_module_names_module_source_and_fix() -> None:
    with pytest.raises(WorkloadPluginError) as caught:
        import_modules(["no_such_workload_module_xyz"], "ini option hwregress_workloads")

    message = str(caught.value)
    assert "'no_such_workload_module_xyz'" in message
    assert "ini option hwregress_workloads" in message
    assert "No module named 'no_such_workload_module_xyz'" in message
    assert "PYTHONPATH" in message


def test_module_with_missing_dependency_is_told_apart_from_missing_module(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fake_plugin_broken.py").write_text("import missing_dependency_of_fake_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    with pytest.raises(WorkloadPluginError, match=r"'fake_plugin_broken' \(from --workloads\) failed to import: "
                                                  r"ModuleNotFoundError.*missing_dependency_of_fake_plugin"):
        import_modules(["fake_plugin_broken"], "--workloads")


# in the new venv: load the entry points and print what was loaded and registered
_PROBE = ("import json; from hwregress.workloads import plugins as workload_plugins; from hwregress import workloads; "
          "loaded = workload_plugins.load_entry_points(); "
          "print(json.dumps({'loaded': loaded, 'names': workloads.names(), "
          "'input_shape': workloads.get('example_mlp').input_shape}))")
_NO_NETWORK_OR_SETUPTOOLS = ("No module named pip", "No module named 'setuptools'", "invalid command 'bdist_wheel'",
                             "Could not find a version", "NewConnectionError", "Failed to establish a new connection",
                             "Temporary failure in name resolution")


def _venv_with_parent_packages(venv: Path) -> Path:
    """Create ``venv`` seeing this interpreter's site-packages (torch, hwregress, pip, setuptools) after its own,
    and return its python.

    Not ``--system-site-packages``: when this interpreter is itself a venv that reaches only the base
    interpreter's packages, whose older setuptools would then shadow this environment's. Not its own pip either
    (``--without-pip``): the bundled setuptools of Python < 3.12 cannot build a wheel without ``wheel``. A ``.pth``
    file adds this interpreter's site directories (``.pth`` files included) in their order instead."""
    created = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)],
                             capture_output=True, text=True, timeout=300)
    if created.returncode != 0:
        pytest.skip(f"cannot create a venv (python -m venv failed): {created.stderr.strip()[-300:]}")
    python = venv / "bin" / "python"
    venv_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip()
    add_dirs = "".join(f"; site.addsitedir({path!r})" for path in site.getsitepackages() if Path(path).is_dir())
    (Path(venv_site) / "_hwregress_parent_env.pth").write_text(f"import site{add_dirs}\n")
    return python


@pytest.mark.slow
def test_pip_installed_example_registers_through_entry_point(tmp_path: Path) -> None:
    python = _venv_with_parent_packages(tmp_path / "venv")
    installed = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                                "--disable-pip-version-check", "--no-cache-dir", str(EXAMPLE)],
                               capture_output=True, text=True, timeout=300, cwd=tmp_path)
    output = installed.stdout + installed.stderr
    if installed.returncode != 0 and any(reason in output for reason in _NO_NETWORK_OR_SETUPTOOLS):
        pytest.skip(f"pip install of the example needs pip and setuptools>=70.1 or wheel, or the network: "
                    f"{output.strip()[-300:]}")
    assert installed.returncode == 0, output

    probe = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, timeout=300, cwd=tmp_path)

    assert probe.returncode == 0, probe.stderr
    result = json.loads(probe.stdout.strip().splitlines()[-1])
    assert "example" in result["loaded"]
    assert "example_mlp" in result["names"]
    assert result["input_shape"] == [1, 28, 28]

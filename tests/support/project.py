"""A pytester project that is a copy of this repository's suite (conftest.py, fixtures/, bench_tests/, pytest
config) plus tests/support/selftest_support.py, and the settings of its end-to-end sessions (the ``hw_project``
fixture of tests/conftest.py makes one per test)."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from support.zygote import PYTHON_VARIABLE, Zygote

# the repository root and this folder, for test files at any depth under tests/ (tests/<room>/, tests/project/)
REPO = Path(__file__).resolve().parents[2]
SUPPORT_DIR = Path(__file__).resolve().parent
SUPPORT = SUPPORT_DIR / "selftest_support.py"
# loaded first by every pytest session a self-test starts in a subprocess (see its docstring): "-p", "selftest_gc"
EARLY_GC = SUPPORT_DIR / "selftest_gc.py"
SUBPROCESS_ARGS = ["-p", "selftest_gc"]
# the inner session's sys.executable, the interpreter of the visit workers and A/B stack A (selftest_support.py)
WORKER_PYTHON = "HWREGRESS_SELFTEST_WORKER_PYTHON"

# fast, deterministic settings for end-to-end runs of the plugin
FAST = ["-p", "no:cacheprovider", "--devices", "cpu", "--models", "tiny", "--batch-sizes", "4",
        "--modes", "train,infer", "--rounds", "6", "--warmup", "1", "--min-round-time", "0.02",
        "--time-budget", "1", "--telemetry-interval", "0.01", "--profile-steps", "1"]


class HwProject:
    """A pytester project holding the suite; runs pytest in a subprocess."""

    def __init__(self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, zygote: Zygote) -> None:
        self.pytester = pytester
        self.monkeypatch = monkeypatch
        self.zygote = zygote
        self.sessions = 0
        self.path = pytester.path
        shutil.copytree(REPO / "fixtures", self.path / "fixtures")
        (self.path / "bench_tests").mkdir()
        shutil.copy(REPO / "bench_tests" / "test_throughput.py", self.path / "bench_tests")
        shutil.copy(REPO / "pyproject.toml", self.path)
        shutil.copy(SUPPORT, self.path)
        shutil.copy(SUPPORT_DIR / "served_shapes.py", self.path)
        shutil.copy(EARLY_GC, self.path)
        conftest = (REPO / "conftest.py").read_text()
        (self.path / "conftest.py").write_text(conftest + '\npytest_plugins.append("selftest_support")\n')

    def run(self, *args: str, env: dict[str, str] | None = None, fast: bool = True,
            inprocess: bool = False, timeout: float = 600) -> pytest.RunResult:
        for key in ("HWREGRESS_SELFTEST_SLOWDOWN", "HWREGRESS_SELFTEST_INTERRUPT", "HWREGRESS_SELFTEST_OOM_AT",
                    "HWREGRESS_SELFTEST_CRASH_AT", "HWREGRESS_SELFTEST_HARD_EXIT", "HWREGRESS_SELFTEST_SIGKILL",
                    "HWREGRESS_SELFTEST_ENOSPC", "HWREGRESS_SELFTEST_RENDER_FAIL",
                    "HWREGRESS_SELFTEST_BUSY", "HWREGRESS_SELFTEST_HOST_BYTES", "HWREGRESS_SELFTEST_TORCH",
                    "HWREGRESS_SELFTEST_COMPILE_FAIL", "HWREGRESS_SELFTEST_SLEEP_S",
                    "HWREGRESS_SELFTEST_STREAM_SLEEP_S", "HWREGRESS_SELFTEST_FREEZE",
                    "HWREGRESS_SELFTEST_PYTEST_SLEEP_S", "HWREGRESS_SELFTEST_REAL_CLOCK", "HWREGRESS_VISIT_WORKER",
                    "HWREGRESS_SELFTEST_VISIT_WORKER_EXIT", "HWREGRESS_SELFTEST_SERVE_SLEEP_S", WORKER_PYTHON,
                    # an outer -n run's worker variables would make the inner session think it is a worker
                    "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID",
                    "GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS", "HWREGRESS_STORE", "HWREGRESS_ALERT_WEBHOOK"):
            self.monkeypatch.delenv(key, raising=False)
        for key, value in (env or {}).items():
            self.monkeypatch.setenv(key, value)
        self.monkeypatch.setenv(PYTHON_VARIABLE, self.zygote.python_command())  # the session's -n workers
        full = [*(FAST if fast else []), *args]
        if inprocess:  # cheap, for runs that stop before any test (usage errors)
            return self.pytester.runpytest_inprocess(*full)
        # runpytest_subprocess's run, forked from the zygote: a session of its own without the imports' seconds
        self.sessions += 1
        basetemp = self.path / f"runpytest-{self.sessions}"
        basetemp.mkdir(mode=0o700)
        return self.pytester.run(*self.zygote.command(), f"--basetemp={basetemp}", *SUBPROCESS_ARGS, *full,
                                 timeout=timeout)

    def forked_workers(self) -> dict[str, str]:
        """The environment of a session whose visit workers and A/B stack A's workers fork from the zygote
        (:attr:`Zygote.python`), for the self-tests of what those workers decide, not of how they start or die."""
        return {WORKER_PYTHON: self.zygote.python}

    def install_family(self, module: str, source: str, test: str) -> None:
        """A family of the project's own: its module ``<module>.py`` (``source``, dedented; it defines ``FAMILY``), its
        test file ``bench_tests/test_echo.py`` (``test``, dedented) and the entry point of the group
        ``hwregress.families`` that installs it (a dist-info folder on the session's path, as pip leaves one in
        site-packages)."""
        (self.path / f"{module}.py").write_text(textwrap.dedent(source))
        (self.path / "bench_tests" / "test_echo.py").write_text(textwrap.dedent(test))
        info = self.path / f"{module}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[hwregress.families]\necho = {module}:FAMILY\n")

    @property
    def results(self) -> dict:
        return json.loads((self.path / "reports" / "results.json").read_text())

    def baseline_files(self) -> list[Path]:
        return sorted((self.path / "baselines").glob("*.json"))

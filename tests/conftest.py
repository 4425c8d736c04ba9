"""Shared helpers of the self-tests: a pytester project that is a copy of this repository's suite
(conftest.py, fixtures/, bench_tests/, pytest config) plus tests/support/selftest_support.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import uuid
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import settings
from support.postgres import FLEET_MISSING, fresh_database, postgres_server
from support.zygote import Zygote

pytest_plugins = ["pytester"]  # the self-tests only: never in the hardware suite's own runs

REPO = Path(__file__).resolve().parents[1]
SUPPORT = Path(__file__).resolve().parent / "support" / "selftest_support.py"
# loaded first by every pytest session a self-test starts in a subprocess (see its docstring): "-p", "selftest_gc"
EARLY_GC = Path(__file__).resolve().parent / "support" / "selftest_gc.py"
SUBPROCESS_ARGS = ["-p", "selftest_gc"]

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
                    "HWREGRESS_SELFTEST_VISIT_WORKER_EXIT",
                    # an outer -n run's worker variables would make the inner session think it is a worker
                    "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID",
                    "GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS", "HWREGRESS_STORE", "HWREGRESS_ALERT_WEBHOOK"):
            self.monkeypatch.delenv(key, raising=False)
        for key, value in (env or {}).items():
            self.monkeypatch.setenv(key, value)
        full = [*(FAST if fast else []), *args]
        if inprocess:  # cheap, for runs that stop before any test (usage errors)
            return self.pytester.runpytest_inprocess(*full)
        # runpytest_subprocess's run, forked from the zygote: a session of its own without the imports' seconds
        self.sessions += 1
        basetemp = self.path / f"runpytest-{self.sessions}"
        basetemp.mkdir(mode=0o700)
        return self.pytester.run(*self.zygote.command(), f"--basetemp={basetemp}", *SUBPROCESS_ARGS, *full,
                                 timeout=timeout)

    @property
    def results(self) -> dict:
        return json.loads((self.path / "reports" / "results.json").read_text())

    def baseline_files(self) -> list[Path]:
        return sorted((self.path / "baselines").glob("*.json"))


# shared CI machines are slow and noisy: property tests are judged on their examples, never on time
settings.register_profile("hwregress", deadline=None, print_blob=True)
settings.load_profile("hwregress")

SELFTEST_TIMEOUT_S = 600
SELFTEST_MARKERS = {
    "browser": "self-test that drives a headless Chromium",
    "needs_extra": "self-test that needs an optional extra or Java (the spark family): skipped without them on what "
                   "the README installs, run by phase 2 of .ci/run",
    "slow": "self-test that takes more than a few seconds",
    "gpu": "self-test that needs a CUDA device",
}


def pytest_configure(config: pytest.Config) -> None:
    # the ~150 pytest sessions, CLI runs and ranks the self-tests start import the same modules: where the environment
    # forbids bytecode caches (PYTHONDONTWRITEBYTECODE, set in some CI images), each of them compiled every module of
    # hwregress and pytest rewrote its asserts again (~1 s a session); the first one now writes the caches
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for name, description in SELFTEST_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # a hung subprocess or browser must fail its test, not eat CI's time (pytest-timeout)
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SELFTEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def zygote() -> Iterator[Zygote]:
    """One zygote per self-test process (per xdist worker) for the end-to-end sessions (:mod:`support.zygote`)."""
    started = Zygote.start()
    yield started
    started.stop()


@pytest.fixture
def hw_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, zygote: Zygote) -> HwProject:
    return HwProject(pytester, monkeypatch, zygote)


@pytest.fixture
def character_device(tmp_path: Path) -> Path:
    """A character device for a test to point links at and check it is still one afterwards; never written to.

    Where this process may make device nodes (root), a null device of its own under ``tmp_path``, so that a write
    that wrongly replaced it would replace that node, never the system's ``/dev/null``; elsewhere ``/dev/null``, which
    such a process cannot replace."""
    own = tmp_path / "null-device"
    try:
        os.mknod(own, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError:
        return Path("/dev/null")
    return own


@pytest.fixture(params=["serial", "xdist-2"], ids=["no-xdist", "n2"])
def xdist_args(request: pytest.FixtureRequest) -> list[str]:
    """Run an end-to-end scenario without xdist and with two workers."""
    return [] if request.param == "serial" else ["-n", "2"]


class _TableCells(HTMLParser):
    """The text of each cell of each row of the tables whose ``attribute`` is ``value``."""

    def __init__(self, attribute: str, value: str) -> None:
        super().__init__()
        self.attribute, self.value = attribute, value
        self.rows: list[list[str]] = []
        self.inside = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.inside = dict(attrs).get(self.attribute) == self.value
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag == "td":
            self.rows[-1].append("")

    def handle_endtag(self, tag):
        self.inside = self.inside and tag != "table"

    def handle_data(self, data):
        if self.inside and self.rows and self.rows[-1]:
            self.rows[-1][-1] += data


def table_cells(html: str, attribute: str, value: str) -> list[list[str]]:
    """The cell texts, as written, of every data row of the report tables with ``attribute="value"``
    (``id="results"``, ``class="scaling"``)."""
    parser = _TableCells(attribute, value)
    parser.feed(html)
    return [row for row in parser.rows if row]


def report_section(html: str, section_id: str) -> str:
    """The inside of the report's ``<section id="section_id">``; fails the test when the page has none."""
    match = re.search(rf'<section id="{section_id}">(.*?)</section>', html, re.S)
    assert match, f"no {section_id} section"
    return match.group(1)


def table_rows(html: str, css_class: str) -> list[list[str]]:
    """:func:`table_cells` of the tables of class ``css_class``, each cell's whitespace collapsed."""
    return [[" ".join(cell.split()) for cell in row] for row in table_cells(html, "class", css_class)]


def svg_charts(html: str) -> list[str]:
    """Every inline SVG chart of ``html``."""
    return re.findall(r"<svg.*?</svg>", html, re.S)


VOID_ELEMENTS = {"meta", "br", "input", "img", "hr", "link", "col", "wbr"}


class _Balance(HTMLParser):
    """Every element closed in order (void elements and self-closed SVG shapes aside)."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.mismatched: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID_ELEMENTS:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if self.open and self.open[-1] == tag:
            self.open.pop()
        else:
            self.mismatched.append(tag)


def well_formed(html: str) -> bool:
    """Whether every element of ``html`` is closed, in order (void elements and self-closed SVG shapes aside)."""
    parser = _Balance()
    parser.feed(html)
    parser.close()
    return not parser.open and not parser.mismatched


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The SQLAlchemy URL of a real PostgreSQL 16 started once per test session (per xdist worker) by pgserver;
    skipped without the fleet extra."""
    try:
        import pgserver  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip(FLEET_MISSING)
    with postgres_server(tmp_path_factory.mktemp("postgres")) as url:
        yield url


@pytest.fixture
def postgres_database(postgres_url: str) -> str:
    """The URL of a new, empty database on that server, for one test."""
    return fresh_database(postgres_url, f"t_{uuid.uuid4().hex[:12]}")

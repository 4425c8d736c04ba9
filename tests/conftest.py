"""The self-tests' fixtures, markers and settings; their shared helpers live in tests/support/ (the pytester project
of the end-to-end runs in support/project.py, the report's HTML readers in support/html_checks.py)."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from support import nightly
from support.postgres import FLEET_MISSING, fresh_database, postgres_server
from support.project import HwProject
from support.zygote import Zygote

pytest_plugins = ["pytester"]  # the self-tests only: never in the hardware suite's own runs

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
    nightly.MARKER: nightly.DESCRIPTION,
}


def pytest_addoption(parser: pytest.Parser) -> None:
    nightly.add_option(parser)


def pytest_configure(config: pytest.Config) -> None:
    # the ~150 pytest sessions, CLI runs and ranks the self-tests start import the same modules: where the environment
    # forbids bytecode caches (PYTHONDONTWRITEBYTECODE, set in some CI images), each of them compiled every module of
    # hwregress and pytest rewrote its asserts again (~1 s a session); the first one now writes the caches
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    # GNU OpenMP's idle threads spin while they wait for work (torch's CPU build): with two self-test workers, their
    # sessions and worker processes on 2 cores, one process's spinning threads take the cores another needs. Two digits
    # trainings at once took 54 s each against 5 s alone; with passive waits 5-6 s. Set before xdist starts its workers
    # and before any session or worker process starts, all of which inherit it (libgomp reads it as it loads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    for name, description in SELFTEST_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # a hung subprocess or browser must fail its test, not eat CI's time (pytest-timeout)
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SELFTEST_TIMEOUT_S))
    nightly.skip_unless_asked(config, items)


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


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.needs_extra)])
def store_on_each_engine(request, tmp_path):
    """An open fleet store: a new SQLite file, then (with the fleet extra) a new database on the PostgreSQL server."""
    from hwregress.store.database import open_store

    url = (f"sqlite:///{tmp_path / 'hwregress.sqlite'}" if request.param == "sqlite"
           else request.getfixturevalue("postgres_database"))
    opened = open_store(url)
    yield opened
    opened.close()

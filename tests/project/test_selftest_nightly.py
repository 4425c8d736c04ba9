"""tests/support/nightly.py: a self-test marked ``nightly`` is skipped, naming ``--nightly``, unless the run passes
``--nightly``; the others run either way. An in-process pytest session with the hooks of tests/conftest.py that
call it."""

from __future__ import annotations

import pytest

HOOKS = """
import pytest
from support import nightly


def pytest_addoption(parser):
    nightly.add_option(parser)


def pytest_configure(config):
    config.addinivalue_line("markers", f"{nightly.MARKER}: {nightly.DESCRIPTION}")


def pytest_collection_modifyitems(config, items):
    nightly.skip_unless_asked(config, items)
"""

TESTS = """
import pytest


@pytest.mark.nightly
def test_a_rank_that_hangs():
    pass


def test_a_verdict():
    pass
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(HOOKS)
    pytester.makepyfile(test_inner=TESTS)
    return pytester


def test_without_the_option_a_nightly_test_is_skipped_naming_it(project):
    result = project.runpytest_inprocess("-rs", "--strict-markers")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*test_inner.py:*a nightly self-test: run it with --nightly"])


def test_with_the_option_every_test_runs(project):
    project.runpytest_inprocess("--nightly", "--strict-markers").assert_outcomes(passed=2)

"""The hooks hwregress offers to other plugins and ``conftest.py`` files (registered by
:func:`hwregress.plugin.pytest_addhooks`), in the manner of pytest-benchmark's ``hookspec.py``: each
specification's docstring says when it is called, on which process, and shows an implementation.

Implement a hook by defining a function of the same name in a ``conftest.py`` or a plugin module; pytest passes
only the arguments the implementation names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from hwregress.measure.timing import RoundTimer
    from hwregress.store.results import TestRecord


@pytest.hookspec(firstresult=True)
def pytest_hwregress_round_timer(config: pytest.Config, device: str) -> RoundTimer | None:
    """Return the :class:`hwregress.measure.timing.RoundTimer` that times the rounds on ``device`` (``"cpu"``,
    ``"cuda:0"``), or None for the default: CUDA events on CUDA, the synchronized host clock elsewhere. Called in
    the process that runs the test (an xdist worker under ``-n``); the first non-None answer wins.

    The self-tests use it to inject a deterministic clock and a known slowdown.

    Example:

    .. code-block:: python

        class SlowerClock:
            # a known 2x slowdown on top of the real clock: the session must come out red
            def __init__(self, real):
                self.real = real

            def time_round(self, run_steps, steps):
                return 2.0 * self.real.time_round(run_steps, steps)

        def pytest_hwregress_round_timer(config, device):
            from hwregress.measure.timing import default_timer
            return SlowerClock(default_timer(device)) if config.getoption("--inject-slowdown") else None
    """


@pytest.hookspec
def pytest_hwregress_session_meta(config: pytest.Config, meta: dict[str, Any]) -> None:
    """Add to or change ``meta``, the session's metadata written as ``results.json``'s ``meta`` object (host,
    start and end times, arguments, hardware, baselines folder, tolerances), just before it is written. Called
    once per session on the controller (never on an xdist worker). Values must be JSON-able.

    Example (record the CI build that ran the session, so the report and a later ``report compare`` name it):

    .. code-block:: python

        import os

        def pytest_hwregress_session_meta(config, meta):
            meta["ci"] = {"build": os.environ.get("BUILD_URL"), "commit": os.environ.get("GIT_COMMIT")}
    """


@pytest.hookspec
def pytest_hwregress_record_judged(config: pytest.Config, record: TestRecord) -> None:
    """Look at one test's judged :class:`hwregress.store.results.TestRecord` (verdict, ratio, throughput in its
    ``unit``, peak memory in bytes, diagnosis) as it reaches the controller, after it is written to the session's
    journal and before the session ends. Called on the controller, once per test that carries a record (again,
    with the superseding record, when the test's teardown fails after its measurement). Do not change the
    record: the stored results are the judge's.

    Example (page the on-call engineer as soon as a regression is known, not after a two-hour tier):

    .. code-block:: python

        def pytest_hwregress_record_judged(config, record):
            if record.verdict == "regression":
                notify(f"{record.test_id}: {record.ratio:.2f} of baseline; {'; '.join(record.diagnosis[:1])}")
    """

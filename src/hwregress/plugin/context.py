"""What a family's measurement needs of the test it runs: :class:`BenchContext`, the face of
:class:`hwregress.plugin.fixture.HwBench` that the families (:mod:`hwregress.plugin.families`) use. A protocol here,
so that the fixture module may look the families up without their importing it back."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from hwregress.plugin.settings import Settings

if TYPE_CHECKING:
    from hwregress.judge.session import BenchSession
    from hwregress.measure.timing import RoundTimer, VerdictCheck
    from hwregress.store.judged import Conclusion
    from hwregress.store.results import TestRecord

# runs a round function ``rounds`` times (pytest-benchmark's ``pedantic``, so its table shows the timed rounds)
RoundDriver = Callable[[Callable[[], None], int], None]


class BenchContext(Protocol):
    """The running test: its request, its item, the session's config, the validated settings and the judging session,
    and the plumbing every family shares: the test's one record (:meth:`start`, :meth:`conclude`, :meth:`settle`), the
    round timer, the in-window verdict check and the pytest-benchmark bridge."""

    request: pytest.FixtureRequest
    item: pytest.Item
    config: pytest.Config
    settings: Settings
    session: BenchSession

    def start(self, family: str, device: str, model: str, mode: str, batch_size: Any, dtype: str) -> TestRecord:
        """The test's one record (its identity, device facts and environment), stashed before anything is measured, so
        that a failure later still reports what was measured."""
        ...

    def conclude(self, record: TestRecord, key: str, extra_failures: list[str] | None = None) -> TestRecord:
        """Judge ``record`` against baseline entry ``key`` (with the family's own ``extra_failures``) and fail the
        test with the numbers when the judgement says so; returns the record."""
        ...

    def settle(self, record: TestRecord, conclusion: Conclusion) -> TestRecord:
        """Put what judging ``record`` concluded on it (its verdict settles with the test's outcome) and fail the test
        with the conclusion's failures; returns the record."""
        ...

    def timer(self, device: str) -> RoundTimer:
        """The clock that times ``device``'s rounds (``pytest_hwregress_round_timer``, else the device's default)."""
        ...

    def window_check(self, record: TestRecord, key: str) -> VerdictCheck | None:
        """What keeps the timed window open while its verdict against baseline entry ``key`` is undecided; None
        without a trustworthy entry."""
        ...

    def window_terms(self, record: TestRecord, key: str) -> dict[str, Any] | None:
        """The JSON-able terms of the window's verdict check against baseline entry ``key``
        (:func:`hwregress.judge.window_verdict.window_terms`), for a window that runs in a scale-out job's ranks;
        None without a trustworthy entry."""
        ...

    def round_driver(self) -> RoundDriver | None:
        """pytest-benchmark's round driver, None where that plugin is off."""
        ...

    def benchmark_extra_info(self, record: TestRecord) -> None:
        """Copy the record's figures into pytest-benchmark's ``extra_info`` where that plugin is on."""
        ...

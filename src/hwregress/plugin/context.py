"""What a family's runner needs of the test it runs: :class:`BenchContext`, the face of
:class:`hwregress.plugin.fixture.HwBench` that :mod:`~hwregress.plugin.distributed` and :mod:`~hwregress.plugin.spark`
use. A protocol here, so that the fixture module may build those runners without their importing it back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pytest

from hwregress.plugin.settings import Settings

if TYPE_CHECKING:
    from hwregress.store.results import TestRecord


class BenchContext(Protocol):
    """The running test: its request, its item, the session's config and the validated settings, and the terms of
    the in-window verdict check of a window that runs in a scale-out job's ranks (:meth:`window_terms`)."""

    request: pytest.FixtureRequest
    item: pytest.Item
    config: pytest.Config
    settings: Settings

    def window_terms(self, record: TestRecord, key: str) -> dict[str, Any] | None:
        """The JSON-able terms of the window's verdict check against baseline entry ``key``
        (:func:`hwregress.judge.window_verdict.window_terms`); None without a trustworthy entry."""
        ...

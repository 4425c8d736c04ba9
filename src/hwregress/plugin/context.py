"""What a family's runner needs of the test it runs: :class:`BenchContext`, the face of
:class:`hwregress.plugin.fixture.HwBench` that :mod:`~hwregress.plugin.distributed` and :mod:`~hwregress.plugin.spark`
use. A protocol here, so that the fixture module may build those runners without their importing it back."""

from __future__ import annotations

from typing import Protocol

import pytest

from hwregress.plugin.settings import Settings


class BenchContext(Protocol):
    """The running test: its request, its item, the session's config and the validated settings."""

    request: pytest.FixtureRequest
    item: pytest.Item
    config: pytest.Config
    settings: Settings

"""The ``--serving-*`` options read into :class:`hwregress.serving.settings.ServingSettings`, each checked; an error
names the flag or ini key, the value and what would be valid."""

from __future__ import annotations

import math

import pytest

from hwregress.plugin.options import list_of, number_of, optional_number_of, value_of
from hwregress.serving.server import ENGINES
from hwregress.serving.settings import LENGTH_PROFILES, ServingSettings

MAX_RATE = 10_000.0  # requests/s
MAX_REQUESTS = 100_000
MAX_WINDOWS = 100
IMPLYING = ("hwregress_serving_rates", "hwregress_serving_requests")  # options that run the family without -m serving


def serving_settings(config: pytest.Config) -> ServingSettings:
    """The serving family's settings from the options.

    Raises:
        pytest.UsageError: an unknown engine or length profile, a rate that is not a positive finite number, or a
            count out of range.
    """
    engine, source = value_of(config, "hwregress_serving_engine")
    engine = engine or "transformers"
    if engine not in ENGINES:
        raise pytest.UsageError(f"{source}={engine!r}: choose a serving engine from {', '.join(ENGINES)}")
    lengths = tuple(list_of(config, "hwregress_serving_lengths") or ("fixed",))
    unknown = [name for name in lengths if name not in LENGTH_PROFILES]
    if unknown:
        raise pytest.UsageError(f"{value_of(config, 'hwregress_serving_lengths')[1]}: unknown length profile "
                                f"{unknown[0]!r}; choose from {', '.join(LENGTH_PROFILES)}")
    return ServingSettings(engine=engine, rates=_rates(config), lengths=lengths,
                           requests=optional_number_of(config, "hwregress_serving_requests", int, 1, MAX_REQUESTS),
                           windows=number_of(config, "hwregress_serving_windows", int, 1, MAX_WINDOWS))


def _rates(config: pytest.Config) -> tuple[float, ...] | None:
    entries = list_of(config, "hwregress_serving_rates")
    if entries is None:
        return None
    source = value_of(config, "hwregress_serving_rates")[1]
    rates = []
    for entry in entries:
        try:
            rate = float(entry)
        except ValueError:
            rate = math.nan
        if not (math.isfinite(rate) and 0 < rate <= MAX_RATE):
            raise pytest.UsageError(f"{source}: request rate {entry!r} is not a number of requests per second in "
                                    f"(0, {MAX_RATE:g}]")
        rates.append(rate)
    return tuple(rates)


def asks_for_serving(config: pytest.Config) -> bool:
    """Whether an option of the serving family was given (it then runs without ``-m serving``)."""
    return any(value_of(config, ini)[0] is not None for ini in IMPLYING)

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
MIN_WINDOWS = 3  # a median and an IQR; the first planned look of a judged test
MAX_CLIENTS = 10_000
LOADS = ("hwregress_serving_rates", "hwregress_serving_concurrency", "hwregress_serving_sweep")
IMPLYING = (*LOADS, "hwregress_serving_requests")  # options that run the family without -m serving


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
    rates, concurrency, sweep = _rates(config, "hwregress_serving_rates"), _clients(config), _sweep(config)
    if any(load is not None for load in (rates, concurrency, sweep)):  # the loads asked for, and only those
        rates, concurrency, sweep = rates or (), concurrency or (), sweep or ()
    return ServingSettings(engine=engine, rates=rates, concurrency=concurrency, sweep=sweep, lengths=lengths,
                           requests=optional_number_of(config, "hwregress_serving_requests", int, 1, MAX_REQUESTS),
                           windows=number_of(config, "hwregress_serving_windows", int, MIN_WINDOWS, MAX_WINDOWS))


def _rates(config: pytest.Config, ini: str) -> tuple[float, ...] | None:
    entries = list_of(config, ini)
    if entries is None:
        return None
    source = value_of(config, ini)[1]
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


def _clients(config: pytest.Config) -> tuple[int, ...] | None:
    entries = list_of(config, "hwregress_serving_concurrency")
    if entries is None:
        return None
    source = value_of(config, "hwregress_serving_concurrency")[1]
    clients = []
    for entry in entries:
        if not entry.isdigit() or not 1 <= int(entry) <= MAX_CLIENTS:
            raise pytest.UsageError(f"{source}: closed-loop clients {entry!r} is not a whole number in "
                                    f"[1, {MAX_CLIENTS}]")
        clients.append(int(entry))
    return tuple(clients)


def _sweep(config: pytest.Config) -> tuple[float, ...] | None:
    rates = _rates(config, "hwregress_serving_sweep")
    if rates is not None and len(rates) < 2:
        raise pytest.UsageError(f"{value_of(config, 'hwregress_serving_sweep')[1]}: a rate sweep needs at least 2 "
                                f"rates, found {len(rates)}; give e.g. 2,4,8,16")
    return rates


def asks_for_serving(config: pytest.Config) -> bool:
    """Whether an option of the serving family was given (it then runs without ``-m serving``)."""
    return any(value_of(config, ini)[0] is not None for ini in IMPLYING)

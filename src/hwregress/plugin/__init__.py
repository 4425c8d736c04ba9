"""The hwregress pytest plugin: the hooks, and only the hooks. Each role lives in its own module, like
pytest-xdist's ``plugin.py`` / ``dsession.py`` / ``remote.py``:

- :mod:`~hwregress.plugin.hookspecs`: the hooks offered to other plugins, each with an example;
- :mod:`~hwregress.plugin.options`: command-line options and ini twins; :mod:`~hwregress.plugin.settings`:
  their values validated into ``Settings``;
- :mod:`~hwregress.plugin.families`: the test families, one module each behind one protocol and one registry: each
  owns its cases, its measurement, the sub-record it fills and its report view;
- :mod:`~hwregress.plugin.parametrize`: every hardware test parametrized over its family's cases (built from the
  axes of :mod:`~hwregress.plugin.matrix`);
- :mod:`~hwregress.plugin.fixture`: the ``hwbench`` fixture, the test's context, and the pytest-benchmark bridge;
- :mod:`~hwregress.plugin.record`: the one record per test, settled on the worker that ran it;
- :mod:`~hwregress.plugin.collector`: the controller, which stores records and writes the outputs;
- :mod:`~hwregress.plugin.alert_hook`: the session's new regressions, drifts and defective hosts to a webhook;
- :mod:`~hwregress.plugin.xdist`: the scheduler that gives each device to one worker;
- :mod:`~hwregress.plugin.visits`: the visit workers of launch-bound tests and when their visits run;
- :mod:`~hwregress.plugin.progress`, :mod:`~hwregress.plugin.tier_header`: the header lines (the tier and its
  estimate among them) and the live lines while scale-out jobs and Spark streams run.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from hwregress.judge.session import BenchSession
from hwregress.measure.memory import freeze_imported_objects
from hwregress.plugin import (
    ab_pool,
    alert_hook,
    hookspecs,
    options,
    progress,
    record,
    store_push,
    tier_header,
    visits,
    xdist,
)
from hwregress.plugin.collector import Collector
from hwregress.plugin.families import registry
from hwregress.plugin.families import spark as spark_family
from hwregress.plugin.fixture import SESSION_KEY, hwbench
from hwregress.plugin.parametrize import SETTINGS_KEY, deselect_without_cases, pytest_generate_tests
from hwregress.plugin.settings import build_settings
from hwregress.store.baselines import BaselineStore

__all__ = ["hwbench", "pytest_generate_tests"]
MARKERS = {
    "cpu": "runs on the CPU device",
    "gpu": "runs on a CUDA device",
    "mps": "runs on an Apple MPS device",
    "train": "times a training step (forward, loss, backward, optimizer step)",
    "infer": "times an inference-mode forward pass",
    "prefill": "times a causal LM's prompt pass (tokens/s)",
    "decode": "times autoregressive generation with a KV cache (output tokens/s, per-token latency)",
}  # and each family's marker (hwregress.plugin.families.registry.markers)
# the suite's test modules are imported by the repository's bench_tests/ re-exports: keep pytest's assert messages
pytest.register_assert_rewrite("hwregress.suite")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)
    progress.add_options(parser)


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> Generator[None, Any, Any]:
    # a wrapper runs before every plain implementation, whatever the registration order: xdist's own (tryfirst too)
    # turns "no --dist" into "--dist load", and an entry point may be registered before xdist's
    xdist.choose_scheduling(config)
    return (yield)


def pytest_configure(config: pytest.Config) -> None:
    try:
        registry.load_entry_points()
    except registry.FamilyError as error:
        raise pytest.UsageError(str(error)) from None
    for name, description in {**MARKERS, **registry.markers()}.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    for family in registry.families():  # a family may implement pytest hooks of its own
        config.pluginmanager.register(family, f"hwregress-family-{family.name}")
    settings = config.stash[SETTINGS_KEY] = build_settings(config)
    fleet = store_push.fleet_judge(settings.store_url) if settings.store_url else None
    config.stash[SESSION_KEY] = BenchSession(BaselineStore(settings.baseline_dir), settings.policy, fleet)
    xdist.register(config)
    if settings.ab is not None:
        ab_pool.register(config, settings.ab.stacks, settings.ab.timeout_s, settings.workload_modules)
    else:  # an A/B session's windows run in its stacks' workers already
        visits.register(config, settings.visits, settings.plan, settings.telemetry_interval_s,
                        settings.cudnn_benchmark, settings.workload_modules,
                        lambda item: registry.traits(registry.family_of(item)).worker_window)
    if not xdist.is_worker(config):
        config.pluginmanager.register(Collector(config, settings), "hwregress-collector")
        alert_hook.register(config)  # after the collector: the alerts name what it wrote
        spark_family.warn_of_a_shared_gpu(config, settings.spark, settings.selection.devices)


def pytest_report_header(config: pytest.Config) -> list[str]:
    settings = config.stash[SETTINGS_KEY]
    lines = progress.header_lines(config, settings.selection.devices, settings.baseline_dir, settings.history_dir,
                                  settings.ab)
    return lines + tier_header.tier_lines(settings.selection, settings.plan, settings.profile_steps,
                                          config.option.markexpr or "", config.option.keyword or "", settings.visits)


def pytest_sessionstart(session: pytest.Session) -> None:
    progress.start(session.config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_without_cases(config, items)


def pytest_collection_finish(session: pytest.Session) -> None:
    freeze_imported_objects()  # the test modules and what they import, before the first window


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    family = registry.family_of(item)
    record.finish(item, call, outcome.get_result(), family, registry.get(family).view if family else None)

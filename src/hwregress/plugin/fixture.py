"""The ``hwbench`` fixture: the running test's context, through which its family (:mod:`hwregress.plugin.families`)
measures, records and judges it; and the bridge to pytest-benchmark, whose table and ``--benchmark-json`` then show
the same timed rounds."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from hwregress.hardware.devices import describe, environment_fingerprint
from hwregress.hardware.facts import device_kind
from hwregress.hardware.identity import device_identity
from hwregress.judge.session import BenchSession
from hwregress.judge.window_verdict import check_from_terms, window_terms
from hwregress.measure.timing import RoundTimer, VerdictCheck, default_timer
from hwregress.plugin.context import RoundDriver
from hwregress.plugin.families import registry
from hwregress.plugin.families.ab_window import skip_outside_ab
from hwregress.plugin.parametrize import settings
from hwregress.plugin.record import CONCLUSION_KEY, RECORD_KEY, fail_with
from hwregress.plugin.xdist import holding_devices, is_worker
from hwregress.store.assembly import put_conclusion
from hwregress.store.baseline_file import BaselineError
from hwregress.store.judged import Conclusion
from hwregress.store.results import TestRecord

SESSION_KEY = pytest.StashKey[BenchSession]()


class HwBench:
    """The running test's context (:class:`hwregress.plugin.context.BenchContext`): :meth:`measure` hands the test's
    case to its family, which builds the test's one record first (so a failure later still reports what was
    measured), then measures, and judges against the baseline, failing the test with the numbers when the judgement
    says so."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request
        self.item = request.node
        self.config = request.config
        self.settings = settings(self.config)
        self.session = self.config.stash[SESSION_KEY]

    def measure(self, family: str, **params: Any) -> TestRecord:
        """Measure one case of ``family`` (``params``: the case, by axis name, as the test received it:
        ``hwbench.measure("ceiling", device=device, ceiling=ceiling, dtype=dtype)``) and judge it; returns the judged
        record (:meth:`hwregress.plugin.families.protocol.Family.measure`).

        Raises:
            hwregress.plugin.families.registry.FamilyError: no family of that name.
        """
        traits = registry.traits(family)
        if self.settings.ab is not None and not (traits.worker_window or traits.own_ab):
            skip_outside_ab(f"the {family} family")
        return registry.get(family).measure(self, **params)

    def start(self, family: str, device: str, model: str, mode: str, batch_size: Any, dtype: str) -> TestRecord:
        """The test's one record, stashed before anything is measured; what its family declares for the judge
        (:func:`hwregress.plugin.families.registry.traits`) is on it from the start."""
        info = describe(device)
        traits = registry.traits(family)
        record = TestRecord(test_id=self.item.nodeid, family=family, hardware_key=info.hardware_key,
                            device=device, device_name=info.name, model=model, mode=mode, batch_size=batch_size,
                            dtype=dtype, view=registry.get(family).view,
                            environment=environment_fingerprint(device, self.settings.cudnn_benchmark),
                            device_facts=info.facts, identity=device_identity(device), measures_roof=traits.roof,
                            latency_judged=mode in traits.judged_latency_modes,
                            details={"worker": os.environ.get("PYTEST_XDIST_WORKER", "main")})
        self.item.stash[RECORD_KEY] = record
        return record

    def timer(self, device: str) -> RoundTimer:
        return self.config.hook.pytest_hwregress_round_timer(config=self.config, device=device) or default_timer(device)

    def window_check(self, record: TestRecord, key: str) -> VerdictCheck | None:
        """What the timed window's looks decide against the baseline entry ``key``
        (:func:`hwregress.judge.window_verdict.look_decision`); None without a trustworthy entry (judged after the
        window)."""
        return check_from_terms(self.window_terms(record, key))

    def window_terms(self, record: TestRecord, key: str) -> dict[str, Any] | None:
        """The JSON-able terms of :meth:`window_check` (:func:`hwregress.judge.window_verdict.window_terms`), for a
        window that runs in a scale-out job's ranks."""
        assert record.hardware_key is not None
        try:
            entry = self.session.baseline_entry(record.hardware_key, key)
        except BaselineError:
            return None  # the judgement after the window fails the test with the file's error
        policy = self.session.policy
        return window_terms(entry, record.identity, policy.tolerances, device_kind(record.device or "cpu") == "cpu",
                            policy.accept_identity)

    def round_driver(self) -> RoundDriver | None:
        bench = self._benchmark_fixture()
        if bench is None:
            return None
        return lambda run_round, rounds: bench.pedantic(run_round, rounds=rounds, iterations=1, warmup_rounds=0)

    def _benchmark_fixture(self) -> Any:
        """pytest-benchmark's fixture when that plugin is active (it switches itself off under xdist)."""
        if not self.config.pluginmanager.hasplugin("benchmark") or is_worker(self.config) \
                or self.config.getoption("benchmark_disable", False):
            return None  # asking for the fixture then would only earn "fixture was not used" warnings
        try:
            bench = self.request.getfixturevalue("benchmark")
        except pytest.FixtureLookupError:
            return None
        return None if getattr(bench, "disabled", True) else bench

    def benchmark_extra_info(self, record: TestRecord) -> None:
        bench = self._benchmark_fixture()
        if bench is not None:
            bench.extra_info.update(throughput=record.throughput, unit=record.unit, latency_ms=record.latency_ms,
                                    peak_memory_bytes=record.peak_memory_bytes,
                                    steps_per_round=record.steps_per_round, batch_size=record.batch_size,
                                    hardware_key=record.hardware_key)

    def conclude(self, record: TestRecord, key: str, extra_failures: list[str] | None = None) -> TestRecord:
        """Judge ``record`` against its baseline entry ``key`` (:meth:`hwregress.judge.session.BenchSession.conclude`)
        and :meth:`settle` it.

        Raises:
            pytest's failure: the conclusion's failures, or a baselines file or entry that cannot be trusted.
        """
        try:
            conclusion = self.session.conclude(record, key, extra_failures)
        except BaselineError as error:
            fail_with(str(error))
        return self.settle(record, conclusion)

    def settle(self, record: TestRecord, conclusion: Conclusion) -> TestRecord:
        """Put ``conclusion`` on ``record`` (all but the verdict: :func:`hwregress.store.assembly.put_conclusion`) and
        keep it for the test's report, where the verdict is settled with pytest's outcome
        (:func:`hwregress.plugin.record.finish`).

        Raises:
            pytest's failure: the conclusion has failures (their sentences, one a line).
        """
        put_conclusion(record, conclusion)
        self.item.stash[CONCLUSION_KEY] = conclusion
        if conclusion.failures:
            pytest.fail("\n".join(conclusion.failures), pytrace=False)
        return record


@pytest.fixture
def hwbench(request: pytest.FixtureRequest) -> Iterator[HwBench]:
    """The running test's context; see :class:`HwBench`. Under xdist the test holds its CUDA device's lock meanwhile
    (:func:`hwregress.plugin.xdist.holding_devices`)."""
    callspec = getattr(request.node, "callspec", None)
    device = callspec.params.get("device") if callspec is not None else None
    with holding_devices(request, [device] if device else []):
        yield HwBench(request)

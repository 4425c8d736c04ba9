"""The pytest plugin: options, markers, the ``hwbench`` fixture, xdist-safe result collection, and the
session-end results file and HTML report.

Per-test records travel to the controller on ``report.user_properties`` (JSON-able dicts), so the
same code path serves a serial run and ``-n N``; only the controller writes ``results.json`` and the
report. Workers write baselines themselves, under the store's file lock.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import platform
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hwregress import ceilings, parity, roofline, workloads
from hwregress.baselines import BaselineError, BaselineStore, entry_key
from hwregress.bench import OutOfMemory, RunOptions, run_model
from hwregress.compare import Tolerances
from hwregress.devices import describe, environment_fingerprint, parse_device_list, unavailable_reason, visible_devices
from hwregress.journal import Journal
from hwregress.lifecycle import UPDATE_MODES
from hwregress.matrix import Selection, validate
from hwregress.results import SessionResults, TestRecord
from hwregress.session import BenchSession, Policy, fill_measurement
from hwregress.stats import summarize
from hwregress.timing import RoundTimer, TimingPlan, default_timer

RECORD_PROPERTY = "hwregress.record"
IDENTITY_PROPERTY = "hwregress.identity"
JOURNAL_NAME = ".results.partial.jsonl"  # under the report dir, while a session runs


@dataclass(frozen=True)
class Settings:
    """Everything the options decided, validated once per process."""

    selection: Selection
    plan: TimingPlan
    policy: Policy
    baseline_dir: Path
    report_dir: Path
    telemetry_interval_s: float
    profile_steps: int
    trace: bool
    write_report: bool


SETTINGS_KEY = pytest.StashKey[Settings]()
SESSION_KEY = pytest.StashKey[BenchSession]()


class HookSpecs:
    @pytest.hookspec(firstresult=True)
    def pytest_hwregress_round_timer(self, config: pytest.Config, device: str) -> RoundTimer | None:
        """Return the :class:`hwregress.timing.RoundTimer` for ``device``, or None for the default (CUDA
        events on CUDA, synchronized host clock elsewhere). Self-tests use it to inject a known clock."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(HookSpecs)


# (option, ini name, default, help); every option has an ini twin so CI runners can pin them.
_OPTIONS: tuple[tuple[str, str, str | None, str], ...] = (
    ("--devices", "hwregress_devices", None, "comma list of devices: cpu, cuda, cuda:N, mps (default: all visible)"),
    ("--models", "hwregress_models", None, "comma list of models (default: per device; CPU: a few small ones, GPU: the zoo)"),
    ("--batch-sizes", "hwregress_batch_sizes", None, "comma list of batch sizes for every mode (default: per device and mode)"),
    ("--modes", "hwregress_modes", "train,infer", "comma list of modes: train, infer"),
    ("--dtypes", "hwregress_dtypes", "fp32", "comma list of numerics: fp32, tf32, bf16, fp16 (autocast)"),
    ("--baseline-dir", "hwregress_baseline_dir", "baselines", "folder of the per-hardware baselines files"),
    ("--report-dir", "hwregress_report_dir", "reports", "folder for results.json and report.html"),
    ("--tolerance", "hwregress_tolerance", "0.05", "throughput loss tolerated, fraction (raised by baseline noise)"),
    ("--memory-tolerance", "hwregress_memory_tolerance", "0.10", "peak-memory growth tolerated, fraction"),
    ("--rounds", "hwregress_rounds", "10", "timed rounds per test (>= 5 for significance at alpha 0.01)"),
    ("--warmup", "hwregress_warmup", "3", "untimed warmup steps"),
    ("--min-round-time", "hwregress_min_round_time", "0.1", "seconds a timed round lasts at least"),
    ("--time-budget", "hwregress_time_budget", "30", "seconds of timed rounds a noisy test may extend to"),
    ("--telemetry-interval", "hwregress_telemetry_interval", "0.1", "telemetry sampling interval, seconds"),
    ("--profile-steps", "hwregress_profile_steps", "3", "steps in the separate profiled window (0: no profile, no FLOPs)"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hwregress", "hardware regression benchmarks")
    for flag, ini, default, help_text in _OPTIONS:
        group.addoption(flag, dest=ini, default=None, help=f"{help_text} [ini: {ini}]")
        parser.addini(ini, help_text, default=default)
    group.addoption("--update-baselines", dest="hwregress_update", nargs="?", const="all", default=None,
                    metavar="all|missing|force",
                    help="record this hardware's baselines: all (default; regressions kept), missing (new only), "
                         "force (accept regressions too)")
    group.addoption("--require-baselines", action="store_true", dest="hwregress_require",
                    help="a test without a baseline fails instead of passing as 'new'")
    group.addoption("--strict-env", action="store_true", dest="hwregress_strict_env",
                    help="fail tests whose torch/CUDA/cuDNN/driver differ from the baseline's")
    group.addoption("--save-traces", action="store_true", dest="hwregress_trace",
                    help="save each test's Chrome trace under <report-dir>/traces/")
    group.addoption("--no-hwregress-report", action="store_true", dest="hwregress_no_report",
                    help="do not write results.json and report.html")


def _value(config: pytest.Config, ini: str) -> tuple[str | None, str]:
    """The option's value and where it came from (for error messages)."""
    flag = next(f for f, i, _, _ in _OPTIONS if i == ini)
    cli = config.getoption(ini)
    if cli is not None:
        return cli, flag
    return config.getini(ini) or None, f"ini option {ini}"


def _number(config: pytest.Config, ini: str, kind: Callable[[str], Any], low: float, high: float) -> Any:
    raw, source = _value(config, ini)
    try:
        value = kind(str(raw))
    except ValueError:
        raise pytest.UsageError(f"{source}={raw!r} is not a {kind.__name__}") from None
    if not low <= value <= high:
        raise pytest.UsageError(f"{source}={raw!r} is out of range; use a value in [{low}, {high}]")
    return value


def _list(config: pytest.Config, ini: str) -> tuple[list[str] | None, str]:
    raw, source = _value(config, ini)
    if raw is None:
        return None, source
    return [part.strip() for part in str(raw).split(",") if part.strip()], source


def build_settings(config: pytest.Config) -> Settings:
    """Validate every option.

    Raises:
        pytest.UsageError: a bad device, model, mode, dtype, batch size or number; the message names
            the value, the option (or ini key) it came from, and the valid values.
    """
    raw_devices, device_source = _value(config, "hwregress_devices")
    try:
        devices = parse_device_list(raw_devices, device_source) if raw_devices else _default_devices()
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    models, _ = _list(config, "hwregress_models")
    modes, _ = _list(config, "hwregress_modes")
    dtypes, _ = _list(config, "hwregress_dtypes")
    batch_text, batch_source = _list(config, "hwregress_batch_sizes")
    try:
        batch_sizes = [int(b) for b in batch_text] if batch_text is not None else None
    except ValueError:
        given = ",".join(batch_text or [])
        raise pytest.UsageError(f"{batch_source}: batch sizes must be whole numbers, got {given!r}") from None
    selection = Selection(devices, models, batch_sizes, modes or [], dtypes or [])
    try:
        validate(selection)
    except (KeyError, ValueError) as error:
        raise pytest.UsageError(f"hwregress: {error.args[0]}") from None
    update = config.getoption("hwregress_update")
    if update is not None and update not in UPDATE_MODES:
        raise pytest.UsageError(f"--update-baselines={update!r}: use one of {', '.join(UPDATE_MODES)} (or no value for all)")
    plan = TimingPlan(
        warmup_steps=_number(config, "hwregress_warmup", int, 1, 10_000),
        rounds=_number(config, "hwregress_rounds", int, 3, 100_000),
        min_round_s=_number(config, "hwregress_min_round_time", float, 1e-6, 3600),
        budget_s=_number(config, "hwregress_time_budget", float, 1e-3, 86_400),
    )
    tolerances = Tolerances(
        throughput=_number(config, "hwregress_tolerance", float, 0.0, 0.99),
        memory=_number(config, "hwregress_memory_tolerance", float, 0.0, 100.0),
    )
    policy = Policy(tolerances, update, config.getoption("hwregress_require"), config.getoption("hwregress_strict_env"))
    root = config.rootpath
    return Settings(
        selection=selection,
        plan=plan,
        policy=policy,
        baseline_dir=root / str(_value(config, "hwregress_baseline_dir")[0]),
        report_dir=root / str(_value(config, "hwregress_report_dir")[0]),
        telemetry_interval_s=_number(config, "hwregress_telemetry_interval", float, 0.001, 60),
        profile_steps=_number(config, "hwregress_profile_steps", int, 0, 1000),
        trace=config.getoption("hwregress_trace"),
        write_report=not config.getoption("hwregress_no_report"),
    )


def _default_devices() -> list[str]:
    """Every visible device; ``cuda:0`` too when none is visible, so ``pytest -m gpu`` on a machine
    without a GPU reports skipped tests with the reason instead of collecting nothing."""
    found = visible_devices()
    return found if any(d.startswith("cuda") for d in found) else [*found, "cuda:0"]


def settings(config: pytest.Config) -> Settings:
    """This process's validated settings (fixtures/ read the selection from here)."""
    return config.stash[SETTINGS_KEY]


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


DEVICE_SCHEDULING_KEY = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # With -n and no --dist of the user's, give each device to one worker (see xdist_scheduling), so two
    # timing tests never share a device.
    numprocesses = getattr(config.option, "numprocesses", None)
    if numprocesses and getattr(config.option, "dist", "no") == "no":
        config.option.dist = "load"
        config.stash[DEVICE_SCHEDULING_KEY] = True


class XdistHooks:
    """Registered on the controller only when pytest-xdist is present (its hook specs exist only then)."""

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if not config.stash.get(DEVICE_SCHEDULING_KEY, False):
            return None  # the user chose a --dist mode: respect it
        from hwregress.xdist_scheduling import DeviceScheduling

        return DeviceScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if not is_worker(config) and config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(), "hwregress-xdist")
    for line in ("cpu", "gpu", "mps", "train", "infer", "throughput", "parity", "speedup", "ceiling"):
        config.addinivalue_line("markers", f"{line}: hwregress test family or device marker")
    config.stash[SETTINGS_KEY] = build_settings(config)
    current = config.stash[SETTINGS_KEY]
    config.stash[SESSION_KEY] = BenchSession(BaselineStore(current.baseline_dir), current.policy)
    if not is_worker(config):
        config.pluginmanager.register(ResultsCollector(config), "hwregress-results")


def test_id_of(item: pytest.Item) -> str:
    """The node id without xdist's ``@group`` suffix, so serial and distributed runs agree."""
    nodeid = item.nodeid
    marker = item.get_closest_marker("xdist_group")
    if marker is not None:
        group = marker.kwargs.get("name", marker.args[0] if marker.args else None)
        if group and nodeid.endswith(f"@{group}"):
            nodeid = nodeid[: -len(group) - 1]
    return nodeid


def pytest_runtest_setup(item: pytest.Item) -> None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or "device" not in callspec.params:
        return
    identity = {k: callspec.params.get(k) for k in ("device", "workload", "mode", "batch_size", "dtype", "ceiling")}
    identity["test_id"] = test_id_of(item)
    item.user_properties.append((IDENTITY_PROPERTY, identity))


class HwBench:
    """The ``hwbench`` fixture: runs a measurement, judges it, records it, and asserts."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request
        self.item = request.node
        self.config = request.config
        self.settings = settings(self.config)
        self.session = self.config.stash[SESSION_KEY]

    # -- measurements -------------------------------------------------------------------------------
    def throughput(self, device: str, model: str, mode: str, batch_size: int, dtype: str) -> TestRecord:
        """Benchmark ``model`` in ``mode`` and assert throughput and peak memory against the baseline."""
        record = self._record("throughput", device, model, mode, batch_size, dtype)
        measurement = self._run_model(record, model, device, mode, batch_size, dtype, self._round_driver())
        fill_measurement(record, measurement)
        self._benchmark_extra_info(record)
        return self._conclude(record, entry_key("throughput", model, mode, batch_size, dtype))

    def speedup(self, device: str, model: str, batch_size: int, dtype: str = "fp32") -> TestRecord:
        """Measure ``model`` training on ``device`` and on the CPU in this session; assert the speedup."""
        record = self._record("speedup", device, model, "train", batch_size, dtype)
        gpu = self._run_model(record, model, device, "train", batch_size, dtype, self._round_driver(), profile_steps=0)
        # the CPU side of a GPU-sized batch is slow: one warmup step and the minimum of rounds
        cpu_plan = dataclasses.replace(self.settings.plan, warmup_steps=1, rounds=5)
        cpu = self._run_model(record, model, "cpu", "train", batch_size, dtype, None, cpu_plan, profile_steps=0)
        fill_measurement(record, gpu)
        cpu_median = summarize(cpu.throughput_samples).median
        record.speedup = record.throughput / cpu_median if record.throughput else None
        record.details["cpu_throughput"] = cpu_median
        return self._conclude(record, entry_key("speedup", model, "train", batch_size, dtype))

    def ceiling(self, device: str, name: str, dtype: str) -> TestRecord:
        """Measure one roof of ``device`` (``gemm``, ``copy``, ``h2d``) and assert it against the baseline."""
        spec = ceilings.default_spec(name, device)
        record = self._record("ceiling", device, name, "roof", spec.size, dtype)
        record.unit = spec.unit
        measurement = ceilings.run_ceiling(spec, device, dtype, self._timer(device), self.settings.plan,
                                           self.settings.telemetry_interval_s, self._round_driver())
        fill_measurement(record, measurement)
        peak = roofline.published_peak(record.device_name or "")
        if peak is not None:
            record.details.update(published=peak.roof(name, dtype), published_source=peak.source)
        self._benchmark_extra_info(record)
        return self._conclude(record, entry_key("ceiling", name, "roof", spec.size, dtype))

    def digits_accuracy(self, device: str, dtype: str, cpu_accuracy: Callable[[], float]) -> TestRecord:
        """Train the digits CNN on ``device``; assert accuracy against the baseline and, off the CPU,
        against the CPU's accuracy in this session."""
        record = self._record("parity", device, "digits_cnn", "train", parity.DIGITS_BATCH, dtype)
        record.unit = "accuracy"
        started = time.perf_counter()
        record.accuracy = parity.train_digits(device, dtype)
        record.duration_s = time.perf_counter() - started
        failures = []
        if not device.startswith("cpu"):
            record.reference_accuracy = cpu_accuracy()
            margin = self.session.policy.tolerances.device_accuracy_margin
            if abs(record.accuracy - record.reference_accuracy) > margin:
                failures.append(f"{record.test_id}: digits accuracy {record.accuracy:.4f} on {device} differs from the "
                                f"CPU's {record.reference_accuracy:.4f} by more than {margin:.3f}")
        return self._conclude(record, entry_key("parity", "digits_cnn", "train", parity.DIGITS_BATCH, dtype), failures)

    def output_parity(self, device: str, model: str, dtype: str) -> TestRecord:
        """Compare ``model``'s outputs on ``device`` in ``dtype`` with the CPU fp32 reference."""
        record = self._record("output-parity", device, model, "infer", 8, dtype)
        record.unit = "top-1 agreement"
        result = parity.output_parity(workloads.get(model), device, dtype)
        record.accuracy = result.top1_agreement
        record.details.update(relative_error=result.relative_error, max_abs_error=result.max_abs_error,
                              tolerance=result.tolerance, decisive_agreement=result.decisive_agreement)
        failures = [] if result.ok else [
            f"{record.test_id}: outputs differ from the CPU fp32 reference: relative error "
            f"{result.relative_error:.3g} (tolerance {result.tolerance:.3g} for {dtype}), top-1 agreement "
            f"{result.top1_agreement:.3f}, decisive agreement {result.decisive_agreement:.3f} (must be 1)"]
        return self._conclude(record, entry_key("output-parity", model, "infer", 8, dtype), failures)

    # -- plumbing ---------------------------------------------------------------------------------
    def _record(self, family: str, device: str, model: str, mode: str, batch_size: int, dtype: str) -> TestRecord:
        info = describe(device)
        record = TestRecord(test_id=test_id_of(self.item), family=family, hardware_key=info.hardware_key,
                            device=device, device_name=info.name, model=model, mode=mode, batch_size=batch_size,
                            dtype=dtype, environment=environment_fingerprint(device))
        record.details["device_facts"] = info.facts
        record.details["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "main")
        return record

    def _timer(self, device: str) -> RoundTimer:
        return self.config.hook.pytest_hwregress_round_timer(config=self.config, device=device) or default_timer(device)

    def _run_model(self, record: TestRecord, model: str, device: str, mode: str, batch_size: int, dtype: str,
                   round_driver: Callable[[Callable[[], None], int], None] | None,
                   plan: TimingPlan | None = None, profile_steps: int | None = None) -> Any:
        trace = None
        if self.settings.trace:
            trace = self.settings.report_dir / "traces" / f"{_safe_name(record.test_id)}-{device.replace(':', '')}.json"
            record.trace_path = str(trace)
        options = RunOptions(plan or self.settings.plan, self.settings.telemetry_interval_s,
                             self.settings.profile_steps if profile_steps is None else profile_steps, trace, round_driver)
        try:
            return run_model(workloads.get(model), device, mode, batch_size, dtype, self._timer(device), options)
        except OutOfMemory as error:
            record.verdict, record.message = "oom", str(error)
            self._attach(record)
            pytest.skip(str(error))

    def _round_driver(self) -> Callable[[Callable[[], None], int], None] | None:
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

    def _benchmark_extra_info(self, record: TestRecord) -> None:
        bench = self._benchmark_fixture()
        if bench is not None:
            bench.extra_info.update(throughput=record.throughput, unit=record.unit, latency_ms=record.latency_ms,
                                    peak_memory_bytes=record.peak_memory_bytes,
                                    steps_per_round=record.steps_per_round, batch_size=record.batch_size,
                                    hardware_key=record.hardware_key)

    def _conclude(self, record: TestRecord, key: str, extra_failures: list[str] | None = None) -> TestRecord:
        try:
            failures = self.session.conclude(record, key, extra_failures)
        except BaselineError as error:
            record.message = str(error)
            self._attach(record)
            pytest.fail(str(error), pytrace=False)
        self._attach(record)
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
        return record

    def _attach(self, record: TestRecord) -> None:
        # plain JSON types only: xdist's execnet refuses str subclasses (torch's TorchVersion), numpy scalars
        plain = json.loads(json.dumps(record.to_json(), default=str))
        self.item.user_properties.append((RECORD_PROPERTY, plain))


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[-150:]


@pytest.fixture
def hwbench(request: pytest.FixtureRequest) -> HwBench:
    """Runs hwregress measurements inside a test; see :class:`HwBench`."""
    return HwBench(request)


# -- controller side: collect records, write results and the report --------------------------------
class ResultsCollector:
    """Registered on the controller only (never on an xdist worker): gathers every test's record from
    its reports and writes results.json and the report when the session ends, interrupted or not."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.records: dict[str, TestRecord] = {}
        self.paths: dict[str, Path] = {}
        self.started = time.time()
        self.journal: Journal | None = None
        self.recovered: Path | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        current = settings(self.config)
        if not current.write_report:
            return
        journal_path = current.report_dir / JOURNAL_NAME
        if journal_path.exists():  # left by a session that died before it could write its results
            stamp = _dt.datetime.fromtimestamp(journal_path.stat().st_mtime).strftime("%Y%m%d-%H%M%S")
            self.recovered = current.report_dir / "archive" / f"results-{stamp}-unfinished.jsonl"
            self.recovered.parent.mkdir(parents=True, exist_ok=True)
            journal_path.replace(self.recovered)
        self.journal = Journal(journal_path)

    def _store(self, record: TestRecord) -> None:
        self.records[record.test_id] = record
        if self.journal is not None:
            self.journal.append(record)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        properties = dict(report.user_properties) if report.user_properties else {}
        identity = properties.get(IDENTITY_PROPERTY)
        if RECORD_PROPERTY in properties:
            record = TestRecord.from_json(properties[RECORD_PROPERTY])
            if report.when == "call" or record.test_id not in self.records:
                record.outcome = report.outcome
                self._store(record)
            elif report.failed:  # a teardown error after the measurement
                self.records[record.test_id].outcome = "failed"
                self._store(self.records[record.test_id])
            return
        if identity is None:
            return
        test_id = identity["test_id"]
        if report.failed or report.skipped:
            record = self.records.get(test_id) or _record_from_identity(identity)
            reason = _short_reason(report)
            record.outcome = report.outcome
            record.message = record.message or reason
            if record.verdict == "new":
                record.verdict = _verdict_from_skip(reason) if report.skipped else "failed"
            self._store(record)
        elif report.when == "call" and test_id not in self.records:
            record = _record_from_identity(identity)
            record.outcome, record.verdict = "passed", "pass"
            self._store(record)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        current = settings(self.config)
        if self.records and current.write_report:
            from hwregress.report import write_outputs

            results = SessionResults(self._meta(int(exitstatus)), list(self.records.values()))
            self.paths = write_outputs(results, current.report_dir)
        if self.journal is not None:
            self.journal.close(remove=True)  # the results file now holds everything it held

    def _meta(self, exitstatus: int) -> dict[str, Any]:
        current = settings(self.config)
        hardware = []
        for device in current.selection.devices:
            reason = unavailable_reason(device)
            if reason is None:
                info = describe(device)
                hardware.append({"device": device, "name": info.name, "hardware_key": info.hardware_key,
                                 "total_memory_bytes": info.total_memory_bytes, "facts": info.facts,
                                 "environment": environment_fingerprint(device)})
            else:
                hardware.append({"device": device, "unavailable": reason})
        return {
            "hostname": socket.gethostname(),
            "started_at": _dt.datetime.fromtimestamp(self.started, _dt.timezone.utc).isoformat(timespec="seconds"),
            "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "duration_s": time.time() - self.started,
            "exitstatus": exitstatus,
            "interrupted": exitstatus == int(pytest.ExitCode.INTERRUPTED),
            "args": list(self.config.invocation_params.args),
            "workers": getattr(self.config.option, "numprocesses", None) or 0,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "hardware": hardware,
            "baseline_dir": str(current.baseline_dir),
            "update_mode": current.policy.update_mode,
            "tolerances": vars(current.policy.tolerances),
            "pid": os.getpid(),
        }

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.records:
            return
        results = SessionResults({}, list(self.records.values()))
        terminalreporter.section("hwregress")
        terminalreporter.write_line(", ".join(f"{count} {verdict}" for verdict, count in results.counts().items()))
        for record in sorted(self.records.values(), key=lambda r: r.test_id):
            if record.verdict in ("regression", "failed", "env-changed", "unstable", "improvement", "oom"):
                terminalreporter.write_line(f"  {record.verdict:<12} {record.test_id}: {record.message[:300]}")
        for name, path in self.paths.items():
            terminalreporter.write_line(f"{name}: {path}")
        if self.recovered is not None:
            terminalreporter.write_line(f"an earlier session died before writing its results; what it finished is in "
                                        f"{self.recovered} (render it: python -m hwregress report render {self.recovered} "
                                        "-o FILE.html)")


def _record_from_identity(identity: dict[str, Any]) -> TestRecord:
    return TestRecord(test_id=identity["test_id"], device=identity.get("device"),
                      model=identity.get("workload") or identity.get("ceiling"), mode=identity.get("mode"),
                      batch_size=identity.get("batch_size"), dtype=identity.get("dtype"))


def _short_reason(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    text = getattr(report, "longreprtext", "") or ""
    return text.strip().splitlines()[-1][:500] if text.strip() else ""


def _verdict_from_skip(reason: str) -> str:
    if reason.startswith("out of memory"):
        return "oom"
    if reason.startswith("unsupported"):
        return "unsupported"
    return "skipped"

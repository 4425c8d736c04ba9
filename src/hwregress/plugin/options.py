"""Command-line options with ini twins, validated once per process into the frozen :class:`Settings`.

Every option has an ini twin (``hwregress_*``) so a CI runner can pin it in its pytest configuration; every
error names the flag or ini key the bad value came from, the value, and what would be valid.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hwregress.hardware.devices import parse_device_list, visible_devices
from hwregress.judge.compare import Tolerances
from hwregress.judge.lifecycle import UPDATE_MODES
from hwregress.judge.session import Policy
from hwregress.measure.timing import TimingPlan
from hwregress.plugin.matrix import MAX_BATCH, OPT_IN_EVERYWHERE, OPT_IN_ON_CPU, Selection, validate
from hwregress.scaleout.topology import Topology
from hwregress.spark.engine import parse_conf
from hwregress.spark.settings import SparkSettings
from hwregress.workloads import plugins as workload_plugins


@dataclass(frozen=True)
class Option:
    """One option: its flag, ini twin, default (as the ini would spell it) and help text."""

    flag: str
    ini: str
    default: str | None
    help: str
    is_list: bool = False


OPTIONS: tuple[Option, ...] = (
    Option("--devices", "hwregress_devices", None, "devices: cpu, cuda, cuda:N, mps (default: all visible)", True),
    Option("--models", "hwregress_models", None, "models (default: per device; CPU: a few small ones, GPU: the zoo)", True),
    Option("--workloads", "hwregress_workloads", None,
           "modules to import that register workloads of your own (installed plugins load by entry point)", True),
    Option("--batch-sizes", "hwregress_batch_sizes", None,
           "batch sizes for every mode, or max: the largest power of two that fits (default: per workload, device, mode)",
           True),
    Option("--modes", "hwregress_modes", None,
           "modes: train, infer, and for causal LMs prefill, decode (default: each model's tier modes)", True),
    Option("--dtypes", "hwregress_dtypes", "fp32", "numerics: fp32, tf32, bf16, fp16 (autocast)", True),
    Option("--compile", "hwregress_compile", "eager",
           "compilation: eager, inductor, inductor-max-autotune, cudagraphs (compile time recorded apart)", True),
    Option("--memory-format", "hwregress_memory_format", "contiguous",
           "memory formats: contiguous, channels_last (convolutional models)", True),
    Option("--world-sizes", "hwregress_world_sizes", None,
           "ranks of the scaling family's jobs (default: powers of two up to the GPUs x nodes; CPU: 1, 2 per node)", True),
    Option("--colocate", "hwregress_colocate", None,
           "co-located process groups, MODEL+MODEL[+...] (default: two processes of one small model per device)", True),
    Option("--nnodes", "hwregress_nnodes", "1", "nodes every distributed job spans (run the same command on each)"),
    Option("--node-rank", "hwregress_node_rank", "0", "this node's rank, 0..nnodes-1 (node 0 writes the records)"),
    Option("--rdzv-endpoint", "hwregress_rdzv_endpoint", None,
           "HOST:PORT of node 0 for the c10d rendezvous (that port and the next must be free on node 0)"),
    Option("--dist-timeout", "hwregress_dist_timeout", "300",
           "seconds a distributed job's rank may go without progress before the test fails and the job is ended"),
    Option("--spark-master", "hwregress_spark_master", None,
           "master URL of the spark family's session: local[N], spark://HOST:PORT, yarn, k8s://... (default: local[cores])"),
    Option("--spark-rows", "hwregress_spark_rows", None,
           "rows of the spark family's batch data set (default: CPU 2048, GPU 16384)"),
    Option("--spark-stream-rate", "hwregress_spark_stream_rate", None,
           "images per second the spark family's stream producer writes (default: CPU 20, GPU 200)"),
    Option("--spark-stream-images", "hwregress_spark_stream_images", None,
           "images the spark family's stream measures (default: 15 s at the rate)"),
    Option("--baseline-dir", "hwregress_baseline_dir", "baselines", "folder of the per-hardware baselines files"),
    Option("--report-dir", "hwregress_report_dir", "reports", "folder for results.json and report.html"),
    Option("--history-dir", "hwregress_history_dir", None,
           "folder of the session history, one <hardware-key>.jsonl (default: <report-dir>/history); keep it between CI runs"),
    Option("--summary-md", "hwregress_summary_md", None, "also write the Markdown job summary to this file"),
    Option("--tolerance", "hwregress_tolerance", None,
           "throughput loss tolerated, fraction (raised by measured noise; default 0.05 on accelerators, 0.15 on the CPU)"),
    Option("--max-threshold", "hwregress_max_threshold", "0.25", "no noise or history bound raises the threshold past this"),
    Option("--memory-tolerance", "hwregress_memory_tolerance", "0.10", "peak-memory growth tolerated, fraction"),
    Option("--rounds", "hwregress_rounds", "10", "timed rounds per test (>= 5 for significance at alpha 0.01)"),
    Option("--warmup", "hwregress_warmup", "3", "untimed warmup steps"),
    Option("--min-round-time", "hwregress_min_round_time", "0.1", "seconds a timed round lasts at least"),
    Option("--time-budget", "hwregress_time_budget", "30",
           "seconds of timed rounds a noisy test, or one whose verdict is still open, may extend to"),
    Option("--confirm-time", "hwregress_confirm_time", "10",
           "seconds of timed rounds a window leaning to a regression runs before it is judged (within --time-budget)"),
    Option("--telemetry-interval", "hwregress_telemetry_interval", "0.1", "telemetry sampling interval, seconds"),
    Option("--profile-steps", "hwregress_profile_steps", "3", "steps in the separate profiled window (0: no profile, no FLOPs)"),
    Option("--cudnn-benchmark", "hwregress_cudnn_benchmark", "on",
           "torch.backends.cudnn.benchmark during every window: on (what training jobs run) or off; fingerprinted"),
)
_BY_INI = {option.ini: option for option in OPTIONS}


@dataclass(frozen=True)
class Settings:
    """Everything the options decided, validated once per process."""

    selection: Selection
    plan: TimingPlan
    policy: Policy
    baseline_dir: Path
    report_dir: Path
    summary_md: Path | None
    history_dir: Path | None
    telemetry_interval_s: float
    profile_steps: int
    cudnn_benchmark: bool
    trace: bool
    write_report: bool
    topology: Topology = field(default_factory=Topology)
    dist_timeout_s: float = 300.0
    workload_modules: tuple[str, ...] = ()  # --workloads: the ranks of a distributed job import them too
    spark: SparkSettings = field(default_factory=SparkSettings)


def add_options(parser: pytest.Parser) -> None:
    """Register the options and their ini twins."""
    group = parser.getgroup("hwregress", "hardware regression benchmarks")
    for option in OPTIONS:
        group.addoption(option.flag, dest=option.ini, default=None, help=f"{option.help} [ini: {option.ini}]")
        parser.addini(option.ini, option.help, type="args" if option.is_list else "string", default=option.default)
    group.addoption("--update-baselines", dest="hwregress_update", nargs="?", const="all", default=None,
                    metavar="all|missing|force|reset",
                    help="record this hardware's baselines: all (default; regressions and unstable windows kept), "
                         "missing (new only), force (add even regressions to the pool, repair bad entries), "
                         "reset (start every entry afresh from this session)")
    group.addoption("--require-baselines", action="store_true", dest="hwregress_require",
                    help="a test without a baseline fails instead of passing as 'new'")
    group.addoption("--strict-env", action="store_true", dest="hwregress_strict_env",
                    help="fail tests whose torch/CUDA/cuDNN/driver differ from the baseline's")
    group.addoption("--accept-identity", action="store_true", dest="hwregress_accept_identity",
                    help="judge against a baseline recorded on hardware of another identity (compare anyway)")
    group.addoption("--save-traces", action="store_true", dest="hwregress_trace",
                    help="save each test's Chrome trace under <report-dir>/traces/")
    group.addoption("--spark-conf", action="append", dest="hwregress_spark_conf", default=None, metavar="KEY=VALUE",
                    help="a Spark setting for the spark family's session, e.g. spark.executor.memory=4g (repeatable) "
                         "[ini: hwregress_spark_conf, one per line]")
    parser.addini("hwregress_spark_conf", "Spark settings KEY=VALUE, one per line", type="linelist", default=[])
    group.addoption("--no-history", action="store_true", dest="hwregress_no_history",
                    help="do not append this session to the history (--history-dir)")
    group.addoption("--no-hwregress-report", action="store_true", dest="hwregress_no_report",
                    help="do not write results.json and report.html")


def build_settings(config: pytest.Config) -> Settings:
    """Validate every option.

    Raises:
        pytest.UsageError: a bad device, model, mode, dtype, batch size, number or folder; the message names
            the value, the option (or ini key) it came from, and the valid values.
    """
    _load_workloads(config)
    policy = _policy(config)
    baseline_dir = _path(config, "hwregress_baseline_dir")
    if policy.update_mode is None and not baseline_dir.is_dir() and _was_given(config, "hwregress_baseline_dir"):
        raise pytest.UsageError(f"{_source(config, 'hwregress_baseline_dir')}={baseline_dir}: no such folder; "
                                "check the spelling, or record into it with --update-baselines")
    summary = _value(config, "hwregress_summary_md")[0]
    report_dir = _path(config, "hwregress_report_dir")
    topology = _topology(config)
    return Settings(
        selection=_selection(config, topology.nnodes),
        plan=_timing_plan(config),
        policy=policy,
        baseline_dir=baseline_dir,
        report_dir=report_dir,
        summary_md=config.rootpath / summary if summary else None,
        history_dir=_history_dir(config, report_dir),
        telemetry_interval_s=_number(config, "hwregress_telemetry_interval", float, 0.001, 60),
        profile_steps=_number(config, "hwregress_profile_steps", int, 0, 1000),
        cudnn_benchmark=_switch(config, "hwregress_cudnn_benchmark"),
        trace=config.getoption("hwregress_trace"),
        write_report=not config.getoption("hwregress_no_report"),
        topology=topology,
        dist_timeout_s=_number(config, "hwregress_dist_timeout", float, 1, 86_400),
        workload_modules=tuple(_list(config, "hwregress_workloads") or ()),
        spark=_spark(config),
    )


def _spark(config: pytest.Config) -> SparkSettings:
    """The ``--spark-*`` options (numbers checked, each setting ``key=value``)."""
    cli = config.getoption("hwregress_spark_conf")
    source = "--spark-conf" if cli is not None else "ini option hwregress_spark_conf"
    try:
        conf = parse_conf(cli if cli is not None else config.getini("hwregress_spark_conf"), source)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    master = _value(config, "hwregress_spark_master")[0]
    if master is not None and not str(master).strip():
        raise pytest.UsageError(f"{_source(config, 'hwregress_spark_master')} is empty; give a master URL or leave it out "
                                "for local[cores]")
    return SparkSettings(
        master=str(master).strip() if master is not None else None, conf=conf,
        rows=_optional_number(config, "hwregress_spark_rows", int, 1, 10_000_000),
        stream_rate=_optional_number(config, "hwregress_spark_stream_rate", float, 0.1, 1_000_000),
        stream_images=_optional_number(config, "hwregress_spark_stream_images", int, 1, 10_000_000))


def _optional_number(config: pytest.Config, ini: str, kind: Callable[[str], Any], low: float, high: float) -> Any:
    return None if _value(config, ini)[0] is None else _number(config, ini, kind, low, high)


def _load_workloads(config: pytest.Config) -> None:
    """Register the workloads of installed plugins (entry point group ``hwregress.workloads``) and of the
    modules ``--workloads`` names, before any model name is checked."""
    try:
        workload_plugins.load_entry_points()
        modules = _list(config, "hwregress_workloads")
        if modules:
            workload_plugins.import_modules(modules, _source(config, "hwregress_workloads"))
    except workload_plugins.WorkloadPluginError as error:
        raise pytest.UsageError(str(error)) from None


def _selection(config: pytest.Config, nnodes: int) -> Selection:
    devices = _devices(config)
    models = _list(config, "hwregress_models")
    modes = _list(config, "hwregress_modes")
    dtypes = _list(config, "hwregress_dtypes")
    batch_sizes = _batch_sizes(config)
    selection = Selection(devices, models, batch_sizes, modes, dtypes or [], _list(config, "hwregress_compile") or ["eager"],
                          _list(config, "hwregress_memory_format") or ["contiguous"], _world_sizes(config),
                          _colocate(config), nnodes, _opted_in(config))
    try:
        validate(selection)
    except (KeyError, ValueError) as error:
        raise pytest.UsageError(f"{_culprit(config, error.args[0])}: {error.args[0]}") from None
    return selection


def _world_sizes(config: pytest.Config) -> list[int] | None:
    entries = _list(config, "hwregress_world_sizes")
    if entries is None:
        return None
    try:
        return [int(entry) for entry in entries]
    except ValueError:
        raise pytest.UsageError(f"{_source(config, 'hwregress_world_sizes')}: world sizes must be whole numbers, got "
                                f"{','.join(entries)!r}") from None


def _opted_in(config: pytest.Config) -> frozenset[str]:
    """The opt-in families (:data:`hwregress.plugin.matrix.OPT_IN_ON_CPU`, :data:`~hwregress.plugin.matrix.OPT_IN_EVERYWHERE`) this
    session asks for: named in the ``-m`` expression, or implied by ``--world-sizes`` (scaling), ``--colocate``
    (colocated) or ``--spark-master`` (spark)."""
    expression = getattr(config.option, "markexpr", "") or ""
    chosen = {family for family in (*OPT_IN_ON_CPU, *OPT_IN_EVERYWHERE) if re.search(rf"\b{family}\b", expression)}
    if _value(config, "hwregress_spark_master")[0] is not None:
        chosen.add("spark")
    if _value(config, "hwregress_world_sizes")[0] is not None:
        chosen.add("scaling")
    if _value(config, "hwregress_colocate")[0] is not None:
        chosen.add("colocated")
    return frozenset(chosen)


def _colocate(config: pytest.Config) -> list[tuple[str, ...]] | None:
    entries = _list(config, "hwregress_colocate")
    return None if entries is None else [tuple(entry.split("+")) for entry in entries]


def _topology(config: pytest.Config) -> Topology:
    """``--nnodes``, ``--node-rank``, ``--rdzv-endpoint``, checked together.

    Raises:
        pytest.UsageError: a bad number or endpoint, or several nodes under pytest-xdist (every node must run the
            same tests in the same order, which one pytest process does and ``-n`` does not).
    """
    nnodes = _number(config, "hwregress_nnodes", int, 1, 100_000)
    node_rank = _number(config, "hwregress_node_rank", int, 0, 100_000)
    endpoint = _value(config, "hwregress_rdzv_endpoint")[0]
    try:
        topology = Topology(nnodes, node_rank, endpoint)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    if topology.multi_node and getattr(config.option, "numprocesses", None):
        raise pytest.UsageError(f"--nnodes {nnodes} runs in one pytest process per node: drop -n (pytest-xdist), so every "
                                "node runs the same tests in the same order")
    return topology


def _timing_plan(config: pytest.Config) -> TimingPlan:
    return TimingPlan(
        warmup_steps=_number(config, "hwregress_warmup", int, 1, 10_000),
        rounds=_number(config, "hwregress_rounds", int, 3, 100_000),
        min_round_s=_number(config, "hwregress_min_round_time", float, 1e-6, 3600),
        budget_s=_number(config, "hwregress_time_budget", float, 1e-3, 86_400),
        confirm_s=_number(config, "hwregress_confirm_time", float, 0.0, 86_400),
    )


def _policy(config: pytest.Config) -> Policy:
    update = config.getoption("hwregress_update")
    if update is not None and update not in UPDATE_MODES:
        raise pytest.UsageError(f"--update-baselines={update!r}: use one of {', '.join(UPDATE_MODES)} (or no value for all)")
    given = _value(config, "hwregress_tolerance")[0] is not None
    tolerance = _number(config, "hwregress_tolerance", float, 0.0, 0.99) if given else None
    defaults = Tolerances()
    max_threshold = _number(config, "hwregress_max_threshold", float, 0.01, 0.99)
    highest = tolerance if tolerance is not None else defaults.cpu_throughput
    if max_threshold < highest:
        raise pytest.UsageError(f"{_source(config, 'hwregress_max_threshold')}={max_threshold} is below the tolerance "
                                f"{highest}; the cap must be at least the tolerance")
    tolerances = Tolerances(throughput=defaults.throughput if tolerance is None else tolerance,
                            cpu_throughput=defaults.cpu_throughput if tolerance is None else tolerance,
                            max_threshold=max_threshold,
                            memory=_number(config, "hwregress_memory_tolerance", float, 0.0, 100.0))
    return Policy(tolerances, update, config.getoption("hwregress_require"), config.getoption("hwregress_strict_env"),
                  config.getoption("hwregress_accept_identity"))


def _devices(config: pytest.Config) -> list[str]:
    entries = _list(config, "hwregress_devices")
    if entries is None:
        return _default_devices()
    source = _source(config, "hwregress_devices")
    try:
        devices = parse_device_list(",".join(entries), source)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    visible = visible_devices()
    missing = [d for d in devices if d not in visible]
    if missing:
        raise pytest.UsageError(f"{source}: {', '.join(missing)} not visible on this machine (visible: {', '.join(visible)}); "
                                "drop it, or check CUDA_VISIBLE_DEVICES and the driver")
    return devices


def _default_devices() -> list[str]:
    """Every visible device; ``cuda:0`` too when none is visible, so ``pytest -m gpu`` on a machine without a
    GPU reports skipped tests with the reason instead of collecting nothing."""
    found = visible_devices()
    return found if any(d.startswith("cuda") for d in found) else [*found, "cuda:0"]


def _batch_sizes(config: pytest.Config) -> list[int | str] | None:
    entries = _list(config, "hwregress_batch_sizes")
    if entries is None:
        return None
    try:
        return [MAX_BATCH if entry == MAX_BATCH else int(entry) for entry in entries]
    except ValueError:
        raise pytest.UsageError(f"{_source(config, 'hwregress_batch_sizes')}: batch sizes must be whole numbers or "
                                f"'max', got {','.join(entries)!r}") from None


def _was_given(config: pytest.Config, ini: str) -> bool:
    return config.getoption(ini) is not None or config.getini(ini) != _BY_INI[ini].default


def _source(config: pytest.Config, ini: str) -> str:
    return _BY_INI[ini].flag if config.getoption(ini) is not None else f"ini option {ini}"


def _value(config: pytest.Config, ini: str) -> tuple[Any, str]:
    """The option's raw value (a string, or a list for list options set in the ini) and where it came from."""
    cli = config.getoption(ini)
    if cli is not None:
        return cli, _BY_INI[ini].flag
    value = config.getini(ini)
    return (value if value not in ("", []) else None), f"ini option {ini}"


def _list(config: pytest.Config, ini: str) -> list[str] | None:
    """A list option's entries: comma- or space-separated, from the command line or any ini list form.

    Raises:
        pytest.UsageError: the option was given but names nothing, or names one entry twice.
    """
    raw, source = _value(config, ini)
    if raw is None:
        return None
    parts = raw if isinstance(raw, list) else [raw]
    entries = [entry.strip() for part in parts for entry in str(part).replace(",", " ").split()]
    if not entries:
        raise pytest.UsageError(f"{source}={raw!r} names nothing; give at least one value or leave it out for the default")
    repeated = sorted({entry for entry in entries if entries.count(entry) > 1})
    if repeated:
        raise pytest.UsageError(f"{source}={raw!r} names {', '.join(repeated)} more than once; list each value once")
    return entries


def _number(config: pytest.Config, ini: str, kind: Callable[[str], Any], low: float, high: float) -> Any:
    raw, source = _value(config, ini)
    try:
        value = kind(str(raw))
    except ValueError:
        raise pytest.UsageError(f"{source}={raw!r} is not a {kind.__name__}") from None
    if not low <= value <= high:
        raise pytest.UsageError(f"{source}={raw!r} is out of range; use a value in [{low}, {high}]")
    return value


def _switch(config: pytest.Config, ini: str) -> bool:
    raw, source = _value(config, ini)
    text = str(raw).strip().lower()
    if text not in ("on", "off"):
        raise pytest.UsageError(f"{source}={raw!r}: use on or off")
    return text == "on"


def _history_dir(config: pytest.Config, report_dir: Path) -> Path | None:
    if config.getoption("hwregress_no_history"):
        return None
    given = _value(config, "hwregress_history_dir")[0] is not None
    return _path(config, "hwregress_history_dir") if given else report_dir / "history"


def _path(config: pytest.Config, ini: str) -> Path:
    raw, source = _value(config, ini)
    if not str(raw).strip():
        raise pytest.UsageError(f"{source} is empty; give a folder")
    return config.rootpath / str(raw)


def _culprit(config: pytest.Config, message: str) -> str:
    """The flag (or ini key) a matrix validation error is about, from the words of its message."""
    for word, ini in (("co-located", "hwregress_colocate"), ("world size", "hwregress_world_sizes"),
                      ("model", "hwregress_models"), ("memory format", "hwregress_memory_format"),
                      ("mode", "hwregress_modes"), ("dtype", "hwregress_dtypes"), ("compiler", "hwregress_compile"),
                      ("batch", "hwregress_batch_sizes")):
        if word in message:
            return _source(config, ini)
    return "hwregress"

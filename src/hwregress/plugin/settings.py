"""The options validated once per process into the frozen :class:`Settings`: each value read from its flag or ini
twin (:mod:`hwregress.plugin.options`), checked, and turned into the selection, the timing plan, the judging policy,
the folders, the topology of a distributed run and the Spark settings. Every error names the flag or ini key the
bad value came from, the value, and what would be valid."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hwregress.hardware.devices import parse_device_list, visible_devices
from hwregress.judge.lifecycle import UPDATE_MODES
from hwregress.judge.session import Policy
from hwregress.judge.tolerances import Tolerances
from hwregress.measure.timing import TimingPlan
from hwregress.plugin import tiers
from hwregress.plugin.ab_settings import ABSettings, ab_settings
from hwregress.plugin.matrix import MAX_BATCH, Selection, node_gpus, validate
from hwregress.plugin.options import (
    flag_of,
    list_of,
    number_of,
    optional_number_of,
    path_of,
    source_of,
    switch_of,
    value_of,
    value_taken_for_the_rootdir,
    was_given,
)
from hwregress.plugin.serving_options import asks_for_serving, serving_settings
from hwregress.plugin.store_push import chosen_url
from hwregress.scaleout.topology import Topology, oversubscription, usable_cores
from hwregress.spark import master as spark_master
from hwregress.spark.engine import parse_conf
from hwregress.spark.settings import SparkSettings
from hwregress.workloads import plugins as workload_plugins

MAX_VISITS = 64


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
    ab: ABSettings | None = None  # an interleaved A/B of two stacks (--ab-python, --ab-env), else None
    store_url: str | None = None  # the fleet store the session is pushed to (--store), None for none
    require_store: bool = False  # --require-store: a failed push fails the session
    visits: int | None = None  # --visits: windows of a launch-bound test (None: auto, hwregress.measure.visits)


def build_settings(config: pytest.Config) -> Settings:
    """Validate every option.

    Raises:
        pytest.UsageError: a bad device, model, mode, dtype, batch size, number or folder; the message names
            the value, the option (or ini key) it came from, and the valid values; an option's value pytest took
            for the rootdir (:func:`hwregress.plugin.options.value_taken_for_the_rootdir`).
    """
    _check_rootdir(config)
    _load_workloads(config)
    policy = _policy(config)
    baseline_dir = path_of(config, "hwregress_baseline_dir")
    if policy.update_mode is None and not baseline_dir.is_dir() and was_given(config, "hwregress_baseline_dir"):
        raise pytest.UsageError(f"{source_of(config, 'hwregress_baseline_dir')}={baseline_dir}: no such folder; "
                                "check the spelling, or record into it with --update-baselines")
    summary = value_of(config, "hwregress_summary_md")[0]
    report_dir = path_of(config, "hwregress_report_dir")
    topology = _topology(config)
    ab = ab_settings(config, policy.update_mode, topology.nnodes)
    return Settings(
        selection=_selection(config, topology.nnodes),
        plan=_timing_plan(config),
        policy=policy,
        baseline_dir=baseline_dir,
        report_dir=report_dir,
        summary_md=config.rootpath / summary if summary else None,
        history_dir=None if ab is not None else _history_dir(config, report_dir),  # B against A: not this machine's
        telemetry_interval_s=number_of(config, "hwregress_telemetry_interval", float, 0.001, 60),
        profile_steps=number_of(config, "hwregress_profile_steps", int, 0, 1000),
        cudnn_benchmark=switch_of(config, "hwregress_cudnn_benchmark"),
        trace=config.getoption("hwregress_trace"),
        write_report=not config.getoption("hwregress_no_report"),
        topology=topology,
        dist_timeout_s=number_of(config, "hwregress_dist_timeout", float, 1, 86_400),
        workload_modules=tuple(list_of(config, "hwregress_workloads") or ()),
        spark=_spark(config),
        ab=ab,
        store_url=None if ab is not None else chosen_url(config, os.environ, report_dir),  # B against A: not ours
        require_store=bool(config.getoption("hwregress_require_store")),
        visits=_visits(config),
    )


def _check_rootdir(config: pytest.Config) -> None:
    taken = value_taken_for_the_rootdir(config)
    if taken is not None:
        flag, value = taken
        raise pytest.UsageError(
            f"pytest took {flag}'s value {value} for a test path when it chose the rootdir ({config.rootpath}; it "
            f"chooses it before hwregress's options are known), so this project's pytest settings were not read: "
            f"write {flag}={value}")


def _spark(config: pytest.Config) -> SparkSettings:
    """The ``--spark-*`` options (numbers checked, each setting ``key=value``)."""
    cli = config.getoption("hwregress_spark_conf")
    source = "--spark-conf" if cli is not None else "ini option hwregress_spark_conf"
    try:
        conf = parse_conf(cli if cli is not None else config.getini("hwregress_spark_conf"), source)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    return SparkSettings(
        master=_spark_master(config), conf=conf,
        rows=optional_number_of(config, "hwregress_spark_rows", int, 1, 10_000_000),
        stream_rate=optional_number_of(config, "hwregress_spark_stream_rate", float, 0.1, 1_000_000),
        stream_images=optional_number_of(config, "hwregress_spark_stream_images", int, 1, 10_000_000))


def _spark_master(config: pytest.Config) -> str | None:
    """``--spark-master``, in a form Spark accepts (:mod:`hwregress.spark.master`); None: the default.

    Raises:
        pytest.UsageError: an empty value, or a URL Spark would refuse only when the first spark test starts its JVM;
            the message names the flag or ini key, the value and the accepted forms.
    """
    raw = value_of(config, "hwregress_spark_master")[0]
    if raw is None:
        return None
    source, master = source_of(config, "hwregress_spark_master"), str(raw).strip()
    if not master:
        raise pytest.UsageError(f"{source} is empty; give a master URL or leave it out for the default (local[cores]; "
                                "a GPU test: local[1])")
    why = spark_master.problem(master, spark_master.installed_spark_major())
    if why is not None:
        raise pytest.UsageError(f"{source}={master!r} is not a master URL Spark accepts ({why}); use "
                                f"{spark_master.ACCEPTED}")
    return master


def _load_workloads(config: pytest.Config) -> None:
    """Register the workloads of installed plugins (entry point group ``hwregress.workloads``) and of the
    modules ``--workloads`` names, before any model name is checked."""
    try:
        workload_plugins.load_entry_points()
        modules = list_of(config, "hwregress_workloads")
        if modules:
            workload_plugins.import_modules(modules, source_of(config, "hwregress_workloads"))
    except workload_plugins.WorkloadPluginError as error:
        raise pytest.UsageError(str(error)) from None


def _selection(config: pytest.Config, nnodes: int) -> Selection:
    devices = _devices(config)
    models = list_of(config, "hwregress_models")
    modes = list_of(config, "hwregress_modes")
    dtypes = list_of(config, "hwregress_dtypes")
    batch_sizes = _batch_sizes(config)
    selection = Selection(devices, models, batch_sizes, modes, dtypes or [],
                          list_of(config, "hwregress_compile") or ["eager"],
                          list_of(config, "hwregress_memory_format") or ["contiguous"], _world_sizes(config),
                          _colocate(config), nnodes, _opted_in(config), _tier(config), serving_settings(config))
    try:
        validate(selection)
    except (KeyError, ValueError) as error:
        raise pytest.UsageError(f"{_culprit(config, error.args[0])}: {error.args[0]}") from None
    _check_world_sizes_fit(config, selection)
    return selection


def _visits(config: pytest.Config) -> int | None:
    """``--visits`` (ini ``hwregress_visits``): ``auto`` (None) or a whole number from 1 to 64.

    Raises:
        pytest.UsageError: anything else; the message names the flag or ini key and the value.
    """
    raw, source = value_of(config, "hwregress_visits")
    text = "" if raw is None else str(raw).strip()
    if text == "auto":
        return None
    if text.isdigit() and 1 <= int(text) <= MAX_VISITS:
        return int(text)
    raise pytest.UsageError(f"{source}={raw!r}: use auto or a whole number of visits from 1 to {MAX_VISITS} (1: a "
                            "launch-bound test's own window alone)")


def _tier(config: pytest.Config) -> str:
    """``--tier`` (ini ``hwregress_tier``): one of :data:`hwregress.plugin.tiers.TIERS`.

    Raises:
        pytest.UsageError: another name; the message names the flag or ini key, the value and the tiers.
    """
    raw, source = value_of(config, "hwregress_tier")
    name = "" if raw is None else str(raw).strip()  # None: an ini value set empty (its default is "default")
    if name not in tiers.TIERS:
        raise pytest.UsageError(f"{source}={raw!r} is not a tier; use {', '.join(tiers.TIERS)} (docs/running.md, "
                                "'Tiers')")
    return name


def _check_world_sizes_fit(config: pytest.Config, selection: Selection) -> None:
    """Given world sizes fit this node: ranks per node up to the selected, visible GPUs (NCCL) and up to the usable
    cores (gloo on the CPU), unless ``--oversubscribe``. The defaults fit by construction.

    Raises:
        pytest.UsageError: a size beyond them; the message names the flag or ini key, the size, the limit and the
            force option (:func:`hwregress.scaleout.topology.oversubscription`).
    """
    if selection.world_sizes is None or flag_of(config, "hwregress_oversubscribe"):
        return
    gpus = node_gpus(selection)
    slots = {"cuda": len(gpus)} if gpus else {}  # cuda:0 named where none is visible is skipped, never launched
    if "cpu" in selection.devices:
        slots["cpu"] = usable_cores()
    for kind, count in slots.items():
        why = oversubscription(selection.world_sizes, selection.nnodes, kind, count)
        if why is not None:
            sizes = ",".join(str(size) for size in selection.world_sizes)
            raise pytest.UsageError(f"{source_of(config, 'hwregress_world_sizes')}={sizes}: {why}")


def _world_sizes(config: pytest.Config) -> list[int] | None:
    entries = list_of(config, "hwregress_world_sizes")
    if entries is None:
        return None
    try:
        return [int(entry) for entry in entries]
    except ValueError:
        raise pytest.UsageError(f"{source_of(config, 'hwregress_world_sizes')}: world sizes must be whole numbers, got "
                                f"{','.join(entries)!r}") from None


def _opted_in(config: pytest.Config) -> frozenset[str]:
    """What this session asks for by name, so that an opt-in family (``scaling`` and ``colocated`` on the CPU,
    ``spark`` and ``serving`` everywhere) runs: the names the ``-m`` expression mentions, and the family
    ``--world-sizes`` (scaling), ``--colocate`` (colocated), ``--spark-master`` (spark) or ``--serving-rates``,
    ``--serving-concurrency``, ``--serving-sweep`` and ``--serving-requests`` (serving) implies."""
    expression = getattr(config.option, "markexpr", "") or ""
    chosen = set(re.findall(r"[A-Za-z_][\w-]*", expression)) - {"and", "or", "not"}
    if value_of(config, "hwregress_spark_master")[0] is not None:
        chosen.add("spark")
    if value_of(config, "hwregress_world_sizes")[0] is not None:
        chosen.add("scaling")
    if value_of(config, "hwregress_colocate")[0] is not None:
        chosen.add("colocated")
    if asks_for_serving(config):
        chosen.add("serving")
    return frozenset(chosen)


def _colocate(config: pytest.Config) -> list[tuple[str, ...]] | None:
    entries = list_of(config, "hwregress_colocate")
    return None if entries is None else [tuple(entry.split("+")) for entry in entries]


def _topology(config: pytest.Config) -> Topology:
    """``--nnodes``, ``--node-rank``, ``--rdzv-endpoint``, checked together.

    Raises:
        pytest.UsageError: a bad number or endpoint, or several nodes under pytest-xdist (every node must run the
            same tests in the same order, which one pytest process does and ``-n`` does not).
    """
    nnodes = number_of(config, "hwregress_nnodes", int, 1, 100_000)
    node_rank = number_of(config, "hwregress_node_rank", int, 0, 100_000)
    endpoint = value_of(config, "hwregress_rdzv_endpoint")[0]
    try:
        topology = Topology(nnodes, node_rank, endpoint)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    if topology.multi_node and getattr(config.option, "numprocesses", None):
        raise pytest.UsageError(f"--nnodes {nnodes} runs in one pytest process per node: drop -n (pytest-xdist), "
                                "so every node runs the same tests in the same order")
    return topology


def _timing_plan(config: pytest.Config) -> TimingPlan:
    return TimingPlan(
        warmup_steps=number_of(config, "hwregress_warmup", int, 1, 10_000),
        rounds=number_of(config, "hwregress_rounds", int, 3, 100_000),
        first_look=number_of(config, "hwregress_first_look", int, 3, 100_000),
        min_round_s=number_of(config, "hwregress_min_round_time", float, 1e-6, 3600),
        budget_s=number_of(config, "hwregress_time_budget", float, 1e-3, 86_400),
        confirm_s=number_of(config, "hwregress_confirm_time", float, 0.0, 86_400),
    )


def _memory_tolerances(config: pytest.Config, defaults: Tolerances) -> dict[str, float]:
    """``--memory-tolerance`` for every device where given, else each kind of peak's default (exact, sampled)."""
    if value_of(config, "hwregress_memory_tolerance")[0] is None:
        return {"memory": defaults.memory, "sampled_memory": defaults.sampled_memory}
    given = number_of(config, "hwregress_memory_tolerance", float, 0.0, 100.0)
    return {"memory": given, "sampled_memory": given}


def _policy(config: pytest.Config) -> Policy:
    update = config.getoption("hwregress_update")
    if update is not None and update not in UPDATE_MODES:
        raise pytest.UsageError(f"--update-baselines={update!r}: use one of {', '.join(UPDATE_MODES)} "
                                "(or no value for all)")
    given = value_of(config, "hwregress_tolerance")[0] is not None
    tolerance = number_of(config, "hwregress_tolerance", float, 0.0, 0.99) if given else None
    defaults = Tolerances()
    max_threshold = number_of(config, "hwregress_max_threshold", float, 0.01, 0.99)
    highest = tolerance if tolerance is not None else defaults.cpu_throughput
    if max_threshold < highest:
        raise pytest.UsageError(f"{source_of(config, 'hwregress_max_threshold')}={max_threshold} is below the "
                                f"tolerance {highest}; the cap must be at least the tolerance")
    tolerances = Tolerances(throughput=defaults.throughput if tolerance is None else tolerance,
                            cpu_throughput=defaults.cpu_throughput if tolerance is None else tolerance,
                            max_threshold=max_threshold,
                            **_memory_tolerances(config, defaults))
    return Policy(tolerances, update, config.getoption("hwregress_require"), config.getoption("hwregress_strict_env"),
                  config.getoption("hwregress_accept_identity"))


def _devices(config: pytest.Config) -> list[str]:
    entries = list_of(config, "hwregress_devices")
    if entries is None:
        return _default_devices()
    source = source_of(config, "hwregress_devices")
    try:
        devices = parse_device_list(",".join(entries), source)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    visible = visible_devices()
    missing = [d for d in devices if d not in visible]
    if missing:
        raise pytest.UsageError(f"{source}: {', '.join(missing)} not visible on this machine "
                                f"(visible: {', '.join(visible)}); drop it, or check CUDA_VISIBLE_DEVICES and the "
                                "driver")
    return devices


def _default_devices() -> list[str]:
    """Every visible device; ``cuda:0`` too when none is visible, so ``pytest -m gpu`` on a machine without a
    GPU reports skipped tests with the reason instead of collecting nothing."""
    found = visible_devices()
    return found if any(d.startswith("cuda") for d in found) else [*found, "cuda:0"]


def _batch_sizes(config: pytest.Config) -> list[int | str] | None:
    entries = list_of(config, "hwregress_batch_sizes")
    if entries is None:
        return None
    try:
        return [MAX_BATCH if entry == MAX_BATCH else int(entry) for entry in entries]
    except ValueError:
        raise pytest.UsageError(f"{source_of(config, 'hwregress_batch_sizes')}: batch sizes must be whole numbers or "
                                f"'max', got {','.join(entries)!r}") from None


def _history_dir(config: pytest.Config, report_dir: Path) -> Path | None:
    if config.getoption("hwregress_no_history"):
        return None
    given = value_of(config, "hwregress_history_dir")[0] is not None
    return path_of(config, "hwregress_history_dir") if given else report_dir / "history"


def _culprit(config: pytest.Config, message: str) -> str:
    """The flag (or ini key) a matrix validation error is about, from the words of its message."""
    for word, ini in (("co-located", "hwregress_colocate"), ("world size", "hwregress_world_sizes"),
                      ("model", "hwregress_models"), ("memory format", "hwregress_memory_format"),
                      ("mode", "hwregress_modes"), ("dtype", "hwregress_dtypes"), ("compiler", "hwregress_compile"),
                      ("batch", "hwregress_batch_sizes")):
        if word in message:
            return source_of(config, ini)
    return "hwregress"

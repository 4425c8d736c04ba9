"""Command-line options with ini twins, and how one value is read.

Every option has an ini twin (``hwregress_*``) so a CI runner can pin it in its pytest configuration; every
error names the flag or ini key the bad value came from, the value, and what would be valid.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


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
    Option("--tier", "hwregress_tier", "default",
           "the models, modes and batch sizes run where none is named: quick (per-commit CI, one model per family), "
           "default (nightly, every family and workload class), full (the zoo and batch sweeps); the header prints "
           "its estimated minutes"),
    Option("--models", "hwregress_models", None, "models (default: the tier's, per device kind)", True),
    Option("--workloads", "hwregress_workloads", None,
           "modules to import that register workloads of your own (installed plugins load by entry point)", True),
    Option("--batch-sizes", "hwregress_batch_sizes", None,
           "batch sizes for every mode, or max: the largest power of two that fits "
           "(default: per workload, device, mode)",
           True),
    Option("--modes", "hwregress_modes", None,
           "modes: train, infer, and for causal LMs prefill, decode (default: each model's tier modes)", True),
    Option("--dtypes", "hwregress_dtypes", "fp32", "numerics: fp32, tf32, bf16, fp16 (autocast)", True),
    Option("--compile", "hwregress_compile", "eager",
           "compilation: eager, inductor, inductor-max-autotune, cudagraphs (compile time recorded apart)", True),
    Option("--memory-format", "hwregress_memory_format", "contiguous",
           "memory formats: contiguous, channels_last (convolutional models)", True),
    Option("--world-sizes", "hwregress_world_sizes", None,
           "ranks of the scaling family's jobs (default: powers of two up to the GPUs x nodes; CPU: 1, 2 per node)",
           True),
    Option("--colocate", "hwregress_colocate", None,
           "co-located process groups, MODEL+MODEL[+...] (default: two processes of one small model per device)", True),
    Option("--nnodes", "hwregress_nnodes", "1", "nodes every distributed job spans (run the same command on each)"),
    Option("--node-rank", "hwregress_node_rank", "0", "this node's rank, 0..nnodes-1 (node 0 writes the records)"),
    Option("--rdzv-endpoint", "hwregress_rdzv_endpoint", None,
           "HOST:PORT of node 0 for the c10d rendezvous (that port and the next must be free on node 0)"),
    Option("--dist-timeout", "hwregress_dist_timeout", "300",
           "seconds a distributed job's rank may go without progress before the test fails and the job is ended"),
    Option("--spark-master", "hwregress_spark_master", None,
           "master URL of the spark family's session: local[N], spark://HOST:PORT, yarn, k8s://... "
           "(default: local[cores]; a GPU test: local[1])"),
    Option("--spark-rows", "hwregress_spark_rows", None,
           "rows of the spark family's batch data set (default: CPU 2048, GPU 16384)"),
    Option("--spark-stream-rate", "hwregress_spark_stream_rate", None,
           "images per second the spark family's stream producer writes (default: CPU 20, GPU 200)"),
    Option("--spark-stream-images", "hwregress_spark_stream_images", None,
           "images the spark family's stream measures (default: 15 s at the rate)"),
    Option("--serving-engine", "hwregress_serving_engine", "transformers",
           "the serving family's server: transformers (transformers serve) or vllm (vllm serve)"),
    Option("--serving-rates", "hwregress_serving_rates", None,
           "request rates (requests/s) of the serving family's open-loop traces, one test each (default: CPU 4, "
           "GPU 8); giving any of --serving-rates, --serving-concurrency and --serving-sweep runs only the loads "
           "given", True),
    Option("--serving-concurrency", "hwregress_serving_concurrency", None,
           "clients of the serving family's closed loops, one test each (default: CPU 4, GPU 32)", True),
    Option("--serving-sweep", "hwregress_serving_sweep", None,
           "request rates (requests/s) of the serving family's rate-sweep test, one window each, >= 2 rates, "
           "e.g. 4,8,16,32,64 on a CPU (default: no sweep)", True),
    Option("--serving-requests", "hwregress_serving_requests", None,
           "requests of the serving family's trace, replayed by each window (default: CPU 32, GPU 200)"),
    Option("--serving-windows", "hwregress_serving_windows", "5",
           "measured replays of the serving family's trace per test, after an untimed one, >= 3 (a judged test looks "
           "at 3, and runs to twice this while undecided)"),
    Option("--serving-lengths", "hwregress_serving_lengths", "fixed",
           "prompt and output length profiles of the serving family: fixed, long-tail (one test each)", True),
    Option("--baseline-dir", "hwregress_baseline_dir", "baselines", "folder of the per-hardware baselines files"),
    Option("--report-dir", "hwregress_report_dir", "reports", "folder for results.json and report.html"),
    Option("--history-dir", "hwregress_history_dir", None,
           "folder of the session history, one <hardware-key>.jsonl (default: <report-dir>/history); "
           "keep it between CI runs"),
    Option("--store", "hwregress_store", None,
           "the fleet store, a SQLAlchemy URL (sqlite:///PATH, postgresql+psycopg://USER@HOST/DB) or none "
           "(default: $HWREGRESS_STORE, else sqlite:///<report-dir>/hwregress.sqlite)"),
    Option("--summary-md", "hwregress_summary_md", None, "also write the Markdown job summary to this file"),
    Option("--alert-webhook", "hwregress_alert_webhook", None,
           "POST the session's new regressions, drifts and defective hosts to this URL as Slack-compatible JSON "
           "(default: environment variable HWREGRESS_ALERT_WEBHOOK; a failing webhook never fails the session)"),
    Option("--tolerance", "hwregress_tolerance", None,
           "throughput loss tolerated, fraction "
           "(raised by measured noise; default 0.05 on accelerators, 0.15 on the CPU)"),
    Option("--max-threshold", "hwregress_max_threshold", "0.25",
           "no noise or history bound raises the threshold past this"),
    Option("--memory-tolerance", "hwregress_memory_tolerance", None,
           "peak-memory growth tolerated, fraction (default 0.10 where the peak is exact, CUDA; 0.25 for sampled "
           "RSS, CPU and MPS, plus 64 MiB)"),
    Option("--rounds", "hwregress_rounds", "10",
           "timed rounds of a window without a baseline (a recording) at least; more while noisy"),
    Option("--visits", "hwregress_visits", "auto",
           "windows of a launch-bound test (batch-1 inference, prefill, decode), each in another process at another "
           "time, judged on the fastest: auto (4 on CUDA, 1 elsewhere) or a number (1: its own window alone)"),
    Option("--first-look", "hwregress_first_look", "5",
           "timed rounds a window judged against a baseline runs before its first look (at most --rounds); "
           "it grows to planned later looks only while undecided"),
    Option("--warmup", "hwregress_warmup", "3", "untimed warmup steps"),
    Option("--min-round-time", "hwregress_min_round_time", "0.1", "seconds a timed round lasts at least"),
    Option("--time-budget", "hwregress_time_budget", "30",
           "seconds of timed rounds a window may run to: its last planned look against a baseline, or while noisy "
           "without one"),
    Option("--confirm-time", "hwregress_confirm_time", "10",
           "seconds of timed rounds a window must have lasted before a look may decide a regression (within "
           "--time-budget)"),
    Option("--telemetry-interval", "hwregress_telemetry_interval", "0.1", "telemetry sampling interval, seconds"),
    Option("--profile-steps", "hwregress_profile_steps", "3",
           "steps in the separate profiled window (0: no profile, no FLOPs)"),
    Option("--cudnn-benchmark", "hwregress_cudnn_benchmark", "on",
           "torch.backends.cudnn.benchmark during every window: on (what training jobs run) or off; fingerprinted"),
    Option("--ab-python", "hwregress_ab_python", None,
           "A/B: stack B's interpreter (e.g. a venv with another torch); judges B against this interpreter, A, in "
           "interleaved pairs of windows (default with --ab-env: this interpreter)"),
    Option("--ab-python-a", "hwregress_ab_python_a", None,
           "A/B: stack A's interpreter (default: this interpreter); a bisection names both stacks' wrappers, so that "
           "both start their workers the same way"),
    Option("--ab-threshold", "hwregress_ab_threshold", "0.05",
           "A/B: the change of B against A that counts, fraction; a pass bounds B/A within 1 +- this"),
    Option("--ab-looks", "hwregress_ab_looks", "20,40",
           "A/B: the pair counts at which a test's pairs are judged (increasing multiples of --ab-pairs-per-process; "
           "the last is the most pairs)", True),
    Option("--ab-pairs-per-process", "hwregress_ab_pairs_per_process", "2",
           "A/B: pairs of windows each fresh pair of worker processes runs (even): the unit of the verdict is a "
           "process pair, whose speed is its own"),
    Option("--ab-seed", "hwregress_ab_seed", "0", "A/B: the seed of the balanced AB/BA order of the pairs"),
    Option("--ab-timeout", "hwregress_ab_timeout", "600",
           "A/B: seconds one request to a stack's worker (start, build and warmup, a window) may take before the "
           "worker is ended and the test fails"),
)
_BY_INI = {option.ini: option for option in OPTIONS}


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
    group.addoption("--oversubscribe", action="store_true", dest="hwregress_oversubscribe",
                    help="keep --world-sizes beyond this node's devices: on the CPU more gloo ranks than usable cores "
                         "(they share them); on GPUs more ranks than selected GPUs, skipped as unsupported "
                         "[ini: hwregress_oversubscribe = true]")
    parser.addini("hwregress_oversubscribe", "keep world sizes beyond this node's devices: true or false",
                  default="false")
    group.addoption("--save-traces", action="store_true", dest="hwregress_trace",
                    help="save each test's Chrome trace under <report-dir>/traces/")
    group.addoption("--spark-conf", action="append", dest="hwregress_spark_conf", default=None, metavar="KEY=VALUE",
                    help="a Spark setting for the spark family's session, e.g. spark.executor.memory=4g (repeatable) "
                         "[ini: hwregress_spark_conf, one per line]")
    parser.addini("hwregress_spark_conf", "Spark settings KEY=VALUE, one per line", type="linelist", default=[])
    group.addoption("--ab-env", action="append", dest="hwregress_ab_env", default=None, metavar="KEY=VALUE",
                    help="A/B: an environment setting for stack B only, e.g. OMP_NUM_THREADS=1 (repeatable) "
                         "[ini: hwregress_ab_env, one per line]")
    parser.addini("hwregress_ab_env", "A/B: stack B's environment settings KEY=VALUE, one per line", type="linelist",
                  default=[])
    group.addoption("--require-store", action="store_true", dest="hwregress_require_store",
                    help="fail the session when its push to the store fails (default: queue it and say so)")
    group.addoption("--no-history", action="store_true", dest="hwregress_no_history",
                    help="do not append this session to the history (--history-dir)")
    group.addoption("--no-hwregress-report", action="store_true", dest="hwregress_no_report",
                    help="do not write results.json and report.html")


def masked_option(args: Iterable[Any], flag: str, mask: Callable[[str], str]) -> list[Any]:
    """The invocation arguments with the value of ``flag`` (``--flag VALUE`` or ``--flag=VALUE``) replaced by
    ``mask(value)``: what results.json and the store keep of a secret given on the command line."""
    out: list[Any] = []
    follows = False
    for arg in args:
        text = str(arg)
        if follows:
            out.append(mask(text))
        elif text.startswith(f"{flag}="):
            out.append(f"{flag}={mask(text.split('=', 1)[1])}")
        else:
            out.append(arg)
        follows = text == flag
    return out


def was_given(config: pytest.Config, ini: str) -> bool:
    return config.getoption(ini) is not None or config.getini(ini) != _BY_INI[ini].default


def source_of(config: pytest.Config, ini: str) -> str:
    return _BY_INI[ini].flag if config.getoption(ini) is not None else f"ini option {ini}"


def value_taken_for_the_rootdir(config: pytest.Config) -> tuple[str, str] | None:
    """The (flag, value) of an hwregress option given as two words (``--baseline-dir /tmp/b``) that pytest took for a
    test path when it chose the rootdir, or None. pytest chooses the rootdir, and reads the ini file there, before
    plugins' options are known, so ``/tmp/b`` then counts as the only test path given: the rootdir is found from it,
    and the ini file of the project the session runs in is never read. That happens when the value is an existing
    path outside the invocation folder, no test path was given (with one inside the project, pytest finds the
    project's ini from it) and pytest read no ini file; the form ``--baseline-dir=/tmp/b`` is never taken for a
    path."""
    if config.inipath is not None:
        return None  # pytest read an ini file: the session runs under settings someone wrote
    source = getattr(config, "args_source", None)
    if source is not None and source.name == "ARGS":
        return None  # test paths given: pytest found the rootdir from them as well
    invocation = config.invocation_params.dir
    words = [str(arg) for arg in config.invocation_params.args]
    valued = {option.flag for option in OPTIONS}
    for flag, value in itertools.pairwise(words):
        path = invocation / value
        if flag in valued and not value.startswith("-") and path.exists() and not _within(path, invocation):
            return flag, value
    return None


def _within(path: Path, folder: Path) -> bool:
    resolved = path.resolve()
    return resolved == folder.resolve() or folder.resolve() in resolved.parents


def value_of(config: pytest.Config, ini: str) -> tuple[Any, str]:
    """The option's raw value (a string, or a list for list options set in the ini) and where it came from."""
    cli = config.getoption(ini)
    if cli is not None:
        return cli, _BY_INI[ini].flag
    value = config.getini(ini)
    return (value if value not in ("", []) else None), f"ini option {ini}"


def list_of(config: pytest.Config, ini: str) -> list[str] | None:
    """A list option's entries: comma- or space-separated, from the command line or any ini list form.

    Raises:
        pytest.UsageError: the option was given but names nothing, or names one entry twice.
    """
    raw, source = value_of(config, ini)
    if raw is None:
        return None
    parts = raw if isinstance(raw, list) else [raw]
    entries = [entry.strip() for part in parts for entry in str(part).replace(",", " ").split()]
    if not entries:
        raise pytest.UsageError(f"{source}={raw!r} names nothing; give at least one value or leave it out for the "
                                "default")
    repeated = sorted({entry for entry in entries if entries.count(entry) > 1})
    if repeated:
        raise pytest.UsageError(f"{source}={raw!r} names {', '.join(repeated)} more than once; list each value once")
    return entries


NUMBER_WORDS = {int: "a whole number", float: "a number"}  # what a value of each kind is called in an error


def number_of(config: pytest.Config, ini: str, kind: Callable[[str], Any], low: float, high: float) -> Any:
    """The option's value as ``kind`` (``int`` or ``float``), in ``[low, high]``.

    Raises:
        pytest.UsageError: a value ``kind`` cannot read, NaN (which no range holds), or a value out of range; the
            message names the option (or ini key), the value and the range to give.
    """
    raw, source = value_of(config, ini)
    try:
        value = kind(str(raw))
    except ValueError:
        value = None
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise pytest.UsageError(f"{source}={raw!r} is not {NUMBER_WORDS.get(kind, 'a number')}; use one in "
                                f"[{low}, {high}]")
    if not low <= value <= high:
        raise pytest.UsageError(f"{source}={raw!r} is out of range; use a value in [{low}, {high}]")
    return value


def optional_number_of(config: pytest.Config, ini: str, kind: Callable[[str], Any], low: float, high: float) -> Any:
    return None if value_of(config, ini)[0] is None else number_of(config, ini, kind, low, high)


def switch_of(config: pytest.Config, ini: str) -> bool:
    raw, source = value_of(config, ini)
    text = str(raw).strip().lower()
    if text not in ("on", "off"):
        raise pytest.UsageError(f"{source}={raw!r}: use on or off")
    return text == "on"


TRUE_WORDS, FALSE_WORDS = ("true", "yes", "on", "1"), ("false", "no", "off", "0", "")


def flag_of(config: pytest.Config, dest: str) -> bool:
    """A bare flag (``store_true``, destination ``dest``) or its ini twin of the same name: true or false.

    Raises:
        pytest.UsageError: the ini value is neither; the message names the ini key and the value.
    """
    if config.getoption(dest):
        return True
    raw = config.getini(dest)
    text = str(raw).strip().lower()
    if text not in TRUE_WORDS + FALSE_WORDS:
        raise pytest.UsageError(f"ini option {dest}={raw!r}: use true or false")
    return text in TRUE_WORDS


def path_of(config: pytest.Config, ini: str) -> Path:
    raw, source = value_of(config, ini)
    if not str(raw).strip():
        raise pytest.UsageError(f"{source} is empty; give a folder")
    return config.rootpath / str(raw)

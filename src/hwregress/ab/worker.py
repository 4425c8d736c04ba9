"""``python -m hwregress.ab.worker``: one stack's worker process in an A/B session, or a session's visit worker.

It reads requests from stdin and answers on a private duplicate of the stdout it was started with
(:mod:`hwregress.ab.protocol`); fd 1 and ``sys.stdout`` point at stderr, so a library's print cannot corrupt the
channel. Each request is logged to stderr first, so a worker that dies leaves where it was in its stderr's tail.
``hello`` answers the stack's fingerprint; ``prepare`` builds a case's model and step as the project's windows do
(:func:`hwregress.measure.window.build_step`) and warms it up; ``window`` runs one untimed step, then times its steps
synchronized at both ends (NVML read meanwhile on a GPU); ``release`` drops the prepared case and returns its device
memory; ``visit`` runs a whole window of a case as a test's own window runs it, unprofiled, in a session's visit
worker (:mod:`hwregress.measure.visits`); ``close`` (or the end of stdin: the orchestrator is gone) exits 0. An
exception answers ``ok: false`` with its traceback and the worker keeps serving; a channel that cannot be written
ends it non-zero.
"""

from __future__ import annotations

import faulthandler
import gc
import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

import hwregress
from hwregress import workloads
from hwregress.ab.protocol import Case, ProtocolError, decode_request, encode, failure
from hwregress.hardware.devices import environment_fingerprint, synchronize
from hwregress.hardware.facts import device_kind
from hwregress.hardware.telemetry import TelemetrySampler
from hwregress.measure.llm.window import run_llm
from hwregress.measure.memory import freeze_imported_objects, release_device_memory
from hwregress.measure.out_of_memory import is_out_of_memory
from hwregress.measure.precision import numerics, quantization
from hwregress.measure.precision.numerics import LLM_MODES
from hwregress.measure.timing import TimingPlan, default_timer
from hwregress.measure.visits import HOST_FACTS
from hwregress.measure.window import RunOptions, build_step, guard_host_memory, prepare_process, run_model
from hwregress.workloads import plugins as workload_plugins


class CaseUnavailable(ValueError):
    """This stack cannot build the case's model (unknown to its hwregress, or a package it needs is missing)."""


def private_channel() -> BinaryIO:
    """The response channel: a duplicate of fd 1 as it was at start; fd 1 and ``sys.stdout`` then point at stderr,
    so whatever else prints goes to the worker's stderr, never into the channel."""
    sys.stdout.flush()
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def fingerprint(device: str, env_keys: Iterable[str]) -> dict[str, Any]:
    """What this stack runs: :func:`hwregress.hardware.devices.environment_fingerprint` of ``device`` (torch, CUDA,
    cuDNN, driver, Python, torchvision), the interpreter's path, this hwregress's version and folder, torch's intra-op
    threads, and under ``env`` the value of each of ``env_keys`` in this process's environment (None: unset)."""
    return {**environment_fingerprint(device), "python_executable": sys.executable,
            "hwregress": hwregress.__version__, "hwregress_path": str(Path(hwregress.__file__).resolve().parent),
            "torch_threads": torch.get_num_threads(), "env": {key: os.environ.get(key) for key in env_keys}}


def workload_for(model: str) -> workloads.Workload:
    """The registered workload ``model``.

    Raises:
        CaseUnavailable: this stack's hwregress does not know it, or it needs a package this interpreter lacks; the
            message names the model and the interpreter.
    """
    try:
        workload = workloads.get(model)
    except KeyError as error:
        raise CaseUnavailable(f"{error.args[0]} (stack interpreter {sys.executable}, hwregress "
                              f"{hwregress.__version__}); install a hwregress that has {model!r} into it, or name "
                              "its workload module with --workloads") from None
    reason = workload.unavailable_reason()
    if reason is not None:
        raise CaseUnavailable(f"{reason} (into the stack interpreter {sys.executable})")
    return workload


@dataclass
class Prepared:
    """A case ready to time: its step (one training or inference step) and the work one step does.

    Attributes:
        case: what was prepared.
        step: runs one step (asynchronously on a GPU: synchronize to wait for it).
        work_per_step: units of work per step (inputs for image models, tokens for text models).
        unit: the unit of ``work_per_step`` per second (``samples/s`` or ``tokens/s``).
    """

    case: Case
    step: Callable[[], None]
    work_per_step: float
    unit: str


def prepare(case: Case) -> Prepared:
    """Build ``case``'s model and step as :func:`hwregress.measure.window.run_model` does (host-memory guard,
    precision, quantization, the same step function), with weights drawn after ``torch.manual_seed(case.seed)`` and
    the batch drawn with ``case.seed``; set ``cudnn.benchmark`` to the case's for this process; run the warmup steps.

    Raises:
        CaseUnavailable: see :func:`workload_for`.
        OutOfMemory: a CPU batch that would not fit in the host's memory.
        whatever building or a warmup step raises (an allocation failure among them).
    """
    workload = workload_for(case.model)
    prepare_process(case.device)
    torch.backends.cudnn.benchmark = case.cudnn_benchmark  # the worker is this stack's own process: set for good
    guard_host_memory(workload, case.device, case.mode, case.batch_size, case.dtype, case.context)
    torch.manual_seed(case.seed)
    model = numerics.model_for_mode(workloads.build_on(workload, case.device), workload.task, case.mode, case.dtype)
    inputs, labels = workloads.make_batch(workload, case.batch_size, case.device, seed=case.seed, seq_len=case.context)
    inputs = quantization.cast_inputs(inputs, case.dtype, case.device)

    def step_of(module: torch.nn.Module) -> Callable[[], None]:
        return build_step(workload, module, case.mode, inputs, labels, case.device, case.dtype)

    model, _ = quantization.prepare(model, case.dtype, case.device, case.mode, probe=lambda m: step_of(m)())
    step = step_of(model)
    for _ in range(case.warmup_steps):
        step()
    synchronize(case.device)
    work = case.batch_size * workload.work_per_sample(case.context)
    return Prepared(case, step, work, workload.unit)


WINDOW_TELEMETRY_INTERVAL_S = 0.05
# per window: the mean clocks and power, the hottest temperature (NVML's names, TelemetrySampler.summary's metrics)
WINDOW_METRICS = {"sm_clock_mhz": "mean", "mem_clock_mhz": "mean", "power_w": "mean", "temperature_c": "max"}


def window_sampler(device: str) -> TelemetrySampler | None:
    """NVML's sampler over a window where the device has NVML (a CUDA device); None on a CPU or MPS device, where a
    sampling thread would take time from the cores the window measures."""
    return TelemetrySampler(device, WINDOW_TELEMETRY_INTERVAL_S) if device_kind(device) == "cuda" else None


def window_telemetry(summary: dict[str, Any]) -> dict[str, Any] | None:
    """A window's clocks (MHz), power (W) and temperature (deg C) from ``summary``
    (:meth:`hwregress.hardware.telemetry.TelemetrySampler.summary`), with its throttle reasons; None when NVML gave
    none of them (its ``gpu_unavailable_reason`` is the sampler's)."""
    metrics = summary.get("metrics", {})
    found = {name: metrics[name][statistic] for name, statistic in WINDOW_METRICS.items() if name in metrics}
    if not found:
        return None
    return {**found, "throttle_reasons": list(summary.get("throttle_reasons", []))}


def time_window(prepared: Prepared, steps: int, sampler: TelemetrySampler | None = None) -> dict[str, Any]:
    """One untimed step (the first step after the other stack's window pays for what that window left behind:
    caches, clocks, allocator state), then ``steps`` steps timed as one round of
    :func:`hwregress.measure.timing.default_timer` (CUDA events, or the host clock synchronized at both ends), read by
    ``sampler`` (NVML) meanwhile where one is given.

    Returns:
        ``{"seconds": s, "steps": n, "samples_per_s": inputs/s, "work_per_s": units/s, "unit": ...,
        "telemetry": {...} or None}`` (:func:`window_telemetry`).

    Raises:
        RuntimeError: the timer gave no positive time.
    """
    prepared.step()
    step, device = prepared.step, prepared.case.device

    def run_steps() -> None:
        for _ in range(steps):
            step()

    telemetry = None
    if sampler is None:
        seconds = default_timer(device).time_round(run_steps, steps)
    else:
        with sampler:
            seconds = default_timer(device).time_round(run_steps, steps)
        telemetry = window_telemetry(sampler.summary())
    if not seconds > 0:
        raise RuntimeError(f"the timer of {device} measured {seconds!r} s for {steps} steps; a window needs a "
                           "positive time")
    return {"seconds": seconds, "steps": steps, "samples_per_s": prepared.case.batch_size * steps / seconds,
            "work_per_s": prepared.work_per_step * steps / seconds, "unit": prepared.unit, "telemetry": telemetry}


def visit_window(case: Case, rounds: int, min_round_s: float, telemetry_interval_s: float) -> dict[str, Any]:
    """A visit of ``case`` (:mod:`hwregress.measure.visits`): its window as the test's own runs it
    (:func:`hwregress.measure.window.run_model`, or :func:`hwregress.measure.llm.window.run_llm` for ``prefill`` and
    ``decode``), unprofiled, ``rounds`` rounds of ``min_round_s`` after ``case.warmup_steps`` warmup steps, never
    extended; the device's memory released after it.

    Returns:
        ``{"samples": [...] (throughput per round, the test's unit), "latency_ms": a decode window's inter-token latency
        p50 or None, "health": {...} (the host's facts over the window), "pid": int, "started_s": float (when the
        window began: ``time.monotonic``, system-wide on Linux)}``.

    Raises:
        CaseUnavailable: see :func:`workload_for`.
        whatever the window raises (an allocation failure among them).
    """
    workload = workload_for(case.model)
    plan = TimingPlan(warmup_steps=max(case.warmup_steps, 1), rounds=rounds, min_round_s=min_round_s,
                      max_rel_iqr=math.inf)
    started = time.monotonic()
    try:
        if case.mode in LLM_MODES:
            result = run_llm(workload, case.device, case.mode, case.batch_size, case.dtype,
                             case.context or workload.seq_len or 1, plan, telemetry_interval_s, profile=False)
            measurement = result.measurement
            latency = result.latency.get("itl_p50_ms") if case.mode == "decode" else None
        else:
            options = RunOptions(plan, telemetry_interval_s, profile_steps=0, cudnn_benchmark=case.cudnn_benchmark)
            measurement = run_model(workload, case.device, case.mode, case.batch_size, case.dtype,
                                    default_timer(case.device), options, case.context)
            latency = None
    finally:
        release_device_memory(case.device)
    return {"samples": measurement.throughput_samples, "latency_ms": latency,
            "health": {key: measurement.health.get(key) for key in HOST_FACTS}, "pid": os.getpid(),
            "started_s": started}


class Worker:
    """The requests' handler: holds the prepared case between requests."""

    def __init__(self) -> None:
        self.prepared: Prepared | None = None

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """The ``ok: true`` answer to a checked request other than ``close``.

        Raises:
            whatever the request's work raises (the caller answers it as a failure).
        """
        op = request["op"]
        if op == "hello":
            workload_plugins.load_entry_points()
            workload_plugins.import_modules(request.get("workload_modules", []), "--workloads")
            keys = request.get("env_keys", [])
            return {"ok": True, "fingerprint": fingerprint(request.get("device", "cpu"), keys)}
        if op == "prepare":
            self.drop()
            self.prepared = prepare(request["case"])
            return {"ok": True, "unit": self.prepared.unit, "work_per_step": self.prepared.work_per_step}
        if op == "release":
            self.drop()
            return {"ok": True}
        if op == "visit":
            self.drop()
            return {"ok": True, **visit_window(request["case"], request["rounds"], request["min_round_s"],
                                               request["telemetry_interval_s"])}
        if self.prepared is None:
            raise RuntimeError("a window was asked for before any case was prepared; send prepare first")
        return {"ok": True, **time_window(self.prepared, request["steps"], window_sampler(self.prepared.case.device))}

    def drop(self) -> None:
        """Forget the prepared case and release its device memory (before the next case, after an out-of-memory)."""
        if self.prepared is not None:
            device = self.prepared.case.device
            self.prepared = None
            release_device_memory(device)


def answer(worker: Worker, line: bytes) -> tuple[dict[str, Any], bool]:
    """The response to one request line, and whether the worker is to exit (``close``). Never raises an
    ``Exception``: a malformed line or a failing request is an ``ok: false`` response."""
    try:
        request = decode_request(line)
    except ProtocolError as error:
        return failure(error), False
    print(f"hwregress.ab.worker[{os.getpid()}]: {_described(request)}", file=sys.stderr, flush=True)
    if request["op"] == "close":
        return {"ok": True}, True
    try:
        return worker.handle(request), False
    except Exception as error:  # the orchestrator decides what a failed request means; this worker serves on
        kind = "oom" if is_out_of_memory(error) else "error"
        response = failure(error, kind)
        if kind == "oom":
            worker.drop()
        return response, False


def _described(request: dict[str, Any]) -> str:
    if request["op"] == "prepare":
        return f"prepare {request['case']}"
    if request["op"] == "window":
        return f"window of {request['steps']} steps"
    if request["op"] == "visit":
        return f"visit of {request['case']} ({request['rounds']} rounds)"
    return str(request["op"])


def serve(requests: BinaryIO, channel: BinaryIO) -> int:
    """Answer each request line of ``requests`` on ``channel`` until ``close`` or the end of ``requests``; 0.

    Raises:
        OSError: the channel cannot be written (the orchestrator is gone): fatal, the worker exits non-zero.
    """
    worker = Worker()
    for line in requests:
        response, done = answer(worker, line)
        try:
            encoded = encode(response)
        except ValueError as error:  # a value JSON cannot carry: say so rather than leave the request unanswered
            encoded = encode({"ok": False, "error": f"the response could not be encoded: {error}",
                              "traceback": "", "kind": "error"})
        channel.write(encoded)
        channel.flush()
        if done:
            return 0
    return 0


def main() -> int:
    """The worker's entry point: take the channel, enable faulthandler (a crash in native code leaves its stack in
    stderr), freeze the imports out of the garbage collector's sight and turn it on (the orchestrator starts the
    worker with it off: hwregress.ab.worker_environment.WORKER_BOOT), serve stdin."""
    channel = private_channel()
    faulthandler.enable()
    freeze_imported_objects()
    gc.enable()
    return serve(sys.stdin.buffer, channel)


if __name__ == "__main__":
    sys.exit(main())

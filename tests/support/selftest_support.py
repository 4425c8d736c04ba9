"""Loaded by the pytester projects of the self-tests: a tiny workload, a deterministic clock with an
injectable slowdown, an injectable interrupt, and an injectable out-of-memory.

Environment knobs (read at each use, so one project serves every scenario):
    HWREGRESS_SELFTEST_SLOWDOWN   multiply every timed round by this factor (default 1.0)
    HWREGRESS_SELFTEST_INTERRUPT  raise KeyboardInterrupt at the start of the N-th test
    HWREGRESS_SELFTEST_OOM_AT     batch sizes >= this raise torch.OutOfMemoryError in the model
    HWREGRESS_SELFTEST_CRASH_AT   batch sizes == this raise a plain bug (ValueError) in the model
    HWREGRESS_SELFTEST_HARD_EXIT  the process dies (os._exit, as on a segfault) at the N-th test
    HWREGRESS_SELFTEST_SIGKILL    the process sends itself SIGKILL (as the OOM killer does) at the N-th test
    HWREGRESS_SELFTEST_ENOSPC     "journal", "results" or both (comma list): those writes fail with ENOSPC,
                                  as on a full disk
    HWREGRESS_SELFTEST_BUSY       the health probe of every window reports this fraction of the cores' time
                                  used by other processes (synthetic contention)
    HWREGRESS_SELFTEST_HOST_BYTES the host memory the CPU memory guard believes is left, bytes
    HWREGRESS_SELFTEST_TORCH      the torch version the environment fingerprint reports (an upgrade, for the
                                  history's "what changed" at a change point)
    HWREGRESS_SELFTEST_COMPILE_FAIL  every compiled model's backend raises (a compiler bug), for --compile
    HWREGRESS_SELFTEST_SLEEP_S    every forward of the tiny model sleeps this long (a real slowdown, also inside
                                  Spark's Python workers, which inherit the environment)
    HWREGRESS_SELFTEST_STREAM_SLEEP_S  instead, the forwards inside the tasks of a Spark streaming query sleep this
                                  long (one session slows a batch pass and a stream's micro-batch each by what it
                                  needs)
    HWREGRESS_SELFTEST_PYTEST_SLEEP_S  on top, the forwards of the pytest process alone sleep this long (not those of
                                  a visit worker, which has HWREGRESS_VISIT_WORKER set): a process in a slow mode
    HWREGRESS_SELFTEST_REAL_CLOCK  time rounds with the device's own timer instead of the fake clock (as the visit
                                  workers, which never load this module, do)
    HWREGRESS_SELFTEST_VISIT_WORKER_EXIT  a visit worker (HWREGRESS_VISIT_WORKER set) dies (os._exit) at the tiny
                                  model's first forward, as a crash in native code would
    HWREGRESS_SELFTEST_WORKER_PYTHON  the session's ``sys.executable``: the interpreter the plugin starts its visit
                                  workers and A/B stack A's workers with (the self-tests' zygote's ``python``,
                                  support/zygote.py, in the self-tests of the visits' and the A/B engine's logic:
                                  workers forked without the imports' seconds)
"""

import errno
import gc
import os
import signal
import sys
import time

import pytest
import torch
from served_shapes import TINY_LLAMA
from torch import nn

from hwregress import workloads
from hwregress.workloads.served import register_served

STEP_SECONDS = 0.01
# a fixed +-1% pattern: deterministic spread, so the statistics see realistic, repeatable noise
JITTER = (1.0, 1.01, 0.99, 1.005, 0.995)


class _MaybeOom(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        limit = os.environ.get("HWREGRESS_SELFTEST_OOM_AT")
        if limit and x.shape[0] >= int(limit):
            raise getattr(torch, "OutOfMemoryError", RuntimeError)("CUDA out of memory (injected by the self-test)")
        crash = os.environ.get("HWREGRESS_SELFTEST_CRASH_AT")
        if crash and x.shape[0] == int(crash):
            raise ValueError("injected crash inside the model")
        if os.environ.get("HWREGRESS_VISIT_WORKER") and os.environ.get("HWREGRESS_SELFTEST_VISIT_WORKER_EXIT"):
            os._exit(3)
        time.sleep(_sleep_seconds())
        return self.body(x)


def _sleep_seconds() -> float:
    stream = os.environ.get("HWREGRESS_SELFTEST_STREAM_SLEEP_S")
    if stream and _in_a_streaming_task():
        return float(stream)
    pytest_only = 0.0 if os.environ.get("HWREGRESS_VISIT_WORKER") else float(
        os.environ.get("HWREGRESS_SELFTEST_PYTEST_SLEEP_S", "0"))
    return float(os.environ.get("HWREGRESS_SELFTEST_SLEEP_S", "0")) + pytest_only


def _in_a_streaming_task() -> bool:
    """Whether this forward runs in a Spark task of a streaming query: Structured Streaming sets the local property
    ``sql.streaming.queryId`` on the jobs of each micro-batch, and the Python worker's TaskContext carries it."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return bool(context and context.getLocalProperty("sql.streaming.queryId"))


workloads.register(workloads.Workload("tiny", _MaybeOom, input_shape=(3, 8, 8), num_classes=10), replace=True)


class FakeClockTimer:
    """Runs the steps for real, but reports STEP_SECONDS per step x slowdown x a fixed jitter."""

    def __init__(self) -> None:
        self.rounds = 0

    def time_round(self, run_steps, steps):
        run_steps()
        self.rounds += 1
        slowdown = float(os.environ.get("HWREGRESS_SELFTEST_SLOWDOWN", "1.0"))
        return steps * STEP_SECONDS * slowdown * JITTER[self.rounds % len(JITTER)]


def pytest_hwregress_round_timer(config, device):
    return None if os.environ.get("HWREGRESS_SELFTEST_REAL_CLOCK") else FakeClockTimer()


_started = {"count": 0}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    _started["count"] += 1
    target = os.environ.get("HWREGRESS_SELFTEST_INTERRUPT")
    if target and _started["count"] == int(target):
        raise KeyboardInterrupt
    hard = os.environ.get("HWREGRESS_SELFTEST_HARD_EXIT")
    if hard and _started["count"] == int(hard):
        os._exit(3)
    killed = os.environ.get("HWREGRESS_SELFTEST_SIGKILL")
    if killed and _started["count"] == int(killed):
        os.kill(os.getpid(), signal.SIGKILL)


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device (injected by the self-test)")


def _template_error(*args, **kwargs):
    from jinja2 import TemplateError

    raise TemplateError("injected template error")


def _failing_backend(graph_module, example_inputs):
    raise RuntimeError("injected compiler failure\nsecond line of the compiler's error\n" + "deep frame\n" * 20)


def pytest_configure(config):
    worker_python = os.environ.get("HWREGRESS_SELFTEST_WORKER_PYTHON")
    if worker_python:
        sys.executable = worker_python
    if os.environ.get("HWREGRESS_SELFTEST_COMPILE_FAIL"):
        from hwregress.measure import compilation

        def compile_failing(model, backend):
            return model if backend == "eager" else torch.compile(model, backend=_failing_backend)

        compilation.compile_model = compile_failing
    torch_version = os.environ.get("HWREGRESS_SELFTEST_TORCH")
    if torch_version:
        from hwregress.plugin import fixture

        real = fixture.environment_fingerprint
        fixture.environment_fingerprint = lambda *args, **kwargs: {**real(*args, **kwargs), "torch": torch_version}
    host_bytes = os.environ.get("HWREGRESS_SELFTEST_HOST_BYTES")
    if host_bytes:
        from hwregress.measure import memory_guard

        memory_guard.host_headroom = lambda: memory_guard.Headroom(int(host_bytes), "injected host memory")
    busy = os.environ.get("HWREGRESS_SELFTEST_BUSY")
    if busy:
        from hwregress.hardware import health, telemetry

        class BusyProbe(health.CpuHealthProbe):
            def __exit__(self, *exc_info):
                super().__exit__(*exc_info)
                self.result["other_cpu_fraction"] = float(busy)

        telemetry.CpuHealthProbe = BusyProbe
    full = os.environ.get("HWREGRESS_SELFTEST_ENOSPC", "").split(",")
    if "journal" in full:
        from hwregress.store import journal

        journal.Journal.append = _disk_full
    if "results" in full:
        from hwregress.store import result_files

        result_files.write_results = _disk_full
    if os.environ.get("HWREGRESS_SELFTEST_RENDER_FAIL"):
        from hwregress import report

        report.render = _template_error


def _tiny_lm():
    from hwregress.workloads.transformers import import_transformers

    transformers = import_transformers()
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=97, n_positions=64)
    return transformers.GPT2LMHeadModel(config)


# a causal LM small enough for end-to-end runs of train, infer, prefill and decode (random weights, no download)
workloads.register(workloads.Workload("tiny_lm", _tiny_lm, num_classes=97, loss=workloads.causal_lm_loss,
                                      input_kind="tokens", seq_len=16, vocab_size=97, task="causal-lm"), replace=True)

# the serving family's tiny Llama (support/served_shapes.py); HWREGRESS_SELFTEST_SERVE_SLEEP_S slows its server
# (support/serve_slowdown/sitecustomize.py)
def _tiny_llama():
    from hwregress.workloads.transformers import build_llama

    return build_llama(TINY_LLAMA)


workloads.register(workloads.Workload("tiny_llama", _tiny_llama, num_classes=512, loss=workloads.causal_lm_loss,
                                      input_kind="tokens", seq_len=16, vocab_size=512, task="causal-lm"), replace=True)
register_served("tiny_llama", TINY_LLAMA)

# a rank of a distributed test or a Spark Python worker, started by a session that loaded selftest_gc (see there):
# what it has imported never becomes garbage
if os.environ.get("HWREGRESS_SELFTEST_FREEZE"):
    gc.freeze()

"""A known contender makes a timed test a ``regression`` whose diagnosis names it.

Two sessions of the installed plugin's shipped suite (``pytest --pyargs hwregress.suite``) run one timed test in a
scratch folder: the first records its baseline, the second runs beside a contender this check starts and stops by
its pid. CPU: one busy-loop process per logical core. CUDA: a second process running bf16 matrix products on the
same GPU, which time-slices it. The second session must judge the test ``regression`` (a drop past the threshold cap
counts even against a one-session baseline) with a diagnosis that names the contention: on the CPU the other
processes' share of the cores, on a GPU the contender's pid among the GPU's compute processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hwregress.check.result import CheckResult, judged
from hwregress.hardware.facts import device_kind

NAME = "contender"
COMPARED = ("a timed test's verdict and diagnosis in a session beside a contender against the baseline the session "
            "before it recorded")
# the test: small and steady on each kind of device, long enough for the health probe to see the contender
TEST = {"cpu": ("mobilenet_v3_small", 8), "cuda": ("resnet50", 64)}
SESSION_TIMEOUT_S = 300
CPU_LOOP = "while True:\n    pass\n"
GPU_LOOP = ("import sys, torch\n"
            "a = torch.randn(8192, 8192, device=sys.argv[1], dtype=torch.bfloat16)\n"
            "while True:\n    a @ a\n")


def check(device: str) -> CheckResult:
    """Run the contender check on ``device`` (see the module doc)."""
    kind = device_kind(device)
    model, batch = TEST.get(kind, TEST["cpu"])
    with tempfile.TemporaryDirectory(prefix="hwregress-check-") as folder:
        scratch = Path(folder)
        quiet = _session(scratch, device, model, batch, record=True)
        if quiet.get("verdict") != "new":
            return judged(NAME, device, False, COMPARED, {"baseline_session": quiet},
                          "the recording session did not measure the test: see its message")
        contenders = _start_contenders(device)
        try:
            loaded = _session(scratch, device, model, batch, record=False)
        finally:
            _stop(contenders)
    pids = [p.pid for p in contenders]
    diagnosis = loaded.get("diagnosis") or []
    named = any("CPU contention" in line for line in diagnosis) if kind == "cpu" else \
        any(str(pid) in line for line in diagnosis for pid in pids)
    figures = {"test": f"{model} infer bs{batch}", "baseline": quiet.get("throughput"),
               "contended": loaded.get("throughput"), "ratio": loaded.get("ratio"), "verdict": loaded.get("verdict"),
               "diagnosis": diagnosis[:2], "contender_pids": pids}
    return judged(NAME, device, loaded.get("verdict") == "regression" and named, COMPARED, figures,
                  _blame(loaded, named, kind))


def _session(scratch: Path, device: str, model: str, batch: int, record: bool) -> dict[str, Any]:
    """One pytest session of the shipped suite in ``scratch``; the test's record from its results.json (or the
    session's output when there is none)."""
    reports = scratch / ("recorded" if record else "contended")
    command = [sys.executable, "-m", "pytest", "-p", "hwregress.plugin", "--pyargs", "hwregress.suite",
               "-m", "throughput", "--devices", device, "--models", model, "--modes", "infer",
               "--batch-sizes", str(batch), "--dtypes", "fp32", "--baseline-dir", str(scratch / "baselines"),
               "--report-dir", str(reports), "--no-history", "--time-budget", "10", "--confirm-time", "5",
               "-p", "no:cacheprovider", "-q", *(["--update-baselines"] if record else [])]
    done = subprocess.run(command, cwd=scratch, capture_output=True, text=True, timeout=SESSION_TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    try:
        records = json.loads((reports / "results.json").read_text())["records"]
    except (OSError, ValueError, KeyError):
        return {"verdict": None, "output": (done.stdout + done.stderr)[-1500:]}
    timed = [r for r in records if r.get("samples")]  # the one test the session selected, if its window ran
    return timed[0] if timed else {"verdict": None, "output": (done.stdout + done.stderr)[-1500:]}


def _start_contenders(device: str) -> list[subprocess.Popen[bytes]]:
    if device_kind(device) == "cuda":
        gpu = subprocess.Popen([sys.executable, "-c", GPU_LOOP, device])
        time.sleep(5)  # its CUDA context and first products before the session's window
        return [gpu]
    return [subprocess.Popen([sys.executable, "-c", CPU_LOOP]) for _ in range(os.cpu_count() or 1)]


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
    for process in processes:
        process.wait()


def _blame(loaded: dict[str, Any], named: bool, kind: str) -> str:
    if loaded.get("verdict") != "regression":
        return (f"a contender left the test {loaded.get('verdict')}: the threshold hides a slowdown it should catch "
                "(hwregress.judge.compare, --max-threshold) or the contender did not share the device")
    if not named:
        where = "the other processes' CPU share (hwregress.hardware.health)" if kind == "cpu" else \
            "the GPU's compute processes from NVML (hwregress.hardware.gpu_health)"
        return f"the regression's diagnosis does not name the contender: check {where}"
    return ""

"""A host-bound test reads the same in a fresh process as after the other tests of a session.

On the first H100 run a launch-bound test (the host thread dispatching the kernels is the bottleneck) read 37%
slower after the session's other families had run in its process than in sessions where they had not
(docs/measured.md, 'Measured on an H100'). A suite whose figures depend on what ran before
in the process judges the order of the tests, not the machine. This check times such a step in this process, after
the other checks (the runner runs it last), and in a fresh process, in three interleaved pairs; the median of the
pairs' ratios is judged, so one pair disturbed by something else on the machine does not decide.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from hwregress import workloads
from hwregress.check.result import CheckResult, judged
from hwregress.hardware.facts import device_kind
from hwregress.measure.timing import TimingPlan, default_timer
from hwregress.measure.window import RunOptions, run_model

NAME = "isolation"
STEP = {"cpu": ("mobilenet_v3_small", 1), "cuda": ("resnet18", 1)}  # launch-bound steps: the host decides their time
PLAN = TimingPlan(warmup_steps=5, rounds=10, min_round_s=0.05, budget_s=0.01)  # no extension: medians compared
PAIRS = 3
# above a short bs1 window's noise, well below the effect the check is for (docs/measured.md, 'Noise between sessions')
AGREEMENT = 0.15
COMPARED = ("a launch-bound step's throughput in this process after the other checks against a fresh process "
            "(median of three interleaved pairs' ratios)")
_FRESH = ("import json, sys\n"
          "from hwregress.check.isolation import median_throughput\n"
          "print(json.dumps(median_throughput(sys.argv[1])))\n")


def median_throughput(device: str) -> float:
    """The median throughput (samples/s) of the isolation step on ``device``, measured as a test measures it."""
    model, batch = STEP.get(device_kind(device), STEP["cpu"])
    measured = run_model(workloads.get(model), device, "infer", batch, "fp32", default_timer(device),
                         RunOptions(PLAN, telemetry_interval_s=0.5, profile_steps=0))
    return statistics.median(measured.throughput_samples)


def check(device: str) -> CheckResult:
    """Run the isolation check on ``device`` (see the module doc)."""
    here, fresh = [], []
    for _ in range(PAIRS):
        here.append(median_throughput(device))
        fresh.append(_in_fresh_process(device))
    ratio = statistics.median(h / f for h, f in zip(here, fresh, strict=True))
    model, batch = STEP.get(device_kind(device), STEP["cpu"])
    return judged(NAME, device, abs(ratio - 1) <= AGREEMENT, COMPARED,
                  {"step": f"{model} infer bs{batch}", "this_process": [round(v, 1) for v in here],
                   "fresh_process": [round(v, 1) for v in fresh], "ratio": round(ratio, 3), "limit": AGREEMENT},
                  "what ran earlier in the process changes a host-bound test's figure: leaked state (profiler, "
                  "dispatch modes, threads, allocator caches) or a slower host; compare the operator tables' "
                  "host times (cudaLaunchKernel per call) of the two")


def _in_fresh_process(device: str) -> float:
    done = subprocess.run([sys.executable, "-c", _FRESH, device], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1]))

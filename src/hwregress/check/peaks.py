"""The device's published peaks are found, and measured compute stays below them (MFU < 1).

MFU and the roofline need the published dense peak of the device under test
(:func:`hwregress.hardware.roofline.peak_lookup`, matched on the full device name). A GEMM roof measured as a test
measures it (:func:`hwregress.measure.ceilings.run_ceiling`) must stay below the peak of its dtype: a figure above it
is a timing or FLOP-counting defect, not a fast GPU.
"""

from __future__ import annotations

import torch

from hwregress.check.result import CheckResult, judged, skipped
from hwregress.hardware.facts import device_kind
from hwregress.hardware.roofline import peak_lookup
from hwregress.measure.ceilings import default_spec, run_ceiling
from hwregress.measure.timing import TimingPlan, default_timer

NAME = "published-peaks"
COMPARED = "the GEMM roof measured as a test measures it against the published dense peak of its dtype"
PLAN = TimingPlan(warmup_steps=3, rounds=5, min_round_s=0.1, budget_s=5.0)
DTYPES = ("bf16", "fp32")


def check(device: str) -> CheckResult:
    """Run the published-peaks check on ``device`` (see the module doc); skipped off CUDA (no published CPU peaks)."""
    if device_kind(device) != "cuda":
        return skipped(NAME, device, COMPARED, "not a CUDA device: hwregress has no published peaks for CPUs, so "
                                               "their MFU is left empty")
    index = torch.device(device).index or 0
    props = torch.cuda.get_device_properties(index)
    lookup = peak_lookup(props.name, props.multi_processor_count, " MIG " in props.name)
    if lookup.peak is None:
        return judged(NAME, device, False, COMPARED, {"device_name": props.name, "lookup": lookup.reason},
                      f"no published peak matches {props.name!r}: MFU and the roofline stay empty; add its datasheet "
                      "figures to hwregress.hardware.roofline.NAME_RULES")
    figures: dict[str, object] = {"device_name": props.name, "peak": lookup.peak.name}
    below = True
    for dtype in DTYPES:
        peak = lookup.peak.tflops.get(dtype)
        if peak is None:
            continue
        measured = run_ceiling(default_spec("gemm", device), device, dtype, default_timer(device), PLAN,
                               telemetry_interval_s=0.5)
        achieved = sorted(measured.throughput_samples)[len(measured.throughput_samples) // 2]
        figures[f"gemm_{dtype}_tflops"] = round(achieved, 1)
        figures[f"peak_{dtype}_tflops"] = peak
        figures[f"mfu_{dtype}"] = round(achieved / peak, 3)
        below = below and achieved < peak
    return judged(NAME, device, below, COMPARED, figures,
                  "a GEMM above the published peak is a measurement defect: the timer (check 'timer') or the FLOP "
                  "count of the ceiling (hwregress.measure.ceilings) is wrong, or the peak table names another part")

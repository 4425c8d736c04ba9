"""Quantizing a model leaves the process's compiler settings and matmul precision as they were.

torchao's configs default to setting ``torch._inductor.config`` fields process-wide, and some releases also switch
fp32 matmuls to TF32 (``torch.set_float32_matmul_precision("high")``): a quantized test would then change how every
later test of the session compiles and computes. hwregress quantizes inside
:func:`hwregress.measure.precision.quantization.inductor_state_kept`; this check quantizes a small model for each
quantized dtype the device runs and compares every inductor config field and the matmul precision before and after.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hwregress.check.result import CheckResult, judged, skipped
from hwregress.measure.precision import quantization

NAME = "quantization-state"
COMPARED = "torch._inductor.config and the fp32 matmul precision before and after quantizing a model"


def check(device: str) -> CheckResult:
    """Run the quantization-state check on ``device`` (see the module doc); skipped where no quantized dtype runs."""
    runnable = {dtype: quantization.unsupported_reason(dtype, device, "infer")
                for dtype in quantization.QUANTIZED_DTYPES}
    dtypes = [dtype for dtype, reason in runnable.items() if reason is None]
    if not dtypes:
        return skipped(NAME, device, COMPARED, "; ".join(f"{d}: {why}" for d, why in runnable.items()))
    before = _state()
    counts = {}
    for dtype in dtypes:
        counts[f"{dtype}_quantized_layers"] = quantization.prepare(_probe_model(device), dtype, device, "infer")[1]
    after = _state()
    changed = sorted(key for key in before if before[key] != after.get(key))
    return judged(NAME, device, not changed, COMPARED,
                  {"dtypes": dtypes, **counts, "changed": changed[:10],
                   "not_run": {d: why for d, why in runnable.items() if why is not None}},
                  "a quantized test changes the settings every later test runs under: keep torchao calls inside "
                  "hwregress.measure.precision.quantization.inductor_state_kept (set_inductor_config=False)")


def _probe_model(device: str) -> nn.Module:
    """Two Linear layers (what quantization converts) on ``device``."""
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16)).to(device)


def _state() -> dict[str, Any]:
    import torch._inductor.config as inductor_config

    state: dict[str, Any] = {f"inductor.{key}": repr(value) for key, value in inductor_config.get_config_copy().items()}
    state["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    return state

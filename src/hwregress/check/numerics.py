"""Strict fp32 in a training step's backward: the weight gradient against an fp64 reference.

A test at ``fp32`` must run fp32 arithmetic in its whole step: on Ampere and newer GPUs TF32 (a 10-bit mantissa)
is on by default for cuDNN convolutions and can be switched on for matmuls, and a flag restored too early leaves the
backward in TF32 (DESIGN: "TF32/autocast state must hold for the whole step"). The step hwregress times
(:func:`hwregress.measure.window.build_step`) computes a convolution's weight gradient; the same weights and inputs in
fp64 give the reference. Strict fp32 agrees to ~1e-6 relative; TF32 to ~1e-3. The TF32 flags read inside the backward
are reported too.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import torch
from torch import nn

from hwregress import workloads
from hwregress.check.result import CheckResult, judged
from hwregress.hardware.devices import synchronize
from hwregress.measure.window import build_step

NAME = "strict-fp32"
LIMIT = 1e-4  # relative error of the weight gradient: fp32 ~1e-6, TF32 ~1e-3
BATCH = 16


class _FlagsInBackward(torch.autograd.Function):
    seen: ClassVar[list[tuple[bool, bool]]] = []

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        _FlagsInBackward.seen.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
        return grad


class _Recorder(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FlagsInBackward.apply(x)


PROBE = workloads.Workload("strict-fp32-probe",
                           lambda: nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), _Recorder(), nn.Flatten(),
                                                 nn.Linear(64 * 16 * 16, 10)), (64, 16, 16), 10)


def check(device: str) -> CheckResult:
    """Run the strict-fp32 check on ``device`` (see the module doc)."""
    torch.manual_seed(0)
    model = PROBE.build().to(device)
    reference = copy.deepcopy(model).double()
    inputs, labels = workloads.make_batch(PROBE, BATCH, device)
    _FlagsInBackward.seen = []
    build_step(PROBE, model, "train", inputs, labels, device, "fp32")()
    synchronize(device)
    flags = _FlagsInBackward.seen[0] if _FlagsInBackward.seen else None  # the timed step's (the reference's follow)
    PROBE.loss(reference(inputs.double()), labels).backward()
    got, want = model[0].weight.grad.double(), reference[0].weight.grad
    error = float((got - want).norm() / want.norm())
    ok = error < LIMIT and flags == (False, False)
    return judged(NAME, device, ok,
                  "a convolution's weight gradient from the timed fp32 training step against fp64, and the TF32 "
                  "flags inside its backward", {"relative_error": float(f"{error:.3g}"), "limit": LIMIT,
                                                "matmul_tf32_in_backward": flags and flags[0],
                                                "cudnn_tf32_in_backward": flags and flags[1]},
                  "fp32 tests do not run strict fp32: TF32 (or a reduced-precision CPU kernel) in the step; "
                  "hwregress.measure.precision.numerics.tf32_flags must hold through backward and the optimizer")

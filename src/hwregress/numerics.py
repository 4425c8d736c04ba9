"""Numeric modes (fp32, tf32, bf16, fp16): their tables, which devices support them, and the torch state
(TF32 flags, autocast) that must hold for a whole step.

Why the whole step: ``backward()`` and the optimizer run under the global TF32 flags in force when they are
called, not those of the forward pass. Restoring the flags after the forward pass leaves backward on
torch's defaults (``cudnn.allow_tf32=True``, ``cuda.matmul.allow_tf32=False``), so "fp32" training would run
its convolution backward in TF32. Callers therefore enter :func:`precision` around forward, loss,
backward and optimizer step together.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from hwregress.devices import device_kind

DTYPES = ("fp32", "tf32", "bf16", "fp16")
MODES = ("train", "infer")
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
TENSOR_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@contextlib.contextmanager
def precision(device: str, dtype: str) -> Iterator[None]:
    """Numerics for ``dtype`` while the block runs: autocast for bf16/fp16; TF32 matmul and cuDNN switched
    on for ``tf32`` and off otherwise (true fp32) on CUDA; previous flags restored on exit. Enter it
    around a whole step (forward, backward, optimizer), see the module docstring.

    Raises:
        KeyError: unknown ``dtype``.
    """
    if dtype not in ELEMENT_BYTES:
        raise KeyError(f"unknown dtype {dtype!r}; use {', '.join(DTYPES)}")
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = dtype == "tf32"
    try:
        if dtype in AUTOCAST_DTYPES:
            with torch.autocast(device_type=device_kind(device), dtype=AUTOCAST_DTYPES[dtype]):
                yield
        else:
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def dtype_unsupported_reason(spec: str, dtype: str) -> str | None:
    """None if ``dtype`` (``fp32``, ``tf32``, ``bf16``, ``fp16``) runs natively on ``spec``, else why not."""
    kind = device_kind(spec)
    if dtype == "fp32":
        return None
    if dtype == "tf32" and kind != "cuda":
        return f"tf32 is a CUDA tensor-core mode; {spec} has none"
    if kind == "cuda":
        if dtype == "bf16" and not torch.cuda.is_bf16_supported():
            return f"{spec} does not support bf16 (compute capability below 8.0)"
        if dtype == "tf32" and torch.cuda.get_device_capability(torch.device(spec))[0] < 8:
            return f"{spec} has no TF32 tensor cores (compute capability below 8.0)"
        return None
    if kind == "cpu" and dtype == "fp16":
        return "fp16 autocast on the CPU is emulated and not a meaningful benchmark; use bf16"
    return None

"""Numeric modes (fp32, tf32, bf16, fp16): their tables, which devices support them, and the torch state
(TF32 flags, autocast, loss scaling) of a step.

Two scopes, on purpose:

- :func:`tf32_flags` holds for the *whole* step: forward, loss, ``backward()`` and the optimizer step.
  Backward kernels are chosen under the global flags in force when they launch, not those of the forward
  pass; restoring the flags after the forward pass left backward on torch's defaults
  (``cudnn.allow_tf32=True``, ``cuda.matmul.allow_tf32=False``): "fp32" training ran its convolution
  backward in TF32 and "tf32" training its matmul backward in strict fp32.
- :func:`autocast` covers forward and loss only: "Backward passes under autocast are not recommended.
  Backward ops run in the same type that autocast used for corresponding forward ops" (PyTorch docs,
  "Automatic Mixed Precision package - torch.amp", Autocasting).

:func:`precision` enters both, for forward-only code (inference, parity outputs, GEMM ceilings).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from hwregress.hardware.facts import device_kind

DTYPES = ("fp32", "tf32", "bf16", "fp16", "int8", "fp8")  # int8/fp8: quantized Linear layers (hwregress.measure.precision.quantization)
STEP_MODES = ("train", "infer")  # a timed step of any model
LLM_MODES = ("prefill", "decode")  # causal language models only (hwregress.measure.llm.window)
MODES = (*STEP_MODES, *LLM_MODES)
MEMORY_FORMATS = ("contiguous", "channels_last")
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "int8": 1, "fp8": 1}
TENSOR_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
                 "int8": torch.float32, "fp8": torch.float32}  # quantized layers hold their own weights; the rest stays fp32
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

# Lowest CUDA compute capability that runs each mode natively. TF32 and bf16 tensor cores arrived with
# Ampere (8.0; NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020); native half arithmetic with
# 5.3 (CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table). Below these torch
# emulates the type (bf16 through fp32), which is no benchmark of the hardware.
MIN_CAPABILITY = {"tf32": (8, 0), "bf16": (8, 0), "fp16": (5, 3)}


def check_dtype(dtype: str) -> None:
    """Raises ``KeyError`` naming the known dtypes when ``dtype`` is not one of :data:`DTYPES`."""
    if dtype not in ELEMENT_BYTES:
        raise KeyError(f"unknown dtype {dtype!r}; use {', '.join(DTYPES)}")


@contextlib.contextmanager
def tf32_flags(dtype: str) -> Iterator[None]:
    """TF32 matmul and cuDNN switched on for ``tf32`` and off for every other dtype (true fp32
    accumulation inputs) while the block runs; the previous flags are restored on exit. Enter it around
    a whole step, backward and optimizer included (see the module docstring).

    Raises:
        KeyError: unknown ``dtype``.
    """
    check_dtype(dtype)
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = dtype == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@contextlib.contextmanager
def autocast(device: str, dtype: str) -> Iterator[None]:
    """``torch.autocast`` to bf16/fp16 on ``device``'s kind for those dtypes; nothing for fp32/tf32.
    Enter it around forward and loss only.

    Raises:
        KeyError: unknown ``dtype``.
    """
    check_dtype(dtype)
    if dtype in AUTOCAST_DTYPES:
        with torch.autocast(device_type=device_kind(device), dtype=AUTOCAST_DTYPES[dtype]):
            yield
    else:
        yield


@contextlib.contextmanager
def precision(device: str, dtype: str) -> Iterator[None]:
    """:func:`tf32_flags` and :func:`autocast` together, for forward-only blocks (inference, outputs,
    GEMMs). A training step enters :func:`tf32_flags` around the whole step and :func:`autocast` around
    the forward pass instead.

    Raises:
        KeyError: unknown ``dtype``.
    """
    with tf32_flags(dtype), autocast(device, dtype):
        yield


def grad_scaler(device: str, dtype: str) -> torch.amp.GradScaler:
    """A GradScaler, enabled for fp16 on CUDA only: fp16's 5 exponent bits underflow small gradients
    without loss scaling (Micikevicius et al., "Mixed Precision Training", ICLR 2018); bf16 has fp32's
    range and needs none. Use it for every fp16 training loop: ``scaler.scale(loss).backward();
    scaler.step(optimizer); scaler.update()`` (a disabled scaler passes through)."""
    enabled = dtype == "fp16" and device_kind(device) == "cuda"
    return torch.amp.GradScaler(device_kind(device), enabled=enabled)


def cuda_index(spec: str) -> int:
    """The CUDA device index of ``spec`` (``"cuda:1"`` -> 1); ``"cuda"`` alone is the current device."""
    index = torch.device(spec).index
    return torch.cuda.current_device() if index is None else index

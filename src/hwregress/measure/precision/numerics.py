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

bf16/fp16 inference of a causal LM (``infer``, ``prefill``, ``decode``) runs the model *in* the dtype instead
(:func:`runs_in_dtype`, :func:`model_for_mode`: ``model.to(dtype)``, no autocast), as serving engines do. Autocast
casts fp32 weights on use and keeps the copies only inside one autocast region (``aten/src/ATen/autocast_mode.cpp``:
"cache lower_precision_fp casts of fp32 model weights", cleared when the outermost region exits), so every
inference step re-cast them, a decode window held both copies, and the KV cache took whatever dtype the ops
producing the keys chose: fp32 in Llama, whose rotary embedding multiplies the bf16 projections by fp32 cos/sin.
Training keeps autocast (fp32 master weights, as mixed-precision training is done).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from hwregress.hardware.facts import device_kind

# int8/fp8: quantized Linear layers (hwregress.measure.precision.quantization)
DTYPES = ("fp32", "tf32", "bf16", "fp16", "int8", "fp8")
STEP_MODES = ("train", "infer")  # a timed step of any model
LLM_MODES = ("prefill", "decode")  # causal language models only (hwregress.measure.llm.window)
MODES = (*STEP_MODES, *LLM_MODES)
INFERENCE_MODES = ("infer", *LLM_MODES)
MEMORY_FORMATS = ("contiguous", "channels_last")
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "int8": 1, "fp8": 1}
TENSOR_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
                 # quantized models: hwregress.measure.precision.quantization.base_dtype
                 "int8": torch.float32, "fp8": torch.float32}
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


def runs_in_dtype(task: str, mode: str, dtype: str) -> bool:
    """Whether a ``task`` model in ``mode`` runs with its weights in ``dtype`` (``model.to(dtype)``, no autocast)
    rather than fp32 weights under autocast: bf16 and fp16 inference modes (:data:`INFERENCE_MODES`) of a
    ``causal-lm`` (see the module docstring). Other workloads keep autocast in inference: image models take fp32
    pixels that a cast model would refuse, and their baselines were recorded so.

    Raises:
        KeyError: unknown ``dtype``.
    """
    check_dtype(dtype)
    return task == "causal-lm" and mode in INFERENCE_MODES and dtype in AUTOCAST_DTYPES


def model_for_mode(model: nn.Module, task: str, mode: str, dtype: str) -> nn.Module:
    """``model`` cast to ``dtype`` (in place, ``nn.Module.to``) where :func:`runs_in_dtype`, else ``model`` as it is.

    Raises:
        KeyError: unknown ``dtype``.
    """
    return model.to(AUTOCAST_DTYPES[dtype]) if runs_in_dtype(task, mode, dtype) else model


@contextlib.contextmanager
def forward_precision(device: str, dtype: str, in_dtype: bool) -> Iterator[None]:
    """:func:`tf32_flags`, and :func:`autocast` unless the model already runs ``in_dtype`` (:func:`runs_in_dtype`):
    autocast over a bf16 model would still run its fp32-listed ops (softmax, norms) in fp32.

    Raises:
        KeyError: unknown ``dtype``.
    """
    with tf32_flags(dtype), (contextlib.nullcontext() if in_dtype else autocast(device, dtype)):
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

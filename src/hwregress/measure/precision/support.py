"""Whether a dtype runs on a device in a mode: the native modes from the compute capability (the tables of
:mod:`~hwregress.measure.precision.numerics`), the quantized ones (int8, fp8) from
:mod:`~hwregress.measure.precision.quantization`. It sits above both, so neither imports the other's caller."""

from __future__ import annotations

import torch

from hwregress.hardware.facts import device_kind
from hwregress.measure.precision import quantization
from hwregress.measure.precision.numerics import MIN_CAPABILITY, check_dtype, cuda_index


def dtype_unsupported_reason(spec: str, dtype: str, mode: str = "infer") -> str | None:
    """None if ``dtype`` runs natively on ``spec`` in ``mode``, else why not (``int8``/``fp8``:
    :func:`hwregress.measure.precision.quantization.unsupported_reason`).

    On CUDA the answer comes from the compute capability of the device under test (see
    ``MIN_CAPABILITY``), not from ``torch.cuda.is_bf16_supported()``, which asks about the *current*
    device and counts emulation as support (bf16 "runs" on a V100 or T4).

    Raises:
        KeyError: unknown ``dtype``.
    """
    check_dtype(dtype)
    kind = device_kind(spec)
    if dtype == "fp32":
        return None
    if dtype in ("int8", "fp8"):
        return quantization.unsupported_reason(dtype, spec, mode)
    if dtype == "tf32" and kind != "cuda":
        return f"tf32 is a CUDA tensor-core mode; {spec} has none"
    if kind == "cuda":
        major, minor = torch.cuda.get_device_capability(cuda_index(spec))
        needed = MIN_CAPABILITY[dtype]
        if (major, minor) < needed:
            return (f"{spec} has compute capability {major}.{minor}; native {dtype} needs "
                    f"{needed[0]}.{needed[1]} or newer (below it torch emulates {dtype})")
        return None
    if kind == "cpu" and dtype == "fp16":
        return "fp16 autocast on the CPU is emulated and not a meaningful benchmark; use bf16"
    return None

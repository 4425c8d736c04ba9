"""Quantized numeric modes (int8, fp8): which device runs which, and the model conversion for each.

What is quantized: the ``nn.Linear`` layers only, in every path below. Convolutions, embeddings, norms,
attention score products and ``transformers``' ``Conv1D`` (GPT-2's attention and MLP projections) stay in
the model's own dtype, so an "int8" GPT-2 quantizes only its LM head; :func:`quantized_linear_count`
records how many layers were converted.

- int8 on the CPU: ``torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)``:
  int8 weights (per tensor), activations quantized per batch at run time, int8 GEMMs (fbgemm/x86 or
  qnnpack). Inference only: the quantized modules have no backward. PyTorch marks ``torch.ao.quantization``
  deprecated in favour of torchao, but it is the CPU path torch ships.
- int8 on CUDA: torchao's ``Int8DynamicActivationInt8WeightConfig`` (formerly
  ``int8_dynamic_activation_int8_weight()``): per-channel int8 weights, activations quantized per token (row) at run
  time, int8 x int8 GEMMs into int32 through ``torch._int_mm`` (cuBLAS; torchao/kernel/intmm.py ``safe_int_mm``).
  Inference only. Weight-only int8 (``Int8WeightOnlyConfig``) is not used: in eager mode its linear converts the
  whole int8 weight to the activation dtype on every call (``w_vals_int8_t.to(output_dtype)``,
  quantize_/workflows/int8/int8_tensor.py in torchao 0.18) and runs a bf16 GEMM, so it moves about 5 bytes per weight
  (int8 read, bf16 written and read) where the record counts 1, and times no int8 arithmetic.
  ``torch._int_mm`` takes only products of more than 16 rows with K and N multiples of 8
  (aten/src/ATen/native/cuda/Blas.cpp ``_int_mm_out_cuda``); torchao multiplies the others as an fp32 matmul (16 rows
  or fewer: the error is caught) or on the CPU (K or N not a multiple of 8), neither an int8 GEMM. So only the Linear
  layers whose product ``torch._int_mm`` takes are quantized: K and N multiples of 8 and, where the caller passes a
  probe of the timed step (:func:`linear_rows`), more than 16 rows; the others stay bf16, and a model left with none
  is :class:`QuantizationUnsupported` (a decode step of 16 sequences or fewer multiplies 16 rows or fewer).
- fp8 on CUDA with compute capability >= 8.9 (Ada, Hopper and newer have fp8 tensor cores): inference
  through torchao's ``Float8DynamicActivationFloat8WeightConfig`` (e4m3 activations and weights with
  per-tensor scales, fp8 GEMMs through ``torch._scaled_mm``: the hardware's fp8 path, which weight-only fp8
  would not exercise); training through ``torchao.float8.convert_to_float8_training`` (``Float8Linear``,
  dynamic tensorwise scaling). fp8 GEMMs need both weight dimensions divisible by 16; other Linear layers
  stay in the model's dtype (torchao's own rule, ``torchao.float8.float8_linear_utils``).

Each path names its algorithm (:func:`algorithm`, the record's ``details.quantization``): ``int8-dynamic-per-tensor``
(the CPU's int8), ``int8-dynamic-per-token`` (CUDA's int8), ``fp8-dynamic-per-tensor`` (fp8 inference) and
``fp8-training-tensorwise`` (fp8 training), so one dtype label never covers two arithmetics.

The model's dtype (:func:`base_dtype`): on CUDA every path first casts the model to bfloat16, and floating inputs
go in as bfloat16 (:func:`cast_inputs`), so the figure is quantized inference on bf16 activations, as torchao
documents and benchmarks it, not int8 weights dequantized into fp32 GEMMs whose speed the TF32 flags decide. On
the CPU, int8 stays fp32 (torch.ao's dynamic quantized Linear takes fp32 activations only).

Every torchao call goes through :mod:`hwregress.measure.precision.torchao_calls`, which leaves torchao's
process-wide settings (inductor config, fp32 matmul precision) as they were.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hwregress.hardware.facts import device_kind
from hwregress.measure.precision.numerics import MODES, cuda_index
from hwregress.measure.precision.torchao_calls import import_torchao as _import_torchao
from hwregress.measure.precision.torchao_calls import inductor_state_kept
from hwregress.measure.precision.torchao_calls import quantize_ as _quantize_
from hwregress.measure.precision.torchao_calls import torchao_config as _torchao_config

QUANTIZED_DTYPES = ("int8", "fp8")
INFERENCE_MODES = ("infer", "prefill", "decode")
FP8_MIN_CAPABILITY = (8, 9)  # first fp8 tensor cores: Ada Lovelace (sm_89); Hopper is 9.0
ROCM_FP8_ARCHS = ("gfx942", "gfx950")  # MI300 and MI350, the AMD GPUs torchao's float8 accepts
FP8_DIM_MULTIPLE = 16  # torch._scaled_mm needs both GEMM dimensions of the weight divisible by 16
# torch._int_mm on CUDA (aten/src/ATen/native/cuda/Blas.cpp _int_mm_out_cuda): "self.size(0) needs to be greater than
# 16", and K and N "greater than 0 and a multiple of 8"
INT_MM_MIN_ROWS = 17
INT_MM_DIM_MULTIPLE = 8

# The algorithm of each quantized path (the record's details.quantization): (dtype, device kind, training?) -> name
ALGORITHMS = {
    # torch.ao quantize_dynamic: per-tensor int8 weights, activations quantized per tensor at run time (reduce_range),
    # fbgemm/x86/qnnpack int8 GEMMs
    ("int8", "cpu", False): "int8-dynamic-per-tensor",
    # torchao Int8DynamicActivationInt8WeightConfig: per-channel int8 weights, per-token int8 activations, torch._int_mm
    ("int8", "cuda", False): "int8-dynamic-per-token",
    # torchao Float8DynamicActivationFloat8WeightConfig: e4m3 weights and activations, per-tensor scales, _scaled_mm
    ("fp8", "cuda", False): "fp8-dynamic-per-tensor",
    # torchao convert_to_float8_training: Float8Linear, dynamic tensorwise scaling
    ("fp8", "cuda", True): "fp8-training-tensorwise",
}

# The dtype of everything but the quantized weights, by device kind (see :func:`base_dtype`).
# CUDA: bf16. torchao's int8 and fp8 layers rescale their products into the activation dtype;
# torchao quantizes bf16 models in its quick start (torchao/quantization/README.md:84-85 at v0.12.0:
# ``.cuda().to(torch.bfloat16)``, bf16 input), supports per-row float8 "only for bfloat16 weight and activation"
# (:196) and benchmarks every config against a bf16 base; its float8 training README (torchao/float8/README.md
# at v0.12.0, "Single GPU User API") builds the model with ``.bfloat16().cuda()`` and bf16 input. An fp32 base
# would leave fp32 GEMMs (the layers not quantized) whose speed TF32 decides.
# CPU: fp32. torch.ao's dynamic quantized Linear takes fp32 activations only (a bf16 input raises "expected
# scalar type Float but found BFloat16", torch 2.13), and the rest of the model stays in fp32 with it.
BASE_DTYPES = {"cpu": torch.float32, "cuda": torch.bfloat16}
BASE_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16"}

# Relative L2 error ||out - ref||_2 / ||ref||_2 of the logits against the CPU fp32 reference (as in
# hwregress.measure.parity). Bounds for bugs (a wrong scale or layout gives errors of order 1), not for noise.
#
# int8: every Linear's activations are rounded to 7-bit (reduce_range) per-tensor steps, so the error grows with
# depth; 0.2 is twice the worst error measured on the CPU (docs/measured.md, 'Parity tolerances'), and int8 on
# CUDA, weight-only, errs less. For scale at the task level: the PyTorch tutorial "(beta) Dynamic Quantization on
# BERT" reports about 0.6% lower F1 on MRPC after the same quantize_dynamic call.
#
# int8 on CUDA rounds activations per token (finer steps than torch.ao's per-tensor ones, full 8-bit range): the same
# tiny BERT cast to bf16 through torchao 0.18's Int8DynamicActivationInt8WeightConfig on the CPU (its int8 product is
# torch._int_mm there too) gave median 0.013, max 0.026 over 10 seeds, so the bound covers it.
#
# fp8 (e4m3: 3 mantissa bits): round-to-nearest leaves a relative error of at most 2^-4 = 6.25% per
# element. For a value m * 2^e (m in [1, 2)) the rounding error is uniform over one ulp = 2^(e-3), RMS
# ulp / sqrt(12); relative to the value, and with m log-uniform (E[1/m^2] = 0.541), the RMS relative error
# is 2^-3 / sqrt(12) * sqrt(0.541) = 2.7%. With both operands rounded a product carries sqrt(2) * 2.7% =
# 3.8%. Over a dot product of K terms the error sum grows as sqrt(K); it averages down relative to the
# result only when the terms share a sign, and for the zero-mean weights of these models it does not: each
# fp8 Linear adds ~3.8% relative error, compounding (damped by residual connections) over the layers: up to
# 0.123 when torchao's casts are simulated on the CPU (docs/measured.md, 'Parity tolerances'). Hopper's fp8
# tensor cores also accumulate with only about 14 bits (DeepSeek-V3 Technical Report, arXiv 2412.19437,
# "Increasing Accumulation Precision", measured on H800), which adds to that on the GPU: 0.25 is twice the worst
# measured.
PARITY_TOLERANCE = {"int8": 0.2, "fp8": 0.25}


class QuantizationUnsupported(RuntimeError):
    """The model has no Linear layer that ``dtype`` quantization can convert on the device (none at all, or none whose
    product the device's quantized GEMM takes); the message says which and why. A test that meets it is
    ``unsupported``."""


def algorithm(dtype: str, device: str, mode: str) -> str | None:
    """The name of the quantized arithmetic ``dtype`` runs on ``device`` in ``mode`` (:data:`ALGORITHMS`), None for
    an unquantized dtype or a device without a quantized path."""
    return ALGORITHMS.get((dtype, device_kind(device), mode not in INFERENCE_MODES))


def _check(dtype: str, mode: str) -> None:
    if dtype not in QUANTIZED_DTYPES:
        raise ValueError(f"unknown quantized dtype {dtype!r}; use {', '.join(QUANTIZED_DTYPES)}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use {', '.join(MODES)}")


def _fp8_hardware_reason(spec: str) -> str | None:
    """Why the CUDA (or ROCm) device ``spec`` has no fp8 tensor cores, or None."""
    index = cuda_index(spec)
    name = torch.cuda.get_device_name(index)
    if torch.version.hip:
        arch = str(getattr(torch.cuda.get_device_properties(index), "gcnArchName", "unknown"))
        if not arch.startswith(ROCM_FP8_ARCHS):
            return f"fp8 needs an AMD {' or '.join(ROCM_FP8_ARCHS)} GPU; {spec} ({name}) is {arch}"
        return None
    major, minor = torch.cuda.get_device_capability(index)
    if (major, minor) < FP8_MIN_CAPABILITY:
        needed = ".".join(map(str, FP8_MIN_CAPABILITY))
        return (f"fp8 needs CUDA compute capability {needed} or newer (fp8 tensor cores); {spec} "
                f"({name}) has {major}.{minor}")
    return None


def unsupported_reason(dtype: str, device: str, mode: str) -> str | None:
    """Why ``dtype`` (``"int8"`` or ``"fp8"``) cannot run ``mode`` (``"train"``, ``"infer"``, ``"prefill"``,
    ``"decode"``) on ``device`` (``"cpu"``, ``"cuda:N"``, ``"mps"``) here, or None when it can.

    int8: CPU inference modes through torch's dynamic quantization (it has no backward); CUDA inference
    modes through torchao. fp8: CUDA with compute capability >= 8.9 (or AMD MI300/MI350) and torchao, all
    modes. MPS and other device kinds: neither. On CUDA this asks the device under test for its capability.

    Raises:
        ValueError: ``dtype`` not in :data:`QUANTIZED_DTYPES`, or an unknown ``mode``.
    """
    _check(dtype, mode)
    kind = device_kind(device)
    if kind not in ("cpu", "cuda"):
        return f"{dtype} quantization has no {kind} path in torch or torchao; {device} is unsupported"
    if dtype == "int8":
        return _int8_reason(device, kind, mode)
    if kind != "cuda":
        return f"fp8 needs a CUDA GPU with compute capability 8.9 or newer (fp8 tensor cores); {device} has none"
    return _fp8_hardware_reason(device) or _import_torchao()[1]


def _int8_reason(device: str, kind: str, mode: str) -> str | None:
    if mode not in INFERENCE_MODES:
        backend = "torch dynamic quantization" if kind == "cpu" else "torchao dynamic int8 quantization"
        return (f"int8 runs inference modes only ({', '.join(INFERENCE_MODES)}): {backend} has no backward "
                f"(no int8 training on {device})")
    if kind == "cuda":
        return _import_torchao()[1]
    if torch.backends.quantized.engine == "none":
        return "int8 on the CPU needs a quantized engine (fbgemm, x86, onednn or qnnpack); this torch build has none"
    return None


def quantize(model: nn.Module, dtype: str, device: str, mode: str,
             probe: Callable[[nn.Module], Any] | None = None) -> nn.Module:
    """Convert ``model``'s ``nn.Linear`` layers for ``dtype`` on ``device`` in place and return the model
    (see the module docstring for what each path quantizes; other layers keep their dtype).

    ``model`` must already be on ``device``; it is cast to :func:`base_dtype` first (bf16 on CUDA), so feed it
    :func:`cast_inputs`. int8 on the CPU also switches it to eval mode, which dynamic quantization needs; do not
    reuse the module as an fp32 reference afterwards (deep-copy it first). ``torch._inductor.config`` and the
    fp32 matmul precision are as they were before the call (:func:`inductor_state_kept`).

    ``probe(model)`` runs one forward shaped like the timed step on the cast model (untimed, under no_grad); CUDA
    int8 uses it to find the rows each Linear multiplies (:func:`linear_rows`) and quantizes only those
    ``torch._int_mm`` takes (more than 16 rows). Without a probe the row count is not checked.

    Raises:
        ValueError: unknown ``dtype`` or ``mode``.
        RuntimeError: :func:`unsupported_reason`'s text when ``dtype`` cannot run ``mode`` on ``device``.
        QuantizationUnsupported: the model has no Linear layer that could be converted (a quantized run would be
            a full-precision run under another name).
    """
    reason = unsupported_reason(dtype, device, mode)
    if reason is not None:
        raise RuntimeError(reason)
    model = model.to(base_dtype(dtype, device))
    if dtype == "int8" and device_kind(device) == "cpu":
        converted = _int8_cpu(model)
    elif dtype == "int8":
        rows = None if probe is None else linear_rows(model, probe)
        with inductor_state_kept():
            converted = _int8_cuda(model, rows)
    else:
        with inductor_state_kept():
            converted = _fp8_inference(model) if mode in INFERENCE_MODES else _fp8_training(model)
    if quantized_linear_count(converted) == 0:
        raise QuantizationUnsupported(f"{type(model).__name__} has no nn.Linear layer that {dtype} quantization "
                                      f"could convert")
    return converted


def linear_rows(model: nn.Module, probe: Callable[[nn.Module], Any]) -> dict[str, int]:
    """The fewest rows each ``nn.Linear`` of ``model`` multiplied while ``probe(model)`` ran (under no_grad), by its
    name in ``model.named_modules()``: the product of its input's dimensions but the last (``[batch, tokens, features]``
    multiplies ``batch x tokens`` rows). Layers the probe did not call are absent; the hooks are removed after."""
    rows: dict[str, int] = {}

    def counter(name: str) -> Callable[[nn.Module, tuple[Any, ...]], None]:
        def count(_module: nn.Module, args: tuple[Any, ...]) -> None:
            fed = args[0].numel() // max(1, args[0].shape[-1])
            rows[name] = min(rows.get(name, fed), fed)
        return count

    hooks = [module.register_forward_pre_hook(counter(name)) for name, module in model.named_modules()
             if isinstance(module, nn.Linear)]
    try:
        with torch.no_grad():
            probe(model)
    finally:
        for hook in hooks:
            hook.remove()
    return rows


def _int8_cpu(model: nn.Module) -> nn.Module:
    with warnings.catch_warnings():
        # torch 2.9+ deprecates torch.ao.quantization and quantized tensor creation; the API still works
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor", category=UserWarning)
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)


def base_dtype(dtype: str, device: str) -> torch.dtype | None:
    """The dtype of the parameters and activations that ``dtype`` (``"int8"``/``"fp8"``) leaves unquantized on
    ``device``: bfloat16 on CUDA, float32 on the CPU (see :data:`BASE_DTYPES`); None for other dtypes (their
    model stays fp32, :mod:`hwregress.measure.precision.numerics` sets autocast and TF32)."""
    if dtype not in QUANTIZED_DTYPES:
        return None
    return BASE_DTYPES.get(device_kind(device), torch.float32)


def base_dtype_name(dtype: str, device: str) -> str | None:
    """:func:`base_dtype` as hwregress names dtypes (``"bf16"``, ``"fp32"``), None for unquantized dtypes;
    the record's ``quantized_base_dtype``."""
    base = base_dtype(dtype, device)
    return None if base is None else BASE_DTYPE_NAMES[base]


def cast_inputs(inputs: Any, dtype: str, device: str) -> Any:
    """``inputs`` (a tensor, or a dict of tensors as for text models) with floating tensors cast to
    :func:`base_dtype` (images become bf16 on CUDA); integer tensors (token ids, masks) and unquantized
    dtypes pass through unchanged."""
    base = base_dtype(dtype, device)

    def cast(value: Any) -> Any:
        return (value.to(base) if base is not None and isinstance(value, torch.Tensor) and value.is_floating_point()
                else value)

    return {key: cast(value) for key, value in inputs.items()} if isinstance(inputs, dict) else cast(inputs)


def _fp8_compatible(module: nn.Module, _fqn: str = "") -> bool:
    return isinstance(module, nn.Linear) and all(size % FP8_DIM_MULTIPLE == 0 for size in module.weight.shape)


def _int_mm_takes(module: nn.Module) -> bool:
    return (isinstance(module, nn.Linear)
            and all(size % INT_MM_DIM_MULTIPLE == 0 for size in (module.in_features, module.out_features)))


def _int8_cuda(model: nn.Module, rows: dict[str, int] | None) -> nn.Module:
    """torchao's dynamic int8 on the Linear layers whose product ``torch._int_mm`` takes (:data:`INT_MM_MIN_ROWS`,
    :data:`INT_MM_DIM_MULTIPLE`; ``rows`` from :func:`linear_rows`, None: rows unchecked).

    Raises:
        QuantizationUnsupported: no layer qualifies, with the fewest rows the probe saw.
    """
    def qualifies(module: nn.Module, fqn: str = "") -> bool:
        return _int_mm_takes(module) and (rows is None or rows.get(fqn, 0) >= INT_MM_MIN_ROWS)

    if rows is not None and not any(qualifies(module, name) for name, module in model.named_modules()):
        fewest = min(rows.values(), default=0)
        raise QuantizationUnsupported(
            f"{type(model).__name__} has no nn.Linear layer for an int8 GEMM: torch._int_mm (the int8 GEMM of "
            f"torchao's dynamic int8 on CUDA) needs more than {INT_MM_MIN_ROWS - 1} rows and in/out features that are "
            f"multiples of {INT_MM_DIM_MULTIPLE}, and a timed step here multiplies {fewest} rows at the fewest "
            f"(torchao would multiply those in fp32); use a larger batch, or bf16")
    quantization = _import_torchao()[0]
    config = _torchao_config(quantization, "Int8DynamicActivationInt8WeightConfig",
                             "int8_dynamic_activation_int8_weight")
    _quantize_(quantization, model, config, filter_fn=qualifies)
    return model


def _fp8_inference(model: nn.Module) -> nn.Module:
    quantization = _import_torchao()[0]
    config = _torchao_config(quantization, "Float8DynamicActivationFloat8WeightConfig",
                             "float8_dynamic_activation_float8_weight")
    _quantize_(quantization, model, config, filter_fn=_fp8_compatible)
    return model


def _fp8_training(model: nn.Module) -> nn.Module:
    """``Float8Linear`` layers on a bf16 model (torchao's float8 training README); torchao recommends
    ``torch.compile`` on top to fuse the casts (eager mode runs them as separate kernels)."""
    from torchao.float8 import convert_to_float8_training

    return convert_to_float8_training(model, module_filter_fn=_fp8_compatible)


def _is_quantized_linear(module: nn.Module) -> bool:
    if isinstance(module, torch.ao.nn.quantized.dynamic.Linear):
        return True
    if not isinstance(module, nn.Linear):
        return False
    # torchao modules exist only once torchao was imported: look it up without importing it
    float8_linear = sys.modules.get("torchao.float8.float8_linear")
    if float8_linear is not None and isinstance(module, float8_linear.Float8Linear):
        return True
    torchao_utils = sys.modules.get("torchao.utils")
    base_tensor = getattr(torchao_utils, "TorchAOBaseTensor", None)
    return base_tensor is not None and isinstance(module.weight, base_tensor)


def prepare(model: nn.Module, dtype: str, device: str, mode: str,
            probe: Callable[[nn.Module], Any] | None = None) -> tuple[nn.Module, int | None]:
    """The model to run in ``dtype``: :func:`quantize`-d (on CUDA, cast to bf16 first: :func:`base_dtype`; ``probe``:
    one forward shaped like the timed step) with its :func:`quantized_linear_count` for a dtype of
    :data:`QUANTIZED_DTYPES`, else ``model`` itself and None. Feed it :func:`cast_inputs`.

    Raises:
        RuntimeError: see :func:`quantize` (:class:`QuantizationUnsupported` among them).
    """
    if dtype not in QUANTIZED_DTYPES:
        return model, None
    converted = quantize(model, dtype, device, mode, probe)
    return converted, quantized_linear_count(converted)


def quantized_linear_count(model: nn.Module) -> int:
    """How many Linear layers of ``model`` (itself included) run quantized: torch dynamic-quantized
    ``Linear`` modules, torchao ``Float8Linear`` modules and ``nn.Linear`` layers whose weight is a torchao
    quantized tensor. 0 for a model :func:`quantize` has not converted."""
    return sum(1 for module in model.modules() if _is_quantized_linear(module))

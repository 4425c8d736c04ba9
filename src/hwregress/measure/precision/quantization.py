"""Quantized numeric modes (int8, fp8): which device runs which, and the model conversion for each.

What is quantized: the ``nn.Linear`` layers only, in every path below. Convolutions, embeddings, norms,
attention score products and ``transformers``' ``Conv1D`` (GPT-2's attention and MLP projections) stay in
the model's own dtype, so an "int8" GPT-2 quantizes only its LM head; :func:`quantized_linear_count`
records how many layers were converted.

- int8 on the CPU: ``torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)``:
  int8 weights (per tensor), activations quantized per batch at run time, int8 GEMMs (fbgemm/x86 or
  qnnpack). Inference only: the quantized modules have no backward. PyTorch marks ``torch.ao.quantization``
  deprecated in favour of torchao, but it is the CPU path torch ships.
- int8 on CUDA: torchao int8 weight-only (``Int8WeightOnlyConfig``, formerly ``int8_weight_only()``):
  per-channel int8 weights dequantized into the activation dtype. Inference only.
- fp8 on CUDA with compute capability >= 8.9 (Ada, Hopper and newer have fp8 tensor cores): inference
  through torchao's ``Float8DynamicActivationFloat8WeightConfig`` (e4m3 activations and weights with
  per-tensor scales, fp8 GEMMs through ``torch._scaled_mm``: the hardware's fp8 path, which weight-only fp8
  would not exercise); training through ``torchao.float8.convert_to_float8_training`` (``Float8Linear``,
  dynamic tensorwise scaling). fp8 GEMMs need both weight dimensions divisible by 16; other Linear layers
  stay in the model's dtype (torchao's own rule, ``torchao.float8.float8_linear_utils``).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType

import torch
from torch import nn

from hwregress.hardware.facts import device_kind
from hwregress.measure.precision.numerics import MODES, cuda_index

QUANTIZED_DTYPES = ("int8", "fp8")
INFERENCE_MODES = ("infer", "prefill", "decode")
TORCHAO_INSTALL = "pip install torchao"
FP8_MIN_CAPABILITY = (8, 9)  # first fp8 tensor cores: Ada Lovelace (sm_89); Hopper is 9.0
ROCM_FP8_ARCHS = ("gfx942", "gfx950")  # MI300 and MI350, the AMD GPUs torchao's float8 accepts
FP8_DIM_MULTIPLE = 16  # torch._scaled_mm needs both GEMM dimensions of the weight divisible by 16

# Relative L2 error ||out - ref||_2 / ||ref||_2 of the logits against the CPU fp32 reference (as in
# hwregress.measure.parity). Bounds for bugs (a wrong scale or layout gives errors of order 1), not for noise.
#
# int8: measured on the CPU with torch.ao dynamic quantization, random-weight models, 8 sequences of 64
# random token ids: tiny BERT (2 layers, hidden 128) over 20 seeds: median 0.022, max 0.066; bert_base
# 0.046 and 0.074 (2 seeds); llama_small 0.086 and 0.090; gpt2 0.024 (LM head only). Every Linear's
# activations are rounded to 7-bit (reduce_range) per-tensor steps, so the error grows with depth. 0.2 is
# twice the worst. For scale at the task level: the PyTorch tutorial "(beta) Dynamic Quantization on
# BERT" reports about 0.6% lower F1 on MRPC after the same quantize_dynamic call.
#
# int8 on CUDA is weight-only (activations stay unrounded): the same tiny BERT through torchao's
# Int8WeightOnlyConfig on the CPU gave 0.010 where dynamic quantization gave 0.018, so the bound covers it.
#
# fp8 (e4m3: 3 mantissa bits): round-to-nearest leaves a relative error of at most 2^-4 = 6.25% per
# element. For a value m * 2^e (m in [1, 2)) the rounding error is uniform over one ulp = 2^(e-3), RMS
# ulp / sqrt(12); relative to the value, and with m log-uniform (E[1/m^2] = 0.541), the RMS relative error
# is 2^-3 / sqrt(12) * sqrt(0.541) = 2.7%. With both operands rounded a product carries sqrt(2) * 2.7% =
# 3.8%. Over a dot product of K terms the error sum grows as sqrt(K); it averages down relative to the
# result only when the terms share a sign, and for the zero-mean weights of these models it does not: each
# fp8 Linear adds ~3.8% relative error, compounding (damped by residual connections) over the layers.
# Measured by simulating torchao's per-tensor e4m3 activation and weight casts on the CPU (fp32 GEMM in
# between): tiny BERT max 0.075 over 20 seeds, bert_base 0.076 and 0.087, llama_small 0.118 and 0.123.
# Hopper's fp8 tensor cores also accumulate with only about 14 bits (DeepSeek-V3 Technical Report, arXiv
# 2412.19437, "Increasing Accumulation Precision", measured on H800), which adds to that on the GPU: 0.25
# is twice the worst measured.
PARITY_TOLERANCE = {"int8": 0.2, "fp8": 0.25}


def _check(dtype: str, mode: str) -> None:
    if dtype not in QUANTIZED_DTYPES:
        raise ValueError(f"unknown quantized dtype {dtype!r}; use {', '.join(QUANTIZED_DTYPES)}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use {', '.join(MODES)}")


def _import_torchao() -> tuple[ModuleType | None, str | None]:
    """(``torchao.quantization``, None) when torchao imports, else (None, why not with the install command)."""
    try:
        return importlib.import_module("torchao.quantization"), None
    except ImportError as error:
        return None, f"torchao is not installed ({error}); install it with `{TORCHAO_INSTALL}`"
    except Exception as error:  # a torchao built for another torch fails at import in many ways
        return None, (f"torchao is installed but fails to import ({type(error).__name__}: {error}); "
                      f"reinstall a build matching torch {torch.__version__} with `{TORCHAO_INSTALL}`")


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
        return f"fp8 needs CUDA compute capability {needed} or newer (fp8 tensor cores); {spec} ({name}) has {major}.{minor}"
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
        backend = "torch dynamic quantization" if kind == "cpu" else "torchao int8 weight-only quantization"
        return (f"int8 runs inference modes only ({', '.join(INFERENCE_MODES)}): {backend} has no backward "
                f"(no int8 training on {device})")
    if kind == "cuda":
        return _import_torchao()[1]
    if torch.backends.quantized.engine == "none":
        return "int8 on the CPU needs a quantized engine (fbgemm, x86, onednn or qnnpack); this torch build has none"
    return None


def quantize(model: nn.Module, dtype: str, device: str, mode: str) -> nn.Module:
    """Convert ``model``'s ``nn.Linear`` layers for ``dtype`` on ``device`` in place and return the model
    (see the module docstring for what each path quantizes; other layers keep their dtype).

    ``model`` must already be on ``device``. int8 on the CPU also switches it to eval mode, which dynamic
    quantization needs; do not reuse the module as an fp32 reference afterwards (deep-copy it first).

    Raises:
        ValueError: unknown ``dtype`` or ``mode``.
        RuntimeError: :func:`unsupported_reason`'s text when ``dtype`` cannot run ``mode`` on ``device``,
            or when the model has no Linear layer that could be converted (a quantized run would be a
            full-precision run under another name).
    """
    reason = unsupported_reason(dtype, device, mode)
    if reason is not None:
        raise RuntimeError(reason)
    if dtype == "int8":
        converted = _int8_cpu(model) if device_kind(device) == "cpu" else _int8_cuda(model)
    elif mode in INFERENCE_MODES:
        converted = _fp8_inference(model)
    else:
        converted = _fp8_training(model)
    if quantized_linear_count(converted) == 0:
        raise RuntimeError(f"{type(model).__name__} has no nn.Linear layer that {dtype} quantization could convert")
    return converted


def _int8_cpu(model: nn.Module) -> nn.Module:
    with warnings.catch_warnings():
        # torch 2.9+ deprecates torch.ao.quantization and quantized tensor creation; the API still works
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor", category=UserWarning)
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)


def _torchao_config(quantization: ModuleType, config_name: str, legacy_name: str) -> object:
    """An instance of torchao's ``config_name`` (0.9+ spelling), else of its function ``legacy_name``."""
    factory = getattr(quantization, config_name, None) or getattr(quantization, legacy_name)
    return factory()


def _fp8_compatible(module: nn.Module, _fqn: str = "") -> bool:
    return isinstance(module, nn.Linear) and all(size % FP8_DIM_MULTIPLE == 0 for size in module.weight.shape)


def _int8_cuda(model: nn.Module) -> nn.Module:
    quantization = _import_torchao()[0]
    quantization.quantize_(model, _torchao_config(quantization, "Int8WeightOnlyConfig", "int8_weight_only"))
    return model


def _fp8_inference(model: nn.Module) -> nn.Module:
    quantization = _import_torchao()[0]
    config = _torchao_config(quantization, "Float8DynamicActivationFloat8WeightConfig",
                             "float8_dynamic_activation_float8_weight")
    quantization.quantize_(model, config, filter_fn=_fp8_compatible)
    return model


def _fp8_training(model: nn.Module) -> nn.Module:
    """``Float8Linear`` layers; torchao recommends ``torch.compile`` on top to fuse the casts (eager mode runs
    them as separate kernels)."""
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


def prepare(model: nn.Module, dtype: str, device: str, mode: str) -> tuple[nn.Module, int | None]:
    """The model to run in ``dtype``: :func:`quantize`-d with its :func:`quantized_linear_count` for a dtype of
    :data:`QUANTIZED_DTYPES`, else ``model`` itself and None.

    Raises:
        RuntimeError: see :func:`quantize`.
    """
    if dtype not in QUANTIZED_DTYPES:
        return model, None
    converted = quantize(model, dtype, device, mode)
    return converted, quantized_linear_count(converted)


def quantized_linear_count(model: nn.Module) -> int:
    """How many Linear layers of ``model`` (itself included) run quantized: torch dynamic-quantized
    ``Linear`` modules, torchao ``Float8Linear`` modules and ``nn.Linear`` layers whose weight is a torchao
    quantized tensor. 0 for a model :func:`quantize` has not converted."""
    return sum(1 for module in model.modules() if _is_quantized_linear(module))

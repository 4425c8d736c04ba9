"""A stand-in for torchao, installed over ``sys.modules`` with monkeypatch, so hwregress's CUDA quantization
paths (:mod:`hwregress.measure.precision.quantization`) run on the CPU. It records the model each entry point received
and behaves like pytorch/ao where hwregress depends on it (snapshot 36027d8 of 2026-08, and tags v0.5.0-v0.18.0):

- ``quantize_``: ``torchao/quantization/quant_api.py:249`` takes ``(model, config, filter_fn=_is_linear,
  device=None)``; v0.9.0 ``quant_api.py:487`` had ``set_inductor_config: Optional[bool] = None`` (None means True,
  an explicit value warns that the argument will be removed), v0.5.0-v0.8.0 ``set_inductor_config: bool = True``.
- ``Int8WeightOnlyConfig`` (``quant_api.py:703``) and ``Float8DynamicActivationFloat8WeightConfig`` (``:1113``)
  are dataclasses with ``set_inductor_config: bool = True``; their handlers call
  ``recommended_inductor_config_setter()`` when it is set (``:757``, ``:1312``).
- ``recommended_inductor_config_setter`` (``torchao/quantization/utils.py:569``) sets five
  ``torch._inductor.config`` fields; v0.8.0-v0.17.0 also call ``torch.set_float32_matmul_precision("high")``
  (``utils.py:589`` in v0.9.0), process-wide state that is never restored.
- Quantized weights are wrapper tensor subclasses of ``torchao.utils.TorchAOBaseTensor`` whose ``dtype`` is the
  high-precision dtype of the weight they replaced and whose data live in the inner tensors ``__tensor_flatten__``
  names: ``Int8Tensor`` ``qdata`` (int8) and a per-row ``scale`` (``quantize_/workflows/int8/int8_tensor.py:59``,
  ``tensor_data_names = ["qdata", "scale"]``, fp32 scales at ``:199``), ``Float8Tensor`` ``qdata``
  (float8_e4m3fn) and ``scale`` (``quantize_/workflows/float8/float8_tensor.py:84``).
- ``Int8DynamicActivationInt8WeightConfig`` (0.18 ``quant_api.py:835``, a dataclass with ``set_inductor_config``)
  gives each weight an ``Int8Tensor`` with ``act_quant_kwargs``; its ``F.linear`` (``int8_tensor.py:263``) quantizes
  the activation per row (symmetric int8, fp32 scales) and multiplies int8 by int8 through ``int_scaled_matmul``
  (``torchao/kernel/intmm.py:148``) and ``safe_int_mm`` (``:35``): ``torch._int_mm`` (cuBLAS, int32 out) when K and N
  are multiples of 8 and it accepts the rows; K or N not a multiple of 8 is multiplied on the CPU in int32, and the
  error ``torch._int_mm`` raises for 16 rows or fewer ("self.size(0) needs to be greater than 16",
  ``aten/src/ATen/native/cuda/Blas.cpp`` ``_int_mm_out_cuda``) is caught and the product taken as an fp32 matmul
  (:meth:`FakeTorchao.int_mm` records which of the three each product took, :class:`Gemm`).
- ``torchao.float8.convert_to_float8_training(module, *, module_filter_fn=None, config=None)``
  (``torchao/float8/float8_linear_utils.py:86``) swaps ``nn.Linear`` for ``Float8Linear``, a subclass of
  ``nn.Linear`` (``torchao/float8/float8_linear.py:207``) that keeps its high-precision weight.

The quantized weights dequantize for every operator (the fake's arithmetic is the weight-only path's) except the
dynamic int8 weight's ``F.linear``, which runs the int8 x int8 product on the CPU, so a quantized model runs forward
on the CPU.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_map

# torchao/quantization/utils.py:569 recommended_inductor_config_setter
RECOMMENDED_INDUCTOR_CONFIG = {"coordinate_descent_tuning": True, "coordinate_descent_check_all_directions": True,
                               "force_fuse_int_mm_with_mul": True, "fx_graph_cache": True,
                               "triton.unique_kernel_names": True}


class TorchAOBaseTensor(torch.Tensor):
    """``torchao.utils.TorchAOBaseTensor``: the base of torchao's quantized tensors."""


class QuantizedWeight(TorchAOBaseTensor):
    """A wrapper subclass shaped like torchao's ``Int8Tensor``/``Float8Tensor``: reports the high-precision
    ``dtype``; stores ``qdata`` and ``scale`` (``__tensor_flatten__``)."""

    tensor_data_names: ClassVar[list[str]] = ["qdata", "scale"]

    @staticmethod
    def __new__(cls, qdata: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> QuantizedWeight:
        return torch.Tensor._make_wrapper_subclass(cls, qdata.shape, dtype=dtype, device=qdata.device,
                                                   requires_grad=False)

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> None:
        self.qdata = qdata
        self.scale = scale

    def __tensor_flatten__(self) -> tuple[list[str], dict[str, Any]]:
        return list(self.tensor_data_names), {"dtype": self.dtype}

    @classmethod
    def __tensor_unflatten__(cls, inner: dict[str, torch.Tensor], attributes: dict[str, Any], _size: Any,
                             _stride: Any) -> QuantizedWeight:
        return cls(inner["qdata"], inner["scale"], attributes["dtype"])

    def dequantize(self) -> torch.Tensor:
        return (self.qdata.to(torch.float32) * self.scale).to(self.dtype)

    def rewrapped(self) -> QuantizedWeight:
        """A new wrapper of the same data (what ``detach`` returns)."""
        return type(self)(self.qdata, self.scale, self.dtype)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in (torch.ops.aten.detach.default, torch.ops.aten.alias.default):  # nn.Parameter(...) detaches
            return args[0].rewrapped()

        def plain(value: Any) -> Any:
            return value.dequantize() if isinstance(value, QuantizedWeight) else value

        return func(*tree_map(plain, args), **tree_map(plain, kwargs or {}))


def _int8_data(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = weight.detach().float().abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127
    return (weight.detach().float() / scale).round().clamp(-128, 127).to(torch.int8), scale


def int8_weight(weight: torch.Tensor) -> QuantizedWeight:
    """Symmetric per-row int8 with fp32 scales, as ``Int8Tensor.from_hp`` with ``PerRow()``."""
    return QuantizedWeight(*_int8_data(weight), weight.dtype)


@dataclasses.dataclass(frozen=True)
class Gemm:
    """One int8 x int8 product of a dynamic int8 layer: ``rows`` x ``k`` by ``k`` x ``n``, and the path
    ``safe_int_mm`` takes for it on CUDA: ``"int8"`` (``torch._int_mm``), ``"fp32"`` (16 rows or fewer: the float32
    matmul of its ``except`` branch) or ``"cpu"`` (K or N not a multiple of 8: an int32 matmul on the CPU)."""

    rows: int
    k: int
    n: int
    path: str


class DynamicInt8Weight(QuantizedWeight):
    """An ``Int8Tensor`` with ``act_quant_kwargs``: ``F.linear`` quantizes the activation and multiplies in int8
    (through ``owner``'s :meth:`FakeTorchao.int_mm`); other operators see the dequantized weight."""

    @staticmethod
    def __new__(cls, qdata: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype,
                owner: FakeTorchao | None = None) -> DynamicInt8Weight:
        return torch.Tensor._make_wrapper_subclass(cls, qdata.shape, dtype=dtype, device=qdata.device,
                                                   requires_grad=False)

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype,
                 owner: FakeTorchao | None = None) -> None:
        super().__init__(qdata, scale, dtype)
        self.owner = owner

    def rewrapped(self) -> DynamicInt8Weight:
        return DynamicInt8Weight(self.qdata, self.scale, self.dtype, self.owner)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is nn.functional.linear:
            return dynamic_int8_linear(*args, **kwargs)
        return torch._C._disabled_torch_function_impl(func, types, args, kwargs)


def dynamic_int8_linear(activation: torch.Tensor, weight: DynamicInt8Weight,
                        bias: torch.Tensor | None = None) -> torch.Tensor:
    """``int8_tensor.py:263``'s dynamic path: per-row symmetric int8 activations with fp32 scales, an int8 x int8
    product in int32, rescaled by both scales into the activation's dtype."""
    rows = activation.reshape(-1, activation.shape[-1]).float()
    row_scale = rows.abs().amax(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float32).eps) / 127
    quantized = (rows / row_scale).round().clamp(-128, 127).to(torch.int8)
    product = weight.owner.int_mm(quantized, weight.qdata.t())
    out = (product.float() * row_scale * weight.scale.flatten()).to(activation.dtype)
    out = out.reshape(*activation.shape[:-1], weight.qdata.shape[0])
    return out if bias is None else out + bias


def float8_weight(weight: torch.Tensor) -> QuantizedWeight:
    """Per-tensor e4m3 with an fp32 scale, as ``Float8Tensor`` with ``PerTensor()``."""
    scale = (weight.detach().float().abs().amax().clamp_min(1e-12) / torch.finfo(torch.float8_e4m3fn).max).reshape(1, 1)
    qdata = (weight.detach().float() / scale).to(torch.float8_e4m3fn)
    return QuantizedWeight(qdata, scale, weight.dtype)


@dataclasses.dataclass
class Int8WeightOnlyConfig:
    set_inductor_config: bool = True


@dataclasses.dataclass
class Int8DynamicActivationInt8WeightConfig:
    set_inductor_config: bool = True


@dataclasses.dataclass
class Float8DynamicActivationFloat8WeightConfig:
    set_inductor_config: bool = True


WEIGHT_CONVERSION: dict[type, Callable[[torch.Tensor], QuantizedWeight]] = {
    Int8WeightOnlyConfig: int8_weight, Float8DynamicActivationFloat8WeightConfig: float8_weight}
INT_MM_MIN_ROWS = 17  # torch._int_mm on CUDA: self.size(0) > 16


@dataclasses.dataclass
class Call:
    """One entry point's call: its name, the config object (None for float8 training), the floating dtypes of
    the model's parameters when it arrived, and the keyword arguments it got."""

    entry: str
    config: Any
    model_dtypes: set[torch.dtype]
    kwargs: dict[str, Any]


def floating_dtypes(model: nn.Module) -> set[torch.dtype]:
    return {p.dtype for p in model.parameters() if p.is_floating_point()}


class FakeTorchao:
    """The installed modules and what they were called with (``calls``).

    Args:
        quantize_takes_inductor_flag: whether ``quantize_`` has the ``set_inductor_config`` parameter
            (v0.5.0-v0.9.0; from v0.10.0 only the configs' field).
        matmul_precision_too: whether the setter also calls ``torch.set_float32_matmul_precision("high")``
            (v0.8.0-v0.17.0).
    """

    def __init__(self, quantize_takes_inductor_flag: bool = True, matmul_precision_too: bool = True) -> None:
        self.calls: list[Call] = []
        self.gemms: list[Gemm] = []  # the dynamic int8 layers' products, in call order
        self.matmul_precision_too = matmul_precision_too
        self.quantization = types.ModuleType("torchao.quantization")
        self.quantization.Int8WeightOnlyConfig = Int8WeightOnlyConfig
        self.quantization.Int8DynamicActivationInt8WeightConfig = Int8DynamicActivationInt8WeightConfig
        self.quantization.Float8DynamicActivationFloat8WeightConfig = Float8DynamicActivationFloat8WeightConfig
        self.quantization.quantize_ = self._quantize_with_flag if quantize_takes_inductor_flag else self._quantize
        self.utils = types.ModuleType("torchao.utils")
        self.utils.TorchAOBaseTensor = TorchAOBaseTensor
        self.float8 = types.ModuleType("torchao.float8")
        self.float8.convert_to_float8_training = self._convert_to_float8_training
        self.float8_linear = types.ModuleType("torchao.float8.float8_linear")

        class Float8Linear(nn.Linear):
            """``torchao.float8.float8_linear.Float8Linear``."""

        self.float8_linear.Float8Linear = Float8Linear
        self.float8.float8_linear = self.float8_linear
        self.root = types.ModuleType("torchao")
        self.root.quantization, self.root.utils, self.root.float8 = self.quantization, self.utils, self.float8

    def modules(self) -> dict[str, types.ModuleType]:
        return {"torchao": self.root, "torchao.quantization": self.quantization, "torchao.utils": self.utils,
                "torchao.float8": self.float8, "torchao.float8.float8_linear": self.float8_linear}

    def recommended_inductor_config_setter(self) -> None:
        import torch._inductor.config as inductor_config

        for key, value in RECOMMENDED_INDUCTOR_CONFIG.items():
            setattr(inductor_config, key, value)
        if self.matmul_precision_too:
            torch.set_float32_matmul_precision("high")

    def _quantize_with_flag(self, model: nn.Module, config: Any, filter_fn: Callable | None = None,
                            set_inductor_config: bool | None = None, device: Any = None) -> None:
        """v0.9.0's ``quantize_``: None means True."""
        if set_inductor_config is None or set_inductor_config:
            self.recommended_inductor_config_setter()
        self._apply(model, config, filter_fn, {"set_inductor_config": set_inductor_config})

    def _quantize(self, model: nn.Module, config: Any, filter_fn: Callable | None = None, device: Any = None) -> None:
        self._apply(model, config, filter_fn, {})

    def int_mm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``safe_int_mm(a, b)`` on CUDA (``torchao/kernel/intmm.py:35``): int8 ``[M, K]`` by int8 ``[K, N]`` into
        int32, the path it takes recorded in :attr:`gemms`."""
        (rows, k), n = a.shape, b.shape[1]
        if k % 8 or n % 8:
            path = "cpu"
        elif rows < INT_MM_MIN_ROWS:
            path = "fp32"
        else:
            path = "int8"
        self.gemms.append(Gemm(rows, k, n, path))
        return a.to(torch.int32) @ b.to(torch.int32)

    def _weight_conversion(self, config: Any) -> Callable[[torch.Tensor], QuantizedWeight]:
        if isinstance(config, Int8DynamicActivationInt8WeightConfig):
            return lambda weight: DynamicInt8Weight(*_int8_data(weight), weight.dtype, self)
        return WEIGHT_CONVERSION[type(config)]

    def _apply(self, model: nn.Module, config: Any, filter_fn: Callable | None, kwargs: dict[str, Any]) -> None:
        self.calls.append(Call("quantize_", config, floating_dtypes(model), kwargs))
        convert = self._weight_conversion(config)
        accept = filter_fn or (lambda module, _fqn: isinstance(module, nn.Linear))
        for fqn, module in list(model.named_modules()):
            if isinstance(module, nn.Linear) and accept(module, fqn):
                if config.set_inductor_config:  # the handler's own call (quant_api.py:757, :1312)
                    self.recommended_inductor_config_setter()
                module.weight = nn.Parameter(convert(module.weight), requires_grad=False)

    def _convert_to_float8_training(self, module: nn.Module, *, module_filter_fn: Callable | None = None,
                                    config: Any = None) -> nn.Module:
        self.calls.append(Call("convert_to_float8_training", None, floating_dtypes(module), {}))
        accept = module_filter_fn or (lambda _module, _fqn: True)
        for fqn, child in list(module.named_modules()):
            if type(child) is nn.Linear and accept(child, fqn):
                child.__class__ = self.float8_linear.Float8Linear
        return module


def install(monkeypatch: pytest.MonkeyPatch, **options: bool) -> FakeTorchao:
    """Put a :class:`FakeTorchao` in ``sys.modules`` (undone by monkeypatch) and return it."""
    fake = FakeTorchao(**options)
    for name, module in fake.modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    return fake

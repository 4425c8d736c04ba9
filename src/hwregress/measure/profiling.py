"""Operator breakdown (torch.profiler) and FLOP counting (torch.utils.flop_counter) of a workload.

The profiled window is separate from the timed one, so profiler overhead never touches the measured
throughput. FLOPs follow torch.utils.flop_counter's convention: one multiply-add counts as 2 FLOPs
(torchvision's published "GFLOPS" are multiply-adds, so they are half of these figures).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.ao.nn.quantized.modules.linear import LinearPackedParams
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count, sdpa_backward_flop_count, sdpa_flop_count

from hwregress.hardware.devices import synchronize
from hwregress.hardware.facts import device_kind
from hwregress.workloads import Inputs, forward

COMPUTE_HINTS = ("conv", "mm", "matmul", "linear", "gemm", "bmm", "attention", "sdpa", "baddbmm")
MEMCPY_HINTS = ("memcpy", "memset", "aten::copy_", "aten::fill_", "aten::zero_", "aten::to", "aten::clone",
                "aten::contiguous", "aten::empty", "aten::zeros")
COMM_HINTS = ("nccl", "c10d::", "allreduce", "all_reduce", "allgather", "broadcast")


@dataclass
class OperatorProfile:
    """Where a profiled window spent its time.

    Attributes:
        top_device_ops: by self device time: dicts ``name, calls, total_ms, share`` (empty on the CPU).
        top_cpu_ops: by self CPU time, same fields.
        categories: on accelerators, fractions of the window's wall time: ``compute``, ``memcpy/memset``,
            ``communication`` and ``idle``; on the CPU, fractions of the operators' self time: ``compute``,
            ``memcpy/memset``, ``communication``, ``other`` (each sums to 1).
        steps: steps in the window; ``wall_ms``: its wall time.
    """

    top_device_ops: list[dict[str, Any]] = field(default_factory=list)
    top_cpu_ops: list[dict[str, Any]] = field(default_factory=list)
    categories: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    wall_ms: float = 0.0


def categorize(name: str) -> str:
    """Category of an operator or kernel name (case-insensitive substring rules)."""
    lowered = name.lower()
    if any(h in lowered for h in COMM_HINTS):
        return "communication"
    if any(h in lowered for h in MEMCPY_HINTS):
        return "memcpy/memset"
    if any(h in lowered for h in COMPUTE_HINTS):
        return "compute"
    return "other"


def _self_device_us(event: Any) -> float:
    # torch 2.4 renamed self_cuda_time_total to self_device_time_total; accept both
    value = getattr(event, "self_device_time_total", None)
    if value is None:
        value = getattr(event, "self_cuda_time_total", 0.0)
    return float(value or 0.0)


def _table(events: list[Any], time_of: Callable[[Any], float], top: int) -> list[dict[str, Any]]:
    timed = [(e, time_of(e)) for e in events if time_of(e) > 0]
    total = sum(t for _, t in timed) or 1.0
    timed.sort(key=lambda pair: pair[1], reverse=True)
    return [
        {"name": e.key, "calls": int(e.count), "total_ms": t / 1000.0, "share": t / total,
         "category": categorize(e.key)}
        for e, t in timed[:top]
    ]


def profile_operators(step: Callable[[], None], device: str, steps: int = 3, top: int = 15,
                      trace_path: Path | None = None) -> OperatorProfile:
    """Run ``step`` ``steps`` times under torch.profiler and break the time down.

    On CUDA the categories split the window's wall time by kernel self time (compute, memcpy/memset,
    communication) and the rest is ``idle`` (the device waited on the host); on the CPU they split the
    total self CPU time of the operators. ``trace_path`` saves the Chrome trace there.
    """
    activities = [ProfilerActivity.CPU]
    on_cuda = device_kind(device) == "cuda"
    if on_cuda:
        activities.append(ProfilerActivity.CUDA)
    synchronize(device)
    with profile(activities=activities, record_shapes=False) as prof:
        for _ in range(steps):
            step()
        synchronize(device)
    averages = list(prof.key_averages())
    result = OperatorProfile(steps=steps)
    result.top_cpu_ops = _table(averages, lambda e: float(e.self_cpu_time_total), top)
    events = list(prof.events())
    result.wall_ms = _window_ms(events)
    if on_cuda:
        # The profiler lists a kernel's time twice: on the kernel (a device event) and as self device
        # time of the operator that launched it. Operators make the table; kernels make the split.
        device_events = [e for e in averages if is_device_event(e)]
        host_ops = [e for e in averages if not is_device_event(e)]
        result.top_device_ops = _table(host_ops, _self_device_us, top) or _table(device_events, _self_device_us, top)
        result.categories = device_categories(device_events, result.wall_ms)
    else:
        result.categories = _shares(averages, lambda e: float(e.self_cpu_time_total))
    if trace_path is not None:
        _export_trace(prof, trace_path)
    return result


def _export_trace(prof: Any, trace_path: Path) -> None:
    """The profiler's Chrome trace at ``trace_path``, written as every output is: beside it first, then renamed over a
    regular file or a new path only (:func:`hwregress.store.atomic.replaceable_target`).

    Raises:
        hwregress.store.atomic.NotARegularFileError: a FIFO, device or folder is at ``trace_path``.
    """
    from hwregress.store.atomic import replaceable_target

    trace_path.parent.mkdir(parents=True, exist_ok=True)
    target = replaceable_target(trace_path)
    hidden = target.with_name(f".{target.name}.tmp")
    try:
        prof.export_chrome_trace(str(hidden))
        os.replace(hidden, target)
    finally:
        hidden.unlink(missing_ok=True)


def _window_ms(events: list[Any]) -> float:
    spans = [(e.time_range.start, e.time_range.end) for e in events if getattr(e, "time_range", None)]
    if not spans:
        return 0.0
    return (max(end for _, end in spans) - min(start for start, _ in spans)) / 1000.0


def is_device_event(event: Any) -> bool:
    """True for events that ran on an accelerator (kernels, memcpy, memset), False for host operators."""
    device_type = getattr(event, "device_type", DeviceType.CPU)
    return device_type is not None and device_type != DeviceType.CPU


def _shares(events: list[Any], time_of: Callable[[Any], float]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for event in events:
        category = categorize(event.key)
        totals[category] = totals.get(category, 0.0) + time_of(event)
    grand = sum(totals.values()) or 1.0
    return {k: v / grand for k, v in sorted(totals.items()) if v > 0}


def device_categories(device_events: list[Any], wall_ms: float) -> dict[str, float]:
    """Fractions of the window's wall time (ms) that the device spent in compute kernels (every kernel
    that is not a copy or a collective), memcpy/memset, communication, and idle (the rest)."""
    busy = {"compute": 0.0, "memcpy/memset": 0.0, "communication": 0.0}
    for event in device_events:
        category = categorize(event.key)
        busy[category if category in busy else "compute"] += _self_device_us(event) / 1000.0
    window = max(wall_ms, sum(busy.values())) or 1.0
    shares = {k: v / window for k, v in busy.items()}
    shares["idle"] = max(0.0, 1.0 - sum(shares.values()))
    return shares


def conv_backward_flops(grad_out_shape: list[int], x_shape: list[int], w_shape: list[int], _bias: Any,
                        _stride: Any, _padding: Any, _dilation: Any, transposed: bool, _output_padding: Any,
                        _groups: Any, output_mask: list[bool], out_shape: Any = None, **_: Any) -> int:
    """FLOPs of ``aten.convolution_backward``: the input gradient and the weight gradient each cost
    exactly the forward convolution's multiply-adds (every forward product appears once in each).

    Replaces torch.utils.flop_counter's formula, which computes the weight gradient as a dense
    convolution of input and output gradient and so ignores ``groups``: it overcounts a depthwise
    convolution's backward by the channel count (torch 2.13: 64x for a 64-channel depthwise 3x3;
    docs/measured.md, 'Measured on the development machine (CPU only)').
    """
    forward = conv_flop_count(list(x_shape), list(w_shape), list(grad_out_shape), transposed=transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def sdpa_forward_flops(query_shape: list[int], key_shape: list[int], value_shape: list[int], *_: Any,
                       **__: Any) -> int:
    """FLOPs of a fused attention forward that torch.utils.flop_counter does not register (the CPU
    flash kernel, the overrideable fused kernel): ``Q @ K^T`` and ``P @ V``, each 2 x b x h x s_q x s_k x d
    (torch's ``sdpa_flop_count``). Shapes are ``[batch, heads, sequence, head_dim]``."""
    return int(sdpa_flop_count(query_shape, key_shape, value_shape))


def sdpa_backward_flops(grad_out_shape: list[int], query_shape: list[int], key_shape: list[int],
                        value_shape: list[int], *_: Any, **__: Any) -> int:
    """FLOPs of the matching fused attention backward (torch's ``sdpa_backward_flop_count``: the four
    gradient products, plus the recomputation of ``Q @ K^T``)."""
    return int(sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape))


def dynamic_int8_linear_flops(x_shape: list[int], packed_params: Any, *_: Any, **__: Any) -> int:
    """FLOPs of ``quantized::linear_dynamic`` (torch's int8 dynamic quantized Linear on the CPU, which
    torch.utils.flop_counter does not register: an int8 model counted 0 FLOPs): 2 x rows x out x in, the weight
    shape ``[out, in]`` read from the packed parameters (``quantized::linear_unpack``)."""
    weight, _bias = torch.ops.quantized.linear_unpack(packed_params)
    rows = 1
    for size in x_shape[:-1]:
        rows *= int(size)
    return 2 * rows * int(weight.shape[0]) * int(weight.shape[1])


def _extra_flop_formulas() -> dict[Any, Callable[..., int]]:
    aten = torch.ops.aten
    mapping: dict[Any, Callable[..., int]] = {aten.convolution_backward: conv_backward_flops}
    if hasattr(torch.ops.quantized, "linear_dynamic"):  # absent from builds without a quantized engine
        mapping[torch.ops.quantized.linear_dynamic] = dynamic_int8_linear_flops
    fused = {"_scaled_dot_product_flash_attention_for_cpu": sdpa_forward_flops,
             "_scaled_dot_product_flash_attention_for_cpu_backward": sdpa_backward_flops,
             "_scaled_dot_product_fused_attention_overrideable": sdpa_forward_flops,
             "_scaled_dot_product_fused_attention_overrideable_backward": sdpa_backward_flops}
    for name, formula in fused.items():
        if hasattr(aten, name):  # absent from older torch builds
            mapping[getattr(aten, name)] = formula
    return mapping


@contextlib.contextmanager
def _attention_fast_path_off() -> Iterator[None]:
    """Route ``nn.MultiheadAttention`` / ``nn.TransformerEncoderLayer`` through their composite path.

    In eval mode without gradients both take a fused native kernel (``_native_multi_head_attention``,
    ``_transformer_encoder_layer_fwd``) that FlopCounterMode cannot see: vit_b_16 counted 22.5 of its
    35.1 GFLOPs. The composite path runs the same projections as ``addmm``/``mm`` and the attention as
    ``scaled_dot_product_attention``, all counted.
    """
    mha = torch.backends.mha
    saved = mha.get_fastpath_enabled()
    mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        mha.set_fastpath_enabled(saved)


def count_flops(run: Callable[[], Any]) -> int:
    """FLOPs (2 x multiply-adds) executed by ``run()``, counted by ``FlopCounterMode``.

    Counts matmul, convolution and attention operators (forward and, when ``run`` calls backward,
    backward, with :func:`conv_backward_flops` for convolutions, :func:`sdpa_forward_flops` for fused
    attention kernels torch does not register and :func:`dynamic_int8_linear_flops` for CPU int8 Linear
    layers); elementwise and optimizer operators are not counted, as in the published figures. The attention
    fast path is off while counting (:func:`_attention_fast_path_off`).
    """
    with _attention_fast_path_off(), FlopCounterMode(display=False, custom_mapping=_extra_flop_formulas()) as counter:
        run()
    return int(counter.get_total_flops())


PER_CHANNEL_SCHEMES = (torch.per_channel_affine, torch.per_channel_symmetric, torch.per_channel_affine_float_qparams)


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes ``tensor`` stores, at its own element width.

    A plain tensor: ``numel x element_size`` (fp32 4, bf16/fp16 2, int8/fp8 1). A wrapper tensor subclass
    (torchao's quantized weights: ``Int8Tensor``, ``Float8Tensor``, ``AffineQuantizedTensor``, whose ``dtype``
    reports the high-precision dtype they replaced): the sum over the inner tensors its ``__tensor_flatten__``
    names (the int8/fp8 data and the scales, recursively). A torch quantized tensor (``torch.qint8``): its
    1-byte data plus per-channel scales and zero points; a per-tensor scale is one scalar and not counted.
    """
    if is_traceable_wrapper_subclass(tensor):
        names, _ = tensor.__tensor_flatten__()
        return sum(tensor_bytes(getattr(tensor, name)) for name in names)
    stored = tensor.numel() * tensor.element_size()
    if tensor.is_quantized and tensor.qscheme() in PER_CHANNEL_SCHEMES:
        stored += tensor_bytes(tensor.q_per_channel_scales()) + tensor_bytes(tensor.q_per_channel_zero_points())
    return stored


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of ``model``'s weights at their stored widths (:func:`tensor_bytes` of every parameter), plus the
    packed weights and biases of torch's quantized Linear modules (``torch.ao.nn.quantized`` and its dynamic
    variant), which are not parameters: an int8 Linear counts 1 byte per weight and its fp32 bias at 4."""
    total = sum(tensor_bytes(parameter) for parameter in model.parameters())
    for module in model.modules():
        if isinstance(module, LinearPackedParams):
            weight, bias = module._weight_bias()
            total += tensor_bytes(weight) + (tensor_bytes(bias) if bias is not None else 0)
    return total


def _layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The leaf modules of ``model``, counting a quantized Linear as a leaf (its packed weights are held by a
    ``LinearPackedParams`` child that is never called)."""
    return [m for m in model.modules()
            if not isinstance(m, LinearPackedParams) and all(isinstance(c, LinearPackedParams) for c in m.children())]


def estimate_bytes_moved(model: torch.nn.Module, inputs: Inputs, training: bool, use_cache: bool | None = None) -> int:
    """Estimated DRAM traffic of one step, in bytes (the roofline's denominator).

    Method: every weight is read once per forward pass (:func:`parameter_bytes`); every leaf module's output
    activation is written once and read once (2x); a training step doubles the activation traffic for the
    backward pass and adds the gradient write plus the optimizer's read-modify-write of parameters and one
    momentum buffer (parameters counted 5x in total). Caches are ignored, so this is an upper bound on
    compulsory traffic for layers whose working set fits on chip and a lower bound otherwise.

    Each tensor counts at its own width (:func:`tensor_bytes`): int8 and fp8 weights 1 byte plus their scales,
    bf16 weights 2, fp32 weights 4 (also under autocast, which reads the fp32 weights); activations at the
    dtype the layer produced, so call this under the step's precision (autocast) to count bf16 outputs as 2.
    ``use_cache`` goes to the forward pass (:func:`hwregress.workloads.forward`).
    """
    weight_bytes = parameter_bytes(model)
    activation_bytes = 0

    def count_output(_module: torch.nn.Module, _inputs: Any, output: Any) -> None:
        nonlocal activation_bytes
        if isinstance(output, torch.Tensor):
            activation_bytes += tensor_bytes(output)

    handles = [m.register_forward_hook(count_output) for m in _layers(model)]
    try:
        with torch.no_grad():
            forward(model, inputs, use_cache=use_cache)
    finally:
        for handle in handles:
            handle.remove()
    if training:
        return 5 * weight_bytes + 4 * activation_bytes
    return weight_bytes + 2 * activation_bytes

"""FLOP counts against published figures, the CPU operator table, bytes moved at each tensor's own width,
roofline helpers."""

from __future__ import annotations

import copy
import os
import stat

import pytest
import torch
from fakes import torchao as fake_torchao
from torch import nn

from hwregress import workloads
from hwregress.hardware import roofline
from hwregress.measure import profiling
from hwregress.measure.precision import quantization

# torchvision's model cards (weights docs) publish "GFLOPS" at 224x224 that are multiply-adds.
PUBLISHED_GMACS = {"resnet18": 1.81, "alexnet": 0.71, "vgg16": 15.47}


@pytest.mark.parametrize("name", sorted(PUBLISHED_GMACS))
def test_forward_flops_match_published_counts(name):
    model = workloads.get(name).build().eval()
    inputs = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        flops = profiling.count_flops(lambda: model(inputs))
    assert flops / 2 / 1e9 == pytest.approx(PUBLISHED_GMACS[name], rel=0.01)


def test_cpu_operator_table_is_dominated_by_convolution():
    model = workloads.get("resnet18").build().eval()
    inputs = torch.randn(2, 3, 224, 224)

    def step():
        with torch.inference_mode():
            model(inputs)

    step()
    result = profiling.profile_operators(step, "cpu", steps=2)
    top = result.top_cpu_ops[0]
    assert "conv" in top["name"] and top["category"] == "compute"
    assert result.categories["compute"] > 0.5
    assert sum(result.categories.values()) == pytest.approx(1.0)


def test_trace_is_saved(tmp_path):
    path = tmp_path / "traces" / "t.json"
    profiling.profile_operators(lambda: torch.ones(64, 64) @ torch.ones(64, 64), "cpu", steps=1, trace_path=path)
    assert path.stat().st_size > 0


@pytest.mark.parametrize(("name", "category"), [
    ("aten::mkldnn_convolution", "compute"), ("sm90_xmma_gemm_bf16bf16", "compute"),
    ("Memcpy HtoD (Pageable -> Device)", "memcpy/memset"), ("ncclDevKernel_AllReduce_Sum_f32", "communication"),
    ("aten::relu_", "other"),
])
def test_categorize(name, category):
    assert profiling.categorize(name) == category


def test_bytes_moved_estimate_grows_for_training():
    model = torch.nn.Sequential(torch.nn.Linear(100, 100))
    inputs = torch.randn(4, 100)
    infer = profiling.estimate_bytes_moved(model, inputs, False)
    assert infer == 10100 * 4 + 2 * 4 * 100 * 4
    assert profiling.estimate_bytes_moved(model, inputs, True) > infer


def two_linears() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.Linear(64, 16))


WEIGHTS = 32 * 64 + 64 * 16  # elements of the two weight matrices
BIASES = 64 + 16
OUTPUTS = 4 * 64 + 4 * 16  # activation elements of a batch of 4, each written once and read once


def test_cpu_int8_weights_count_one_byte_a_quarter_of_fp32():
    fp32 = two_linears()
    int8 = quantization.quantize(copy.deepcopy(fp32), "int8", "cpu", "infer")
    assert profiling.parameter_bytes(fp32) == WEIGHTS * 4 + BIASES * 4
    assert profiling.parameter_bytes(int8) == WEIGHTS * 1 + BIASES * 4  # per-tensor int8 weights, fp32 biases
    inputs = torch.randn(4, 32)
    assert profiling.estimate_bytes_moved(int8, inputs, False) == WEIGHTS + BIASES * 4 + 2 * OUTPUTS * 4  # fp32 outputs
    assert profiling.estimate_bytes_moved(fp32, inputs, False) == WEIGHTS * 4 + BIASES * 4 + 2 * OUTPUTS * 4


@pytest.mark.parametrize(("config", "scale_elements"), [
    (fake_torchao.Int8WeightOnlyConfig, 64 + 16),  # int8: one fp32 scale per output row
    (fake_torchao.Float8DynamicActivationFloat8WeightConfig, 2),  # fp8: one fp32 scale per tensor
])
def test_torchao_weights_count_their_one_byte_data_and_scales_on_a_bf16_model(config, scale_elements):
    model = two_linears().to(torch.bfloat16)
    fake_torchao.FakeTorchao(quantize_takes_inductor_flag=False).quantization.quantize_(
        model, config(set_inductor_config=False))
    assert model[0].weight.dtype == torch.bfloat16 and model[0].weight.element_size() == 2  # what the subclass reports
    assert profiling.parameter_bytes(model) == WEIGHTS * 1 + scale_elements * 4 + BIASES * 2
    moved = profiling.estimate_bytes_moved(model, torch.randn(4, 32, dtype=torch.bfloat16), False)
    assert moved == WEIGHTS + scale_elements * 4 + BIASES * 2 + 2 * OUTPUTS * 2  # bf16 activations


def test_autocast_counts_fp32_weights_and_bf16_activations():
    model = two_linears()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        moved = profiling.estimate_bytes_moved(model, torch.randn(4, 32), False)
    assert moved == (WEIGHTS + BIASES) * 4 + 2 * OUTPUTS * 2


def test_published_peaks_and_mfu():
    assert roofline.published_peak("NVIDIA H100 80GB HBM3").tflops["bf16"] == 989.4
    assert roofline.published_peak("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert roofline.published_peak("NVIDIA A100-SXM4-80GB").name == "A100 80GB SXM"
    assert roofline.published_peak("NVIDIA A10").name == "A10"
    assert roofline.published_peak("AMD EPYC") is None
    assert roofline.mfu(494.7, "NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(0.5)
    assert roofline.mfu(1.0, "AMD EPYC", "fp32") is None
    assert roofline.attainable_tflops(10, 989.4, 3.35) == pytest.approx(33.5)
    assert roofline.ridge_point(989.4, 3.35) == pytest.approx(295.3, rel=1e-3)


class _Event:
    def __init__(self, key, device_us, device_type):
        self.key, self.self_device_time_total, self.device_type = key, device_us, device_type


def test_device_split_counts_kernels_once_and_the_rest_is_idle():
    from torch.autograd import DeviceType

    events = [_Event("aten::mm", 600.0, DeviceType.CPU), _Event("sm90_xmma_gemm", 600.0, DeviceType.CUDA),
              _Event("Memcpy HtoD (Pinned -> Device)", 200.0, DeviceType.CUDA),
              _Event("vectorized_elementwise_kernel", 200.0, DeviceType.CUDA)]
    kernels = [e for e in events if profiling.is_device_event(e)]
    assert ([e.key for e in kernels]
            == ["sm90_xmma_gemm", "Memcpy HtoD (Pinned -> Device)", "vectorized_elementwise_kernel"])
    split = profiling.device_categories(kernels, wall_ms=2.0)
    assert split == pytest.approx({"compute": 0.4, "memcpy/memset": 0.1, "communication": 0.0, "idle": 0.5})


@pytest.mark.parametrize("groups", [1, 4, 64])
def test_convolution_backward_costs_one_forward_per_gradient(groups):
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, groups=groups)
    x = torch.randn(2, 64, 16, 16)
    forward = profiling.count_flops(lambda: conv(x))
    assert forward == 2 * 2 * 16 * 16 * 64 * (64 // groups) * 9
    assert profiling.count_flops(lambda: conv(x).sum().backward()) == 2 * forward  # weight gradient only
    x.requires_grad_(True)
    assert profiling.count_flops(lambda: conv(x).sum().backward()) == 3 * forward  # input and weight gradients


def test_training_step_of_a_depthwise_network_is_about_three_forward_passes():
    model = workloads.get("mobilenet_v3_small").build()
    inputs = torch.randn(2, 3, 224, 224)
    forward = profiling.count_flops(lambda: model(inputs))
    train = profiling.count_flops(lambda: model(inputs).sum().backward())
    assert 2.5 < train / forward < 3.0


def test_published_roof_of_each_ceiling():
    peak = roofline.published_peak("NVIDIA H100 80GB HBM3")
    assert peak.roof("gemm", "bf16") == 989.4 and peak.roof("copy", "fp32") == 3350.0
    assert peak.roof("h2d", "fp32") is None and roofline.published_peak("Tesla T4").roof("gemm", "bf16") is None


def test_a_trace_is_never_written_onto_a_fifo(tmp_path):
    from hwregress.store.atomic import NotARegularFileError

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    with pytest.raises(NotARegularFileError, match="is a FIFO"):
        profiling.profile_operators(lambda: torch.ones(8, 8) @ torch.ones(8, 8), "cpu", steps=1, trace_path=fifo)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]

"""Quantized modes on the CPU: int8 dynamic quantization of a tiny BERT against fp32, and the reasons int8/fp8
cannot run elsewhere (CUDA answered by fakes, torchao's presence or absence forced through sys.modules)."""

from __future__ import annotations

import copy
import sys
import types

import pytest
import torch
from fakes import cuda as fake_cuda
from torch import nn

from hwregress.measure.precision.quantization import (
    PARITY_TOLERANCE,
    QUANTIZED_DTYPES,
    quantize,
    quantized_linear_count,
    unsupported_reason,
)
from hwregress.workloads import import_torchvision

TORCHAO_MODULES = ("torchao", "torchao.quantization")


def tiny_bert() -> nn.Module:
    """BERT with 2 layers, hidden 128, 2 heads, MLP 256 and a 2-class head (random weights, seed 0)."""
    import_torchvision()  # transformers imports torchvision, whose wheel may need the schema workaround
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=256)
    return transformers.BertForSequenceClassification(config).eval()


def token_ids(vocab_size: int, batch: int = 8, length: int = 64) -> torch.Tensor:
    return torch.randint(0, vocab_size, (batch, length), generator=torch.Generator().manual_seed(1234))


@pytest.fixture
def without_torchao(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import torchao`` raises ImportError, whether or not torchao is installed."""
    for name in TORCHAO_MODULES:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def with_torchao(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import torchao.quantization`` succeeds (an empty stand-in: only the reasons are asked)."""
    for name in TORCHAO_MODULES:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))


def test_int8_inference_on_cpu_matches_fp32_within_tolerance() -> None:
    reference_model = tiny_bert()
    linear_layers = sum(isinstance(module, nn.Linear) for module in reference_model.modules())
    ids = token_ids(reference_model.config.vocab_size)
    assert unsupported_reason("int8", "cpu", "infer") is None
    quantized = quantize(copy.deepcopy(reference_model), "int8", "cpu", "infer")
    with torch.no_grad():
        reference = reference_model(input_ids=ids).logits
        output = quantized(input_ids=ids).logits
    relative_error = float((output - reference).norm() / reference.norm())
    assert 0 < relative_error <= PARITY_TOLERANCE["int8"]  # > 0: int8 arithmetic ran, not the fp32 layers
    assert quantized_linear_count(quantized) == linear_layers == 14  # 6 per layer, pooler, classifier
    assert quantized_linear_count(reference_model) == 0


def test_int8_quantizes_linear_layers_only() -> None:
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))
    quantize(model, "int8", "cpu", "prefill")
    assert type(model[0]) is nn.Conv2d and model[0].weight.dtype == torch.float32
    assert quantized_linear_count(model) == 1
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, 10)


def test_a_model_without_linear_layers_is_refused() -> None:
    with pytest.raises(RuntimeError, match=r"no nn\.Linear"):
        quantize(nn.Sequential(nn.Conv2d(1, 4, 3)), "int8", "cpu", "infer")


def test_int8_training_on_cpu_is_unsupported() -> None:
    reason = unsupported_reason("int8", "cpu", "train")
    assert reason is not None and "inference" in reason
    with pytest.raises(RuntimeError, match="inference") as raised:
        quantize(nn.Linear(4, 4), "int8", "cpu", "train")
    assert str(raised.value) == reason


def test_fp8_on_cpu_and_mps_is_unsupported() -> None:
    assert "8.9" in unsupported_reason("fp8", "cpu", "infer")
    for dtype in QUANTIZED_DTYPES:
        assert "mps" in unsupported_reason(dtype, "mps", "infer")
    with pytest.raises(RuntimeError, match=r"8\.9"):
        quantize(nn.Linear(16, 16), "fp8", "cpu", "infer")


@pytest.mark.usefixtures("without_torchao")
def test_int8_on_cuda_without_torchao_says_how_to_install_it() -> None:
    reason = unsupported_reason("int8", "cuda:0", "infer")
    assert reason is not None and "pip install torchao" in reason


@pytest.mark.usefixtures("without_torchao")
def test_fp8_names_the_capability_then_asks_for_torchao(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties("NVIDIA A100-SXM4-80GB", (8, 0)),
                                    1: fake_cuda.fake_properties("NVIDIA H100 80GB HBM3", (9, 0))})
    too_old = unsupported_reason("fp8", "cuda:0", "infer")
    assert "8.0" in too_old and "8.9" in too_old and "A100" in too_old
    assert "pip install torchao" in unsupported_reason("fp8", "cuda:1", "train")


@pytest.mark.usefixtures("with_torchao")
def test_cuda_modes_run_once_torchao_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties("NVIDIA H100 80GB HBM3", (9, 0))})
    assert unsupported_reason("int8", "cuda:0", "decode") is None
    assert unsupported_reason("fp8", "cuda:0", "infer") is None
    assert unsupported_reason("fp8", "cuda:0", "train") is None
    assert "inference" in unsupported_reason("int8", "cuda:0", "train")


def test_unknown_dtype_or_mode_raises_value_error() -> None:
    with pytest.raises(ValueError, match="int4"):
        unsupported_reason("int4", "cpu", "infer")
    with pytest.raises(ValueError, match="int4"):
        quantize(nn.Linear(4, 4), "int4", "cpu", "infer")
    with pytest.raises(ValueError, match="sample"):
        unsupported_reason("int8", "cpu", "sample")

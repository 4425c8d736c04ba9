"""Quantized modes on the CPU: int8 dynamic quantization of a tiny BERT against fp32, and the reasons int8/fp8
cannot run elsewhere (CUDA answered by fakes, torchao's presence or absence forced through sys.modules). The CUDA
paths run against a fake torchao (tests/fakes/torchao.py): the model they quantize is bf16, and torchao's
inductor settings do not outlive the call."""

from __future__ import annotations

import copy
import sys
import types

import pytest
import torch
from fakes import cuda as fake_cuda
from fakes import torchao as fake_torchao
from torch import nn

from hwregress.measure.precision import quantization
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


def fp32_model() -> nn.Module:
    """Two fp32 Linear layers whose dimensions are multiples of 16 (fp8-compatible), seed 0."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))


def inductor_state() -> tuple[dict, str]:
    import torch._inductor.config as inductor_config

    return inductor_config.get_config_copy(), torch.get_float32_matmul_precision()


@pytest.fixture
def inductor_state_restored():
    """Undo whatever a test leaves in torch._inductor.config and the fp32 matmul precision (so a failing test
    does not change the tests after it); yields the state found on entry."""
    import torch._inductor.config as inductor_config

    saved, precision = inductor_state()
    yield saved, precision
    current = inductor_config.get_config_copy()
    for key, value in saved.items():
        if current[key] != value:
            setattr(inductor_config, key, value)
    torch.set_float32_matmul_precision(precision)


@pytest.fixture
def h100_with_torchao(monkeypatch: pytest.MonkeyPatch) -> fake_torchao.FakeTorchao:
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties("NVIDIA H100 80GB HBM3", (9, 0))})
    return fake_torchao.install(monkeypatch)


@pytest.mark.usefixtures("inductor_state_restored")
@pytest.mark.parametrize(("dtype", "mode"),
                         [("int8", "infer"), ("int8", "decode"), ("fp8", "infer"), ("fp8", "prefill")])
def test_cuda_inference_quantizes_a_bf16_model(dtype, mode, h100_with_torchao):
    model, quantized = quantization.prepare(fp32_model(), dtype, "cuda:0", mode)
    (call,) = h100_with_torchao.calls
    assert call.entry == "quantize_" and call.model_dtypes == {torch.bfloat16}
    assert quantized == 2
    # no fp32 GEMM left for TF32
    assert {p.dtype for p in model.parameters() if p.is_floating_point()} == {torch.bfloat16}
    assert quantization.base_dtype_name(dtype, "cuda:0") == "bf16"
    inputs = quantization.cast_inputs(torch.randn(4, 32), dtype, "cuda:0")
    assert inputs.dtype == torch.bfloat16
    with torch.no_grad():
        assert model(inputs).dtype == torch.bfloat16  # bf16 activations end to end


@pytest.mark.usefixtures("inductor_state_restored")
def test_cuda_fp8_training_converts_a_bf16_model(h100_with_torchao):
    model, quantized = quantization.prepare(fp32_model(), "fp8", "cuda:0", "train")
    (call,) = h100_with_torchao.calls
    assert call.entry == "convert_to_float8_training" and call.model_dtypes == {torch.bfloat16}
    assert quantized == 2 and all(p.dtype == torch.bfloat16 for p in model.parameters())


def test_cpu_int8_keeps_the_fp32_model_and_inputs():
    model, quantized = quantization.prepare(fp32_model(), "int8", "cpu", "infer")
    assert quantized == 2 and quantization.base_dtype_name("int8", "cpu") == "fp32"
    inputs = quantization.cast_inputs({"x": torch.randn(4, 32), "ids": torch.ones(4, dtype=torch.long)}, "int8", "cpu")
    assert inputs["x"].dtype == torch.float32 and inputs["ids"].dtype == torch.long
    assert model(inputs["x"]).dtype == torch.float32
    assert quantization.base_dtype_name("bf16", "cuda:0") is None  # unquantized dtypes keep numerics' rules
    assert quantization.cast_inputs(torch.randn(2), "bf16", "cuda:0").dtype == torch.float32


@pytest.mark.parametrize("quantize_takes_inductor_flag", [True, False], ids=["v0.9-quantize_", "v0.10+-quantize_"])
@pytest.mark.parametrize(("dtype", "mode"), [("int8", "infer"), ("fp8", "infer"), ("fp8", "train")])
def test_torchao_leaves_inductor_config_and_matmul_precision_as_found(dtype, mode, quantize_takes_inductor_flag,
                                                                     inductor_state_restored, monkeypatch):
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties("NVIDIA H100 80GB HBM3", (9, 0))})
    fake = fake_torchao.install(monkeypatch, quantize_takes_inductor_flag=quantize_takes_inductor_flag)
    quantization.prepare(fp32_model(), dtype, "cuda:0", mode)
    assert inductor_state() == inductor_state_restored
    for call in fake.calls:  # asked not to touch it where the signatures allow
        assert call.config is None or call.config.set_inductor_config is False
        assert call.kwargs.get("set_inductor_config", False) is False


def test_inductor_state_kept_restores_what_torchao_sets(inductor_state_restored):
    """The guard itself, against the fake's copy of recommended_inductor_config_setter (v0.8-v0.17)."""
    with quantization.inductor_state_kept():
        fake_torchao.FakeTorchao().recommended_inductor_config_setter()
        assert inductor_state() != inductor_state_restored
    assert inductor_state() == inductor_state_restored


# -- int8 on CUDA: int8 GEMMs on dynamically quantized activations (torchao 0.18, followed by tests/fakes/torchao.py) --

def rows_probe(rows: int):
    """A forward of ``rows`` samples into :func:`fp32_model` (32 features), in the bf16 the CUDA path feeds."""
    return lambda model: model(torch.randn(rows, 32, dtype=torch.bfloat16))


@pytest.mark.usefixtures("inductor_state_restored")
def test_cuda_int8_multiplies_int8_by_int8_on_dynamically_quantized_activations(h100_with_torchao):
    model, quantized = quantization.prepare(fp32_model(), "int8", "cuda:0", "infer", probe=rows_probe(32))
    (call,) = h100_with_torchao.calls
    assert type(call.config) is fake_torchao.Int8DynamicActivationInt8WeightConfig
    assert quantized == 2
    with torch.no_grad():
        model(quantization.cast_inputs(torch.randn(32, 32), "int8", "cuda:0"))
    # each Linear's product went to torch._int_mm: none to torchao's fp32 or CPU fallbacks
    assert [gemm.path for gemm in h100_with_torchao.gemms] == ["int8", "int8"]


@pytest.mark.usefixtures("inductor_state_restored")
def test_cuda_int8_leaves_in_bf16_a_layer_whose_product_torch_int_mm_refuses(h100_with_torchao):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 20))  # 20 outputs: not a multiple of 8
    model, quantized = quantization.prepare(model, "int8", "cuda:0", "infer", probe=rows_probe(32))
    assert quantized == 1
    assert not isinstance(model[2].weight, fake_torchao.QuantizedWeight) and model[2].weight.dtype == torch.bfloat16
    with torch.no_grad():
        model(quantization.cast_inputs(torch.randn(32, 32), "int8", "cuda:0"))
    assert [gemm.path for gemm in h100_with_torchao.gemms] == ["int8"]  # nothing multiplied on the CPU


@pytest.mark.usefixtures("inductor_state_restored")
def test_cuda_int8_on_16_rows_or_fewer_is_unsupported_not_an_fp32_matmul_named_int8(h100_with_torchao):
    # torch._int_mm refuses 16 rows or fewer and torchao then multiplies in fp32: a decode step of 16 sequences
    with pytest.raises(quantization.QuantizationUnsupported, match="more than 16 rows") as raised:
        quantization.prepare(fp32_model(), "int8", "cuda:0", "decode", probe=rows_probe(16))
    assert "Sequential" in str(raised.value) and "16 rows" in str(raised.value)
    assert not h100_with_torchao.calls  # nothing was quantized


def test_each_quantized_path_names_its_own_algorithm():
    names = {(dtype, device, mode): quantization.algorithm(dtype, device, mode)
             for dtype, device, mode in [("int8", "cpu", "infer"), ("int8", "cuda:0", "infer"),
                                         ("fp8", "cuda:0", "infer"), ("fp8", "cuda:0", "train")]}
    assert None not in names.values() and len(set(names.values())) == 4  # no label covers two paths
    assert names["int8", "cpu", "infer"] == "int8-dynamic-per-tensor"
    assert names["int8", "cuda:0", "infer"] == "int8-dynamic-per-token"
    assert quantization.algorithm("bf16", "cuda:0", "infer") is None


def test_linear_rows_are_the_fewest_rows_each_linear_multiplied():
    model = fp32_model()

    def two_calls(m: nn.Module) -> None:
        m(torch.randn(7, 32))
        m(torch.randn(2, 5, 32))

    assert quantization.linear_rows(model, two_calls) == {"0": 7, "2": 7}
    assert not model[0]._forward_pre_hooks  # the probe's hooks are gone


CONV_ONLY = '''
from torch import nn
from hwregress.workloads import Workload, register
register(Workload(name="convonly", build=lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten()),
                  input_shape=(3, 8, 8), num_classes=144))
'''


def test_a_quantized_dtype_with_nothing_to_quantize_is_unsupported_end_to_end(hw_project):
    hw_project.pytester.makepyfile(convonly_workload=CONV_ONLY)
    result = hw_project.run("-m", "cpu and throughput", "--workloads", "convonly_workload", "--models", "convonly",
                            "--modes", "infer", "--dtypes", "int8", "--batch-sizes", "2", "-rs")
    result.assert_outcomes(skipped=1)
    (record,) = hw_project.results["records"]
    assert record["verdict"] == "unsupported" and "no nn.Linear layer" in record["message"]

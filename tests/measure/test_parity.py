"""Accuracy parity on the real digits data and output parity of models."""

from __future__ import annotations

import pytest
import torch

from hwregress import workloads
from hwregress.measure import parity


def test_digits_split_is_real_and_fixed():
    train_x, _, test_x, test_y = parity.digits_split()
    assert train_x.shape[1:] == (1, 8, 8) and len(train_x) + len(test_x) == 1797
    assert float(train_x.max()) == 1.0 and set(test_y.tolist()) == set(range(10))
    assert (parity.digits_split()[3] == test_y).all()


def test_digits_training_is_accurate_and_reproducible():
    first = parity.train_digits("cpu", steps=150)
    assert first >= 0.90
    assert parity.train_digits("cpu", steps=150) == first


def test_output_parity_on_cpu_passes():
    result = parity.output_parity(workloads.get("mobilenet_v3_small"), "cpu", "fp32")
    assert result.ok and result.top1_agreement == 1.0 and result.relative_error <= 1e-6


def test_bf16_output_parity_is_judged_with_its_tolerance():
    result = parity.output_parity(workloads.get("resnet18"), "cpu", "bf16")
    assert result.tolerance == parity.OUTPUT_TOLERANCE["bf16"]
    assert 0 < result.relative_error < result.tolerance


def test_real_images_have_model_input_shape():
    images = parity.real_images(workloads.get("resnet18"), count=3)
    assert images.shape == (3, 3, 224, 224)
    assert float(images.mean()) == pytest.approx(0.0, abs=1e-5)


def _fp16_overflow():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))
    with torch.no_grad():
        model[1].bias.fill_(70_000.0)  # finite in fp32, above fp16's largest finite value (65504)
    return model


def test_outputs_not_finite_on_the_device_fail_naming_the_side_and_the_count():
    workload = workloads.Workload("fp16_overflow", build=_fp16_overflow, input_shape=(3, 8, 8), num_classes=10)
    assert parity.output_parity(workload, "cpu", "fp32").ok

    result = parity.output_parity(workload, "cpu", "fp16")  # autocast casts the bias to fp16: inf

    assert not result.ok and (result.nonfinite, result.reference_nonfinite, result.logits) == (80, 0, 80)
    assert result.top1_agreement == result.decisive_agreement == 0.0
    assert result.failure("cpu", "fp16") == ("outputs are not finite: 80 of 80 logits are NaN or inf on the device "
                                             "(cpu, fp16), 0 of 80 in the CPU fp32 reference")


def test_a_non_finite_reference_row_agrees_with_nothing():
    reference = torch.tensor([[1.0, 0.0], [float("nan"), 0.0], [0.0, 1.0]])
    output = torch.tensor([[1.0, 0.0], [float("nan"), 0.0], [0.0, 1.0]])

    result = parity.compare_logits(output, reference, tolerance=1e-3)

    assert (result.nonfinite, result.reference_nonfinite) == (1, 1)
    assert result.top1_agreement == pytest.approx(2 / 3) and result.decisive_agreement == pytest.approx(2 / 3)
    assert "1 of 6 logits are NaN or inf on the device (cuda:0, bf16), 1 of 6 in the CPU fp32 reference" in (
        result.failure("cuda:0", "bf16"))


def _tiny_llama_recording(calls: list) -> torch.nn.Module:
    """A 2-layer random Llama (hidden 64, vocabulary 128) whose forward hook records its parameters' dtype and
    whether CPU autocast was on."""
    from hwregress.workloads.transformers import import_transformers

    transformers = import_transformers()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=128, max_position_embeddings=128)
    model = transformers.LlamaForCausalLM(config)
    model.register_forward_hook(lambda module, _args, _out: calls.append(
        (next(module.parameters()).dtype, torch.is_autocast_enabled("cpu"))))
    return model


def test_bf16_output_parity_of_a_causal_lm_checks_the_numerics_its_windows_time():
    # a causal LM's bf16 inference windows run bf16 weights without autocast (numerics.runs_in_dtype): output parity
    # must compare that arithmetic, not fp32 weights under autocast
    calls: list = []
    workload = workloads.Workload("tiny_llama_parity", lambda: _tiny_llama_recording(calls), num_classes=128,
                                  input_kind="tokens", seq_len=16, vocab_size=128, task="causal-lm")
    result = parity.output_parity(workload, "cpu", "bf16")
    reference, device = calls
    assert reference == (torch.float32, False)
    assert device == (torch.bfloat16, False)
    assert result.relative_error > 0

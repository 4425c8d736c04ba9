"""The transformers workloads: registration, sizes on the meta device, CPU forward/backward, FLOP counts, offline
builds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from hwregress import workloads
from hwregress.workloads import transformers as transformer_workloads
from hwregress.workloads.transformers import PARITY_TOLERANCE, TRANSFORMER_WORKLOADS

# name -> (input_kind, seq_len, vocab_size, task, num_classes, published parameter count)
DECLARED = {
    "bert_base": ("tokens", 128, 30522, "classification", 2, 109.5e6),
    "roberta_base": ("tokens", 128, 50265, "classification", 2, 124.6e6),
    "deit_small": ("images", None, None, "classification", 1000, 22.1e6),
    "gpt2": ("tokens", 512, 50257, "causal-lm", 50257, 124.4e6),
    "llama_1b": ("tokens", 512, 128256, "causal-lm", 128256, 1.236e9),
    "llama_small": ("tokens", 256, 32000, "causal-lm", 32000, 40.5e6),
}
DEIT_TOKENS = (224 // 16) ** 2 + 2  # patches + class token + distillation token
H100_BYTES = 80e9


def meta_model(name: str) -> nn.Module:
    with torch.device("meta"):
        return workloads.get(name).build()


def parameter_count(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def tokens_per_sample(name: str) -> int:
    return workloads.get(name).seq_len or DEIT_TOKENS


def rule_of_thumb_flops(model: nn.Module, tokens: int) -> float:
    """``2 * N * T + 4 * L * T^2 * d`` (Kaplan et al. 2020, table 1): N = parameters that multiply activations
    (all but embedding lookup tables; a tied LM head is a matmul and counts), then QK^T and AV over the full square."""
    lookup = sum(module.weight.numel() for module in model.modules() if isinstance(module, nn.Embedding))
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    tied_head = head.weight.numel() if head is not None and any(
        head.weight is module.weight for module in model.modules() if isinstance(module, nn.Embedding)) else 0
    matmul_parameters = parameter_count(model) - lookup + tied_head
    config = model.config
    return 2 * matmul_parameters * tokens + 4 * config.num_hidden_layers * tokens**2 * config.hidden_size


def forward_flops(model: nn.Module, inputs: workloads.Inputs) -> int:
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        workloads.forward(model, inputs)
    return counter.get_total_flops()


@pytest.fixture(scope="module")
def cpu_models() -> dict[str, nn.Module]:
    """Each CPU-sized workload built once, seeded."""
    built = {}
    for name in ("bert_base", "roberta_base", "deit_small", "gpt2", "llama_small"):
        torch.manual_seed(0)
        built[name] = workloads.get(name).build()
    return built


def test_all_register_with_declared_fields():
    assert set(TRANSFORMER_WORKLOADS) == set(DECLARED)
    for name, (input_kind, seq_len, vocab_size, task, num_classes, _) in DECLARED.items():
        workload = workloads.get(name)
        assert (workload.input_kind, workload.seq_len, workload.vocab_size, workload.task, workload.num_classes) == (
            input_kind, seq_len, vocab_size, task, num_classes), name
        assert workload.source.startswith("transformers ") and not workload.convolutional
        assert workload.loss is (workloads.causal_lm_loss if task == "causal-lm" else nn.functional.cross_entropy)
        assert dict(workload.parity_tolerance) == {"fp32": 2e-3, "tf32": 3e-2, "bf16": 1e-1, "fp16": 5e-2}
        modes = {"train", "infer"} | ({"prefill", "decode"} if task == "causal-lm" else set())
        for kind in ("cpu", "cuda", "mps"):
            assert set(workload.default_batches[kind]) == modes, (name, kind)
    assert workloads.get("deit_small").input_shape == (3, 224, 224)
    assert workloads.get("bert_base").unit == "tokens/s" and workloads.get("deit_small").unit == "samples/s"


def test_register_all_is_idempotent_and_refuses_foreign_names_unless_replacing():
    assert transformer_workloads.register_all() == []
    original = workloads.get("gpt2")
    workloads.register(workloads.Workload("gpt2", nn.Identity), replace=True)
    try:
        before = {name: workloads.get(name) for name in workloads.names()}
        with pytest.raises(ValueError, match="'gpt2'"):
            transformer_workloads.register_all()
        assert {name: workloads.get(name) for name in workloads.names()} == before
        assert transformer_workloads.register_all(replace=True) == ["gpt2"]
    finally:
        workloads.register(original, replace=True)
    assert workloads.get("gpt2") is original


@pytest.mark.parametrize("name", list(DECLARED))
def test_parameter_count_on_meta_matches_the_published_size(name):
    model = meta_model(name)
    assert parameter_count(model) == pytest.approx(DECLARED[name][5], rel=0.05)
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("name", list(DECLARED))
def test_meta_flop_count_matches_the_rule_of_thumb(name):
    """On meta, SDPA decomposes into counted matmuls, so the count includes attention (the mask is left out:
    an all-ones mask changes no FLOP, and transformers' mask check reads tensor values, which meta lacks)."""
    workload, model = workloads.get(name), meta_model(name).eval()
    inputs, _ = workloads.make_batch(workload, 1, "meta")
    if isinstance(inputs, dict):
        inputs = {"input_ids": inputs["input_ids"]}
    assert forward_flops(model, inputs) == pytest.approx(rule_of_thumb_flops(model, tokens_per_sample(name)), rel=0.03)


def test_llama_1b_has_the_llama_3_2_1b_shape():
    config = meta_model("llama_1b").config
    assert (config.hidden_size, config.intermediate_size, config.num_hidden_layers) == (2048, 8192, 16)
    assert (config.num_attention_heads, config.num_key_value_heads, config.vocab_size) == (32, 8, 128256)
    assert config.rope_parameters["rope_theta"] == 500000.0 and config.tie_word_embeddings
    assert config.max_position_embeddings == 131072


@pytest.mark.parametrize("name", list(DECLARED))
def test_cuda_training_batches_fit_half_an_h100_by_the_documented_estimate(name):
    """12 B/parameter (weights, grads, SGD momentum) + per sample 2*L*T*d*(34 + 5*a*T/d) activation bytes
    (Korthikanti et al. 2022, doubled for fp32) + 3*T*V*4 logit bytes for LMs."""
    workload, model = workloads.get(name), meta_model(name)
    config, tokens = model.config, tokens_per_sample(name)
    layers, hidden, heads = config.num_hidden_layers, config.hidden_size, config.num_attention_heads
    per_sample = 2 * layers * tokens * hidden * (34 + 5 * heads * tokens / hidden)
    if workload.task == "causal-lm":
        per_sample += 3 * tokens * config.vocab_size * 4
    largest = max(workload.default_batches["cuda"]["train"])
    assert 12 * parameter_count(model) + largest * per_sample < H100_BYTES / 2


@pytest.mark.parametrize("name", ["bert_base", "roberta_base", "deit_small", "gpt2", "llama_small"])
def test_cpu_forward_gives_logits_of_the_task_shape(cpu_models, name):
    workload, model = workloads.get(name), cpu_models[name].eval()
    inputs, _ = workloads.make_batch(workload, 1, "cpu")
    with torch.no_grad():
        logits = workloads.forward(model, inputs)
    expected = (1, workload.seq_len, workload.vocab_size) if workload.task == "causal-lm" else (1, workload.num_classes)
    assert tuple(logits.shape) == expected and logits.dtype == torch.float32
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("name", ["bert_base", "llama_small"])
def test_cpu_train_step_gives_finite_gradients_everywhere(cpu_models, name):
    workload, model = workloads.get(name), cpu_models[name].train()
    inputs, labels = workloads.make_batch(workload, 1, "cpu")
    model.zero_grad(set_to_none=True)
    loss = workload.loss(workloads.forward(model, inputs), labels)
    loss.backward()
    assert torch.isfinite(loss)
    for parameter_name, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), parameter_name
    model.zero_grad(set_to_none=True)


def test_roberta_position_ids_stay_in_range_even_where_ids_hit_the_padding_id(cpu_models):
    workload, model = workloads.get("roberta_base"), cpu_models["roberta_base"].eval()
    inputs, _ = workloads.make_batch(workload, 2, "cpu")
    pad = model.config.pad_token_id
    inputs["input_ids"][0, 5] = pad  # what a random draw does once in 50265 tokens
    seen = []
    embedding = model.roberta.embeddings.position_embeddings
    handle = embedding.register_forward_hook(lambda module, args, output: seen.append(args[0]))
    try:
        with torch.no_grad():
            logits = workloads.forward(model, inputs)
    finally:
        handle.remove()
    (position_ids,) = seen
    assert int(position_ids.max()) == workload.seq_len + pad < model.config.max_position_embeddings
    assert int(position_ids[0, 5]) == pad and torch.isfinite(logits).all()


def test_bert_cpu_flop_count_matches_matmuls_plus_attention(cpu_models):
    """On the CPU the count covers the linear layers (torch has no FLOP formula for the CPU SDPA kernel), so
    it is compared with 2 * N_non-embedding * 128 + 4 * L * 128^2 * d within 25%."""
    model = cpu_models["bert_base"].eval()
    inputs, _ = workloads.make_batch(workloads.get("bert_base"), 1, "cpu")
    expected = rule_of_thumb_flops(model, 128)
    assert expected == pytest.approx(22.5e9, rel=0.01)
    assert forward_flops(model, inputs) == pytest.approx(expected, rel=0.25)


def test_fp32_tolerance_sits_far_above_cpu_rounding_and_bf16_below_its_bound(cpu_models):
    """The parity bounds flag bugs, not noise: fp32 vs float64 and bf16 autocast vs fp32 on llama_small."""
    workload, model = workloads.get("llama_small"), cpu_models["llama_small"].eval()
    inputs, _ = workloads.make_batch(workload, 1, "cpu")
    short = {key: value[:, :64] for key, value in inputs.items()}
    with torch.no_grad():
        reference = workloads.forward(model, short)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = workloads.forward(model, short).float()
        float64 = workloads.forward(model.double(), short)
    model.float()

    def relative_error(output: torch.Tensor, truth: torch.Tensor) -> float:
        return float((output.double() - truth.double()).norm() / truth.double().norm())

    assert relative_error(reference, float64) < PARITY_TOLERANCE["fp32"] / 100
    assert relative_error(bf16, reference) < PARITY_TOLERANCE["bf16"] / 3


def test_a_hub_download_inside_a_build_raises_a_runtime_error_naming_the_workload(tmp_path):
    transformers = transformer_workloads.import_transformers()
    build = transformer_workloads.offline_build(
        "bert_pretrained", lambda: transformers.AutoModel.from_pretrained("bert-base-uncased", cache_dir=tmp_path))
    with pytest.raises(RuntimeError,
                       match=r"workload 'bert_pretrained' tried to download .*hwregress never downloads") as caught:
        build()
    assert isinstance(caught.value.__cause__, OSError)


def test_importing_the_module_switches_the_hub_offline():
    environment = {key: value for key, value in os.environ.items()
                   if key not in transformer_workloads.OFFLINE_VARIABLES}
    script = ("import hwregress.workloads.transformers, os, huggingface_hub.constants as constants; "
              "print(os.environ['HF_HUB_OFFLINE'], os.environ['TRANSFORMERS_OFFLINE'], constants.HF_HUB_OFFLINE)")
    result = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["1", "1", "True"]


def test_offline_is_enforced_when_the_hub_library_was_imported_first():
    environment = {key: value for key, value in os.environ.items()
                   if key not in transformer_workloads.OFFLINE_VARIABLES}
    script = ("import huggingface_hub.constants as constants; before = constants.HF_HUB_OFFLINE; "
              "import hwregress.workloads.transformers; print(before, constants.HF_HUB_OFFLINE)")
    result = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True"]

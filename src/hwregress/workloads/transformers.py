"""Transformers architectures as workloads: built from configs written here, with random weights.

Every model is ``ModelClass(config)``: never ``from_pretrained``, never the Hub. Importing this module sets
``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` (unless the user set either: :func:`enforce_offline`) so
that an accidental download fails at once, and every build goes through :func:`offline_build`, which turns such a
failure into a ``RuntimeError`` naming the workload. Importing registers the workloads (:func:`register_all`);
transformers itself is imported only when a model is built.

============  ===================================  ====================  ==========  =============  ============
name          source                               input                 parameters  FLOPs/sample   FLOPs/sample
              transformers config                                                    rule of thumb  measured
============  ===================================  ====================  ==========  =============  ============
bert_base     BertConfig (bert-base-uncased)       128 tokens, V 30522   109.5 M     22.5 G         22.3 G
roberta_base  RobertaConfig (roberta-base)         128 tokens, V 50265   124.6 M     22.5 G         22.3 G
deit_small    DeiTConfig (deit-small-patch16-224)  image 3x224x224       22.1 M      9.3 G          9.2 G
gpt2          GPT2Config (gpt2, 124M)              512 tokens, V 50257   124.4 M     136 G          136 G
llama_1b      LlamaConfig (Llama 3.2 1B shape)     512 tokens, V 128256  1.236 B     1.30 T         1.30 T
llama_small   LlamaConfig (scaled-down Llama)      256 tokens, V 32000   40.5 M      21.8 G         21.8 G
============  ===================================  ====================  ==========  =============  ============

Parameters are counted on the meta device (tied embeddings counted once). FLOPs are 2 x multiply-adds of one
sample's forward pass. Rule of thumb (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", table 1):
``2 * N * T + 4 * L * T * T * d`` with ``N`` the parameters that multiply activations (all but the token,
position and token-type lookup tables; a tied LM head counts, it is a matmul), ``T`` tokens per sample (DeiT:
196 patches + class + distillation token = 198), ``L`` layers and ``d`` the hidden size; the second term is the
score and value matmuls over the full ``T x T`` square (a causal mask does not remove them from SDPA's
kernels). Measured: ``torch.utils.flop_counter.FlopCounterMode`` over a forward pass on the meta device, where
SDPA decomposes into counted matmuls (on the CPU, torch 2.13 has no FLOP formula for
``_scaled_dot_product_flash_attention_for_cpu``, so a CPU count misses the attention term: 2.7% of bert_base,
7.1% of gpt2).

Attention runs through ``attn_implementation="sdpa"`` (``torch.nn.functional.scaled_dot_product_attention``),
what serving stacks and training use; every config here supports it.

RoBERTa derives position ids from ``pad_token_id`` (``cumsum(ids != pad) + pad``), as the real model does.
Random ids drawn from ``[0, vocab)`` hit the padding id 1 with probability 1/50265 per token (0.25% of
128-token samples hold one); such a token gets position ``pad`` (a zero row at initialization) instead of its
own, which changes no shape and no FLOP, and the largest position id is ``seq_len + pad = 129`` < 514. The
config keeps the real ``pad_token_id=1``: no value in ``[0, vocab)`` avoids it, and one outside is no valid
embedding row.

Default batch sizes (TorchBench style: few, and per device kind). CPU: batch 1 for inference and the
prompt/decode modes and the smallest batch that trains (2 for encoders, 1 for LMs), so a case takes seconds
on 2 cores (llama_1b is in no CPU default selection: training it at batch 1 takes about 20 GB). CUDA:
inference at 1 (latency) and at throughput batches; training at a usual micro-batch of the model family
(BERT fine-tuning 32, DeiT 128, GPT-2 8, Llama 1B 4; Llama 1B serves one batch per mode: prefill 1, decode 16),
kept where its estimated fp32 footprint stays under
half of an 80 GB H100: 12 bytes per parameter (weights, gradients, SGD momentum: the suite's optimizer)
plus, per sample, activations of ``2 * L * T * d * (34 + 5 * a * T / d)`` bytes (Korthikanti et
al. 2022, "Reducing Activation Recomputation in Large Transformer Models", section 4.1, the 16-bit figure
doubled for fp32; ``a`` heads) and ``3 * T * V * 4`` bytes of LM logits, softmax and gradient. Estimates at
the CUDA training batch: bert_base 32 -> 5 GB, roberta_base 32 -> 5 GB, deit_small 128 -> 12 GB, gpt2 8 ->
10 GB, llama_1b 4 -> 28 GB, llama_small 32 -> 7 GB. MPS: between the two.

Parity tolerances (relative L2 error of the logits against the CPU fp32 reference; see
:mod:`hwregress.measure.parity`): the CNN bounds of ``parity.OUTPUT_TOLERANCE`` loosened where depth matters. fp32
2e-3 (twice the CNN bound: 12-16 residual blocks of LayerNorm/RMSNorm and softmax accumulate reduction-order
differences, and an LM's logits over 32k-128k classes amplify them), tf32 3e-2 (1.5x: 10 mantissa bits in
every matmul of a deeper stack), bf16 1e-1 and fp16 5e-2 (unchanged: autocast keeps softmax, norms and the
loss in fp32). The bounds are for bugs, not for noise: the CNN bound scaled by depth, checked against the errors
these random weights show on the CPU (docs/measured.md, 'Parity tolerances').
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from torch import nn

from hwregress.workloads import registry as workloads
from hwregress.workloads.registry import Workload, causal_lm_loss

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
ATTN_IMPLEMENTATION = "sdpa"
REQUIRES = ("transformers",)  # a workload built here is skipped, naming the llm extra, where transformers is missing
PARITY_TOLERANCE: Mapping[str, float] = {"fp32": 2e-3, "tf32": 3e-2, "bf16": 1e-1, "fp16": 5e-2}

ENCODER_BATCHES: Mapping[str, Mapping[str, tuple[int, ...]]] = {
    "cpu": {"infer": (1,), "train": (2,)},
    "cuda": {"infer": (1, 32, 128), "train": (32,)},
    "mps": {"infer": (1, 16), "train": (8,)},
}
VISION_BATCHES: Mapping[str, Mapping[str, tuple[int, ...]]] = {
    "cpu": {"infer": (1, 8), "train": (8,)},
    "cuda": {"infer": (1, 32, 256), "train": (32, 128)},
    "mps": {"infer": (1, 32), "train": (32,)},
}
GPT2_BATCHES: Mapping[str, Mapping[str, tuple[int, ...]]] = {
    "cpu": {"infer": (1,), "train": (1,), "prefill": (1,), "decode": (1,)},
    "cuda": {"infer": (1, 16), "train": (8,), "prefill": (1, 8), "decode": (1, 16)},
    "mps": {"infer": (1, 4), "train": (2,), "prefill": (1, 4), "decode": (1, 4)},
}
LLAMA_1B_BATCHES: Mapping[str, Mapping[str, tuple[int, ...]]] = {
    "cpu": {"infer": (1,), "train": (1,), "prefill": (1,), "decode": (1,)},
    # one batch per serving mode on CUDA (the GPU tier must end within 10 minutes; --batch-sizes asks for more): the
    # prompt pass of one request (its time to first token; 512 tokens already fill the GPU) and batched generation
    # (weight reads shared by 16 sequences; time per output token is recorded too, and gpt2 keeps decode at batch 1)
    "cuda": {"infer": (1, 8), "train": (4,), "prefill": (1,), "decode": (16,)},
    "mps": {"infer": (1,), "train": (1,), "prefill": (1,), "decode": (1, 4)},
}
CPU_CONTEXT = {"cpu": 128}  # tokens per sample of the causal LMs on 2 CPU cores (a 512-token gpt2 step takes ~4 s)
LLAMA_SMALL_BATCHES: Mapping[str, Mapping[str, tuple[int, ...]]] = {
    "cpu": {"infer": (1,), "train": (1,), "prefill": (1,), "decode": (1,)},
    "cuda": {"infer": (1, 32), "train": (32,), "prefill": (1, 32), "decode": (1, 32)},
    "mps": {"infer": (1, 8), "train": (8,), "prefill": (1, 8), "decode": (1, 8)},
}

# Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json): hidden 2048, 16 layers, 32 query and 8 KV heads of 64,
# SwiGLU 8192, RMSNorm eps 1e-5, RoPE theta 500000 with the "llama3" frequency scaling, tied embeddings.
LLAMA_3_2_1B_SHAPE: Mapping[str, Any] = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
}
# The same architecture at 40.5 M parameters (16.4 M of them the tied embedding), for 2 CPU cores.
LLAMA_SMALL_SHAPE: Mapping[str, Any] = {
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
}


def enforce_offline() -> None:
    """Set ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` unless the user set either, so a Hub access
    raises instead of downloading.

    huggingface_hub reads the variables once, when ``huggingface_hub.constants`` is imported; if that
    happened before this call (another import of transformers) and the user chose nothing, its flag is set
    too. Called on import of this module, before transformers is imported by any build.
    """
    user_chose = any(variable in os.environ for variable in OFFLINE_VARIABLES)
    for variable in OFFLINE_VARIABLES:
        os.environ.setdefault(variable, "1")
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None and not user_chose:
        constants.HF_HUB_OFFLINE = True


def import_transformers() -> ModuleType:
    """The ``transformers`` module, imported after :func:`hwregress.workloads.import_torchvision` (transformers
    imports torchvision, whose wheel here needs that shim first).

    Raises:
        ImportError: transformers is not installed; the message says how to install it.
    """
    workloads.import_torchvision()
    try:
        import transformers
    except ImportError as error:
        raise ImportError("the transformers workloads need the transformers package: pip "
                          "install 'hwregress[llm]'") from error
    return transformers


def _hub_errors() -> tuple[type[BaseException], ...]:
    """Exceptions a Hub access raises: ``OSError`` (transformers' own message, offline mode, HTTP errors,
    missing cache entries) and the few huggingface_hub errors that are not ``OSError`` subclasses."""
    try:
        from huggingface_hub.errors import EntryNotFoundError, HFValidationError
    except ImportError:
        return (OSError,)
    return (OSError, EntryNotFoundError, HFValidationError)


def offline_build(name: str, make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """Wrap the factory ``make`` of workload ``name`` so that a Hub access surfaces as one clear error.

    A build from a config does no file or network I/O, so any ``OSError`` (or huggingface_hub error)
    raised inside ``make`` is an attempted download or cache lookup.

    Returns:
        a factory returning ``make()``'s module.

    Raises (from the returned factory):
        RuntimeError: ``make`` tried to reach the Hub; the message names the workload and the first line of
            the original error, which is chained as ``__cause__``.
    """

    def build() -> nn.Module:
        try:
            return make()
        except _hub_errors() as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise RuntimeError(
                f"workload {name!r} tried to download from the Hugging Face Hub ({type(error).__name__}: {first_line}) "
                "(hwregress never downloads: build from a config with random weights)"
            ) from error

    build.__name__ = f"build_{name}"
    build.__qualname__ = build.__name__
    return build


def build_bert_base() -> nn.Module:
    """BERT-base (``BertConfig()`` defaults: 12 layers, hidden 768, 12 heads, vocab 30522) with a 2-class head;
    ``input_ids [N, S] -> logits [N, 2]``."""
    transformers = import_transformers()
    config = transformers.BertConfig(num_labels=2, attn_implementation=ATTN_IMPLEMENTATION)
    return transformers.BertForSequenceClassification(config)


def build_roberta_base() -> nn.Module:
    """RoBERTa-base (BERT-base layers, vocab 50265, 514 positions, one token type, pad id 1) with a 2-class
    head; ``input_ids [N, S] -> logits [N, 2]``, ``S <= 512``."""
    transformers = import_transformers()
    config = transformers.RobertaConfig(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                                        pad_token_id=1,
                                        num_labels=2, attn_implementation=ATTN_IMPLEMENTATION)
    return transformers.RobertaForSequenceClassification(config)


def build_deit_small() -> nn.Module:
    """DeiT-small/16 at 224 px (12 layers, hidden 384, 6 heads, MLP 1536) with a 1000-class head;
    ``pixel_values [N, 3, 224, 224] -> logits [N, 1000]``."""
    transformers = import_transformers()
    config = transformers.DeiTConfig(hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                                     intermediate_size=1536,
                                     image_size=224, patch_size=16, num_labels=1000,
                                     attn_implementation=ATTN_IMPLEMENTATION)
    return transformers.DeiTForImageClassification(config)


def build_gpt2() -> nn.Module:
    """GPT-2 small (``GPT2Config()`` defaults: 12 layers, hidden 768, 1024 positions, vocab 50257, tied head);
    ``input_ids [N, S] -> logits [N, S, 50257]``, ``S <= 1024``."""
    transformers = import_transformers()
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(attn_implementation=ATTN_IMPLEMENTATION))


def build_llama(shape: Mapping[str, Any]) -> nn.Module:
    """A ``LlamaForCausalLM`` of ``shape`` (LlamaConfig keyword arguments);
    ``input_ids [N, S] -> logits [N, S, vocab_size]``."""
    transformers = import_transformers()
    config = transformers.LlamaConfig(**copy.deepcopy(dict(shape)), attn_implementation=ATTN_IMPLEMENTATION)
    return transformers.LlamaForCausalLM(config)


def build_llama_1b() -> nn.Module:
    """Llama 3.2 1B's architecture (:data:`LLAMA_3_2_1B_SHAPE`, 1.236 B parameters) with random weights."""
    return build_llama(LLAMA_3_2_1B_SHAPE)


def build_llama_small() -> nn.Module:
    """The Llama architecture at 40.5 M parameters (:data:`LLAMA_SMALL_SHAPE`) with random weights."""
    return build_llama(LLAMA_SMALL_SHAPE)


def _encoder(name: str, make: Callable[[], nn.Module], vocab_size: int, source: str) -> Workload:
    return Workload(name, offline_build(name, make), num_classes=2, input_kind="tokens", seq_len=128,
                    vocab_size=vocab_size,
                    source=source, default_batches=ENCODER_BATCHES, parity_tolerance=PARITY_TOLERANCE,
                    requires=REQUIRES)


def _causal_lm(name: str, make: Callable[[], nn.Module], seq_len: int, vocab_size: int, source: str,
               batches: Mapping[str, Mapping[str, tuple[int, ...]]]) -> Workload:
    return Workload(name, offline_build(name, make), num_classes=vocab_size, loss=causal_lm_loss, input_kind="tokens",
                    seq_len=seq_len, vocab_size=vocab_size, task="causal-lm", source=source, default_batches=batches,
                    parity_tolerance=PARITY_TOLERANCE, default_contexts=CPU_CONTEXT, requires=REQUIRES)


_WORKLOADS: tuple[Workload, ...] = (
    _encoder("bert_base", build_bert_base, 30522, "transformers BertConfig (bert-base-uncased shape)"),
    _encoder("roberta_base", build_roberta_base, 50265, "transformers RobertaConfig (roberta-base shape)"),
    Workload("deit_small", offline_build("deit_small", build_deit_small), input_shape=(3, 224, 224), num_classes=1000,
             source="transformers DeiTConfig (deit-small-patch16-224 shape)", default_batches=VISION_BATCHES,
             parity_tolerance=PARITY_TOLERANCE, requires=REQUIRES),
    _causal_lm("gpt2", build_gpt2, 512, 50257, "transformers GPT2Config (gpt2 124M shape)", GPT2_BATCHES),
    _causal_lm("llama_1b", build_llama_1b, 512, 128256, "transformers LlamaConfig (Llama 3.2 1B shape)",
               LLAMA_1B_BATCHES),
    _causal_lm("llama_small", build_llama_small, 256, 32000, "transformers LlamaConfig (scaled-down Llama, 40.5M)",
               LLAMA_SMALL_BATCHES),
)
TRANSFORMER_WORKLOADS: tuple[str, ...] = tuple(workload.name for workload in _WORKLOADS)


def register_all(replace: bool = False) -> list[str]:
    """Register the transformers workloads (:data:`TRANSFORMER_WORKLOADS`) in :mod:`hwregress.workloads`.

    A name already holding this module's own workload is left as it is, so calling this again is harmless.

    Returns:
        the names registered by this call.

    Raises:
        ValueError: a name is taken by another workload and ``replace`` is False.
    """
    pending = [workload for workload in _WORKLOADS
               if workload.name not in workloads.names() or workloads.get(workload.name) is not workload]
    taken = [workload.name for workload in pending if workload.name in workloads.names()]
    if taken and not replace:  # checked before registering any, so a conflict leaves the registry unchanged
        raise ValueError(f"workloads {', '.join(map(repr, taken))} are already registered; pass "
                         "replace=True to override them")
    for workload in pending:
        workloads.register(workload, replace=replace)
    return [workload.name for workload in pending]


enforce_offline()
register_all()

"""What a causal LM's forward takes and returns across transformers releases: the keyword that limits the logits
to the last position, the keyword and output field of the KV cache, and the dtype of a cache's keys. Each is read
from the model's signature or the object's fields, so one decode loop serves transformers 4.45 to 5.x."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping

import torch

# the forward argument that limits the logits to the last positions: logits_to_keep from transformers 4.49 (Llama,
# Qwen2, ...), num_logits_to_keep in 4.45-4.48 (huggingface/trl issue #2770: Qwen2's forward on 4.48); GPT-2 gained
# logits_to_keep in 4.53.0 (GPT2LMHeadModel.forward in the 4.53.0 wheel's modeling_gpt2.py has it, 4.52.4's has not;
# huggingface/transformers issue #38977), and PR #41335 spread the pattern to more older models
LOGITS_TO_KEEP_NAMES = ("logits_to_keep", "num_logits_to_keep")
# the forward argument and output field of the KV cache: cache in transformers 5.x (past_key_values deprecated there,
# "will be removed in version 5.40.0", transformers.utils.deprecation.deprecate_kwarg on each forward; the output's
# past_key_values a property that logs the deprecation), past_key_values before
CACHE_NAMES = ("cache", "past_key_values")
GPT2_LOGITS_TO_KEEP_SINCE = "4.53.0"


def logits_to_keep_argument(model: torch.nn.Module) -> dict[str, int]:
    """The keyword that makes ``model``'s forward compute the logits of the last position only: ``{"logits_to_keep":
    1}`` (``LlamaForCausalLM`` from transformers 4.49, ``GPT2LMHeadModel`` from 4.53, every causal LM of 5.x),
    ``{"num_logits_to_keep": 1}`` (transformers 4.45-4.48), or ``{}`` when the forward names neither (an older
    transformers' GPT-2, a model of your own;
    a forward taking only ``**kwargs`` counts as naming neither, since it may pass an unknown keyword on to code
    that rejects it). Without it the model computes logits [B, S, vocab] and the last position is taken, the same
    tokens at the cost of the LM head over every prompt position."""
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # a forward inspect cannot read (a C extension): pass nothing it may not take
        return {}
    for name in LOGITS_TO_KEEP_NAMES:
        if name in parameters and parameters[name].kind is not inspect.Parameter.VAR_KEYWORD:
            return {name: 1}
    return {}


def cache_argument(model: torch.nn.Module) -> str:
    """The keyword ``model``'s forward takes its KV cache under: ``"cache"`` where its signature names it (transformers
    5.x), else ``"past_key_values"`` (earlier releases, and a forward that names neither, such as ``**kwargs`` only).
    Read once per model class."""
    return _cache_argument_of(type(model))


@functools.cache
def _cache_argument_of(model_class: type) -> str:
    try:
        parameters = inspect.signature(model_class.forward).parameters
    except (TypeError, ValueError):  # a forward inspect cannot read: the older, documented name
        return CACHE_NAMES[1]
    named = parameters.get(CACHE_NAMES[0])
    return CACHE_NAMES[0] if named is not None and named.kind is not inspect.Parameter.VAR_KEYWORD else CACHE_NAMES[1]


def output_cache(outputs: object) -> object:
    """The KV cache a forward returned: its ``cache`` field (transformers 5.x; read by name so that the deprecated
    ``past_key_values`` property, which logs a warning, is not touched), else its ``past_key_values``; None without
    one."""
    if isinstance(outputs, Mapping):
        for name in CACHE_NAMES:
            if name in outputs:
                return outputs[name]
    cache = getattr(outputs, CACHE_NAMES[0], None)
    return cache if cache is not None else getattr(outputs, CACHE_NAMES[1], None)


def cache_key_dtype(cache: object) -> torch.dtype | None:
    """The dtype of the first layer's keys in a KV cache, None when there is none or it has no layer:
    ``Cache.layers[0].keys`` (transformers >= 4.56), ``Cache.key_cache[0]`` (4.36-4.55), or the legacy tuple of
    ``(key [B, heads, S, head_dim], value)`` per layer."""
    if cache is None:
        return None
    layers = getattr(cache, "layers", None)
    if layers:
        keys = getattr(layers[0], "keys", None)
        return keys.dtype if isinstance(keys, torch.Tensor) else None
    key_cache = getattr(cache, "key_cache", None)
    if key_cache:
        return key_cache[0].dtype
    if isinstance(cache, (tuple, list)) and cache and isinstance(cache[0], (tuple, list)) and cache[0]:
        return cache[0][0].dtype if isinstance(cache[0][0], torch.Tensor) else None
    return None

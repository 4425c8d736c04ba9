"""A causal LM written to a folder that an OpenAI-compatible server loads (``transformers serve FOLDER``, ``vllm serve
FOLDER``): the architecture of a registered workload with random weights drawn from a seed, and a tokenizer written
here, so nothing is downloaded.

The tokenizer is a word-level one (Hugging Face ``tokenizers``' ``WordLevel`` model split on whitespace): token id
``i`` of the words is the word ``t<i>``, ids 0, 1 and 2 are ``<unk>``, ``<s>`` and ``</s>``. A prompt of ``n`` ids
is ``n`` words, so it is exactly ``n`` tokens to the server (:meth:`ServedModel.prompt_text`), and its length is what
the trace asked. The generation config has no end-of-sequence token: every request generates the ``max_tokens`` it
asks, as ``vllm bench serve --ignore-eos`` makes a real model do, so output lengths are the trace's too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hwregress.workloads.transformers import LLAMA_SMALL_SHAPE, import_transformers

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
FIRST_WORD_ID = len(SPECIAL_TOKENS)
WORD_PREFIX = "t"
# the models a server can load, by workload name: their LlamaConfig keyword arguments (register_served adds more)
SERVED_SHAPES: dict[str, Mapping[str, Any]] = {"llama_small": LLAMA_SMALL_SHAPE}


def register_served(name: str, shape: Mapping[str, Any]) -> None:
    """Let the serving family serve workload ``name`` (registered in :mod:`hwregress.workloads`, with the Llama
    architecture) as a Llama of ``shape`` (LlamaConfig keyword arguments, ``vocab_size`` among them).

    Raises:
        ValueError: ``shape`` gives no ``vocab_size`` above the tokenizer's special tokens.
    """
    if int(shape.get("vocab_size", 0)) <= FIRST_WORD_ID:
        raise ValueError(f"served model {name!r}: its shape needs a vocab_size above {FIRST_WORD_ID}")
    SERVED_SHAPES[name] = dict(shape)


@dataclass(frozen=True)
class ServedModel:
    """A model folder a server loads.

    Attributes:
        name: the workload whose architecture it is.
        folder: the folder (config, weights, tokenizer, generation config).
        vocab_size: token ids run from 0 to ``vocab_size - 1``; prompts use ``FIRST_WORD_ID`` and up.
        seed: the seed its weights were drawn from; None for published weights.
        words: a published model's prompt words (:mod:`hwregress.workloads.pretrained_served`): prompt id ``i`` is
            ``words[i - FIRST_WORD_ID]``, each one token with its leading space; None for the word-level tokenizer
            written here (id ``i`` is the word ``t<i>``).
        source: where published weights came from (``repository@revision``); None for seeded ones.
    """

    name: str
    folder: Path
    vocab_size: int
    seed: int | None
    words: tuple[str, ...] | None = None
    source: str | None = None

    def prompt_text(self, token_ids: Sequence[int]) -> str:
        """The text that the model's tokenizer reads as exactly ``token_ids`` (each in ``[FIRST_WORD_ID,
        vocab_size)``).

        Raises:
            ValueError: an id outside that range; names it.
        """
        bad = next((i for i in token_ids if not FIRST_WORD_ID <= i < self.vocab_size), None)
        if bad is not None:
            raise ValueError(f"token id {bad} is not a word of {self.name}'s tokenizer ({FIRST_WORD_ID} to "
                             f"{self.vocab_size - 1})")
        if self.words is not None:
            return "".join(self.words[i - FIRST_WORD_ID] for i in token_ids)
        return " ".join(f"{WORD_PREFIX}{i}" for i in token_ids)


def write_served_model(name: str, folder: Path, seed: int, shape: Mapping[str, Any] | None = None) -> ServedModel:
    """Write workload ``name``'s architecture with weights drawn from ``seed``, its tokenizer and a generation config
    without an end token to ``folder`` (created; files in it replaced).

    Args:
        shape: LlamaConfig keyword arguments instead of :data:`SERVED_SHAPES` ``[name]`` (a smaller model of the
            same architecture, as the self-tests use).

    Raises:
        KeyError: ``name`` is not a served model and no ``shape`` is given; the message lists those that are.
        ImportError: transformers is missing (the message names the extra).
    """
    if shape is None and name not in SERVED_SHAPES:
        raise KeyError(f"{name!r} is not a model the serving tests can write: choose from {sorted(SERVED_SHAPES)}")
    transformers = import_transformers()
    shape = copy.deepcopy(dict(SERVED_SHAPES[name] if shape is None else shape))
    folder.mkdir(parents=True, exist_ok=True)
    _tokenizer(transformers, shape["vocab_size"]).save_pretrained(folder)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            **shape, bos_token_id=1, eos_token_id=None, pad_token_id=0))
    model.generation_config = transformers.GenerationConfig(bos_token_id=1, eos_token_id=None, pad_token_id=0,
                                                            do_sample=False)
    model.save_pretrained(folder)
    return ServedModel(name, folder, shape["vocab_size"], seed)


def _tokenizer(transformers: Any, vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocabulary = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    vocabulary.update((f"{WORD_PREFIX}{i}", i) for i in range(FIRST_WORD_ID, vocab_size))
    words = Tokenizer(models.WordLevel(vocabulary, unk_token=SPECIAL_TOKENS[0]))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    words.decoder = decoders.WordPiece()  # joins the words with spaces
    return transformers.PreTrainedTokenizerFast(tokenizer_object=words, unk_token=SPECIAL_TOKENS[0],
                                                bos_token=SPECIAL_TOKENS[1], eos_token=SPECIAL_TOKENS[2])

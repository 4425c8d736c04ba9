"""A Hugging Face cache holding a stand-in for ``openai-community/gpt2``, written here (nothing is downloaded): the
GPT-2 architecture at a tiny size with random weights, and a byte-level BPE tokenizer (GPT-2's kind, trained here on
seeded words) saved as ``GPT2TokenizerFast`` saves it, in the cache's own layout (``models--openai-community--gpt2/
refs/main`` naming a ``snapshots/<revision>`` folder), as ``huggingface-cli download`` leaves it."""

from __future__ import annotations

import random
from pathlib import Path

REPO = "openai-community/gpt2"
REVISION = "0123456789abcdef0123456789abcdef01234567"
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "po", "qu", "di")


def write_gpt2_cache(cache: Path, seed: int = 0) -> Path:
    """Write the stand-in into the cache folder ``cache`` (``HF_HUB_CACHE``); returns its snapshot folder."""
    import torch
    from tokenizers import ByteLevelBPETokenizer

    from hwregress.workloads.transformers import import_transformers

    transformers = import_transformers()  # the torchvision shim first, as every transformers import here

    root = cache / f"models--{REPO.replace('/', '--')}"
    snapshot = root / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(REVISION)
    draw = random.Random(seed)
    words = sorted({"".join(draw.choice(SYLLABLES) for _ in range(draw.randint(1, 3))) for _ in range(400)})
    corpus = [" ".join(draw.choice(words) for _ in range(12)) for _ in range(2000)]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=1200, min_frequency=2, special_tokens=["<|endoftext|>"])
    tokenizer = transformers.GPT2TokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>",
                                               bos_token="<|endoftext|>", unk_token="<|endoftext|>")
    tokenizer.save_pretrained(snapshot)
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=len(tokenizer), n_embd=64, n_layer=2, n_head=2, n_positions=512, bos_token_id=end,
            eos_token_id=end))
    model.generation_config = transformers.GenerationConfig(bos_token_id=end, eos_token_id=end)
    model.save_pretrained(snapshot)
    return snapshot

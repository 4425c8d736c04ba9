"""Published weights a server loads where this machine's Hugging Face cache already holds them: GPT-2 (124 M,
``openai-community/gpt2``). Nothing is downloaded (``snapshot_download(..., local_files_only=True)``); where the cache
lacks the weights the serving test is ``unsupported`` with the command that fetches them on a machine with a network.

The cached snapshot is not changed: the served folder holds links to its weights, copies of its config and tokenizer
files, and a generation config with no end-of-sequence token and greedy decoding, so that every request generates
the ``max_tokens`` its trace asked (as ``vllm bench serve --ignore-eos`` makes a real model do).

Prompts must be exactly the trace's token counts: a prompt's token ids map onto the tokenizer's whole-word tokens
(byte-level BPE tokens of a leading space and 2 or more lower-case letters, ``Ġthe``), each kept only where its text
encodes back to that one token, and the joined text of a sample of them is checked to encode back to the same ids.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hwregress.workloads.served import FIRST_WORD_ID, ServedModel
from hwregress.workloads.transformers import import_transformers

# served name -> the Hub repository ids its cache may hold it under (the current one first)
PRETRAINED_SERVED: dict[str, tuple[str, ...]] = {"gpt2": ("openai-community/gpt2", "gpt2")}
WEIGHT_FILES = ("*.safetensors", "*.bin")
COPIED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                "special_tokens_map.json")
WHOLE_WORD = re.compile(r"Ġ[a-z]{2,}")  # a byte-level BPE token of a space and a word
MAX_WORDS = 4096
ROUND_TRIP_SAMPLE = 256  # the joined words checked to encode back to their ids, at once


class PretrainedMissing(LookupError):
    """A published model's weights are not in this machine's Hugging Face cache; the message says how to get them."""


def is_cached(name: str, cache_dir: Path | None = None) -> bool:
    """Whether this machine's Hugging Face cache (or ``cache_dir``) holds the published model ``name`` (False where
    huggingface_hub, of the serving extra, is missing)."""
    try:
        cached_snapshot(name, cache_dir)
    except (PretrainedMissing, ImportError):
        return False
    return True


def cached_snapshot(name: str, cache_dir: Path | None = None) -> tuple[Path, str]:
    """The cached snapshot folder of the published model ``name`` (:data:`PRETRAINED_SERVED`) and the repository id
    it was found under, in ``cache_dir`` (None: :func:`hub_cache`).

    Raises:
        KeyError: ``name`` is not a published model the serving tests load.
        PretrainedMissing: no repository id of it is in the cache (``HF_HUB_CACHE``, ``HF_HOME``); names the command
            that downloads it.
    """
    from huggingface_hub import snapshot_download

    repos = PRETRAINED_SERVED[name]
    cache_dir = cache_dir or hub_cache()
    for repo in repos:
        try:
            return Path(snapshot_download(repo, local_files_only=True, cache_dir=cache_dir)), repo
        except Exception:
            continue
    raise PretrainedMissing(
        f"{name}'s weights are not in this machine's Hugging Face cache (looked for {', '.join(repos)}; hwregress "
        f"downloads nothing): run `huggingface-cli download {repos[0]}` on a machine with a network, then copy its "
        "cache (~/.cache/huggingface, or $HF_HUB_CACHE) here")


def hub_cache() -> Path:
    """The Hugging Face cache folder as the environment names it now: ``$HF_HUB_CACHE``, else
    ``$HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub`` (default ``~/.cache/huggingface/hub``), huggingface_hub's own
    order. Read at each call: huggingface_hub reads it once, when first imported, and a session's conftest or plugin
    may set it later."""
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    chosen = (os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
              or os.path.join(home, "hub"))
    return Path(chosen).expanduser()


def write_pretrained_served(name: str, folder: Path, cache_dir: Path | None = None) -> ServedModel:
    """Write the served folder of the cached published model ``name`` (module doc; ``cache_dir`` as
    :func:`cached_snapshot`'s) to ``folder`` (created; files in it replaced) and return it, its prompt words chosen
    from its tokenizer.

    Raises:
        KeyError, PretrainedMissing: as :func:`cached_snapshot`.
        ValueError: its tokenizer has too few whole-word tokens that encode back to themselves (fewer than 64), or
            their joined text does not encode back to their ids.
    """
    snapshot, repo = cached_snapshot(name, cache_dir)
    transformers = import_transformers()
    folder.mkdir(parents=True, exist_ok=True)
    for pattern in WEIGHT_FILES:
        for weights in snapshot.glob(pattern):
            link = folder / weights.name
            link.unlink(missing_ok=True)
            link.symlink_to(weights.resolve())
    for file in COPIED_FILES:
        if (snapshot / file).is_file():
            shutil.copyfile(snapshot / file, folder / file)
    config = transformers.AutoConfig.from_pretrained(folder)
    transformers.GenerationConfig(bos_token_id=getattr(config, "bos_token_id", None), eos_token_id=None,
                                  pad_token_id=getattr(config, "pad_token_id", None),
                                  do_sample=False).save_pretrained(folder)
    words = prompt_words(transformers.AutoTokenizer.from_pretrained(folder), f"{name} ({repo})")
    revision = snapshot.name
    return ServedModel(name, folder, FIRST_WORD_ID + len(words), seed=None, words=words,
                       source=f"{repo}@{revision}")


def prompt_words(tokenizer: Any, where: str) -> tuple[str, ...]:
    """Up to :data:`MAX_WORDS` texts (``" the"``) of ``tokenizer``'s whole-word tokens, by rising id, each encoding
    back to its one token; their joined text checked to encode back to their ids.

    Raises:
        ValueError: fewer than 64 such words, or a joined sample that does not encode back (names ``where``).
    """
    vocabulary = tokenizer.get_vocab()
    ids = sorted(i for token, i in vocabulary.items() if WHOLE_WORD.fullmatch(token))
    words: list[str] = []
    for token_id in ids:
        text = tokenizer.decode([token_id])
        if tokenizer.encode(text, add_special_tokens=False) == [token_id]:
            words.append(text)
        if len(words) == MAX_WORDS:
            break
    if len(words) < 64:
        raise ValueError(f"{where}: its tokenizer has {len(words)} whole-word tokens that encode back to themselves; "
                         "a prompt of exact length needs at least 64")
    _check_round_trip(tokenizer, words, where)
    return tuple(words)


def _check_round_trip(tokenizer: Any, words: Sequence[str], where: str) -> None:
    sample = list(words[:ROUND_TRIP_SAMPLE])
    expected = [tokenizer.encode(word, add_special_tokens=False)[0] for word in sample]
    if tokenizer.encode("".join(sample), add_special_tokens=False) != expected:
        raise ValueError(f"{where}: {len(sample)} of its whole words joined do not encode back to their "
                         f"{len(sample)} tokens; its prompts could not be of exact length")

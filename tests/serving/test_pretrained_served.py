"""GPT-2 served from this machine's Hugging Face cache where its weights are there (hwregress.workloads.
pretrained_served), against a cache written here in the Hub's own layout (support/gpt2_cache: GPT-2's architecture and
kind of tokenizer, tiny, random): found or named missing with the command that fetches it, the served folder linking
the cached weights without touching them, no end token, and prompts of exactly the trace's token counts."""

from __future__ import annotations

import random

import pytest
from support.gpt2_cache import REPO, REVISION, write_gpt2_cache

from hwregress.plugin.families.serving import FAMILY
from hwregress.plugin.matrix import Selection
from hwregress.serving.server import unavailable_reason
from hwregress.workloads.pretrained_served import PretrainedMissing, cached_snapshot, is_cached, write_pretrained_served
from hwregress.workloads.served import FIRST_WORD_ID
from hwregress.workloads.transformers import import_transformers

pytestmark = [pytest.mark.needs_extra,
              pytest.mark.skipif(unavailable_reason("transformers") is not None,
                                 reason="needs the serving extra (huggingface_hub, tokenizers)")]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hub")
    write_gpt2_cache(cache)
    return cache


def test_the_cached_snapshot_is_found_under_its_repository_and_a_missing_one_names_the_download(hub, tmp_path):
    snapshot, repo = cached_snapshot("gpt2", hub)
    assert repo == REPO and snapshot.name == REVISION and (snapshot / "config.json").is_file()
    assert is_cached("gpt2", hub) and not is_cached("gpt2", tmp_path)
    with pytest.raises(PretrainedMissing, match=r"huggingface-cli download openai-community/gpt2"):
        cached_snapshot("gpt2", tmp_path)
    with pytest.raises(KeyError):
        cached_snapshot("llama_small", hub)


def test_the_served_folder_links_the_cached_weights_untouched_and_generates_to_max_tokens(hub, tmp_path):
    snapshot, _ = cached_snapshot("gpt2", hub)
    before = {path.name: path.read_bytes() for path in snapshot.iterdir()}
    model = write_pretrained_served("gpt2", tmp_path / "served", hub)
    weights = model.folder / "model.safetensors"
    assert weights.is_symlink() and weights.resolve() == (snapshot / "model.safetensors").resolve()
    assert {path.name: path.read_bytes() for path in snapshot.iterdir()} == before
    generation = (model.folder / "generation_config.json").read_text()
    assert "eos_token_id" not in generation and '"do_sample": false' in generation
    assert model.seed is None and model.source == f"{REPO}@{REVISION}"


def test_a_prompt_of_any_ids_is_exactly_that_many_tokens_to_the_models_tokenizer(hub, tmp_path):
    transformers = import_transformers()
    model = write_pretrained_served("gpt2", tmp_path / "served", hub)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model.folder)
    assert model.vocab_size == FIRST_WORD_ID + len(model.words) and len(model.words) >= 64
    draw = random.Random(0)
    for length in (1, 2, 17, 256):
        ids = [draw.randrange(FIRST_WORD_ID, model.vocab_size) for _ in range(length)]
        assert len(tokenizer.encode(model.prompt_text(ids), add_special_tokens=False)) == length
    with pytest.raises(ValueError, match="not a word"):
        model.prompt_text([model.vocab_size])


def test_gpt2_is_a_served_model_when_named_and_other_workloads_are_not():
    named = Selection(devices=["cpu"], models=["gpt2", "resnet18"], opted_in=frozenset({"serving"}))
    assert {case["workload"] for case in FAMILY.cases(named)} == {"gpt2"}

"""GenerationConfig: generate's options as one frozen, checked-once object; the keyword API builds it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from glassformer import TransformerLM
from glassformer.generation import GenerationConfig, generate


def tiny() -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(vocab_size=40, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=32).eval()


def test_a_config_is_checked_when_made_and_frozen():
    config = GenerationConfig(max_new_tokens=5, eos_token_id=3, stop_strings=["\n"])
    assert config.eos_token_id == (3,) and config.stop_strings == ("\n",)  # normalised once
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_new_tokens = 6
    with pytest.raises(ValueError, match="top_p"):
        GenerationConfig(do_sample=True, top_p=1.5)
    with pytest.raises(ValueError, match="top_p"):
        GenerationConfig(top_p=float("nan"))  # unused by greedy decoding, still an error
    with pytest.raises(ValueError, match="num_return_sequences=2 needs do_sample=True"):
        GenerationConfig(num_return_sequences=2)
    with pytest.raises(TypeError, match="do_sample must be True or False"):
        GenerationConfig(do_sample="yes")
    with pytest.raises(ValueError, match="stop_strings"):
        GenerationConfig(stop_strings="\n")
    with pytest.raises(ValueError, match="length_penalty"):
        config.replace(length_penalty=1e9)  # a changed copy is checked too


def test_keywords_and_a_config_give_the_same_tokens():
    model, ids = tiny(), [[1, 2, 3], [4, 5]]
    options = dict(do_sample=True, top_k=5, temperature=0.7, seed=11, num_return_sequences=2)
    by_keywords = generate(model, ids, 6, **options)
    config = GenerationConfig(max_new_tokens=6, **options)
    assert torch.equal(by_keywords, generate(model, ids, config=config))
    shorter = generate(model, ids, 3, config=config)  # a keyword changes a copy of the config
    assert shorter.shape[1] == 3 + 3 and config.max_new_tokens == 6


def test_unknown_options_and_ids_outside_the_vocabulary_are_named():
    model = tiny()
    with pytest.raises(TypeError, match="unknown generation option.*max_length.*known: max_new_tokens"):
        generate(model, [1, 2], 3, max_length=9)
    with pytest.raises(ValueError, match="eos_token_id"):
        generate(model, [1, 2], 3, eos_token_id=40)  # checked against this model's vocabulary
    with pytest.raises(TypeError, match="config must be a GenerationConfig"):
        generate(model, [1, 2], config={"max_new_tokens": 3})

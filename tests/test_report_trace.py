"""The report's generation trace: with a target it answers the prefix (or source) for the target's length,
and a trace that picks one token at every step, as random weights do, is explained on the page."""

from __future__ import annotations

import torch

from glassformer import ModelConfig, TransformerLM
from glassformer.models import build_model
from glassformer.tokenizers.byte import ByteTokenizer
from glassformer.tokenizers.char import CharTokenizer
from glassformer.viz.report import gather, render_html


def test_a_prefix_lm_trace_stops_at_the_targets_length():
    tokenizer = CharTokenizer(list("abcdefgh=."))
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                      attn="prefix", pos="learned", max_len=32))
    data = gather(model, tokenizer, "abcdefgh=", "hgfedcba.", generate=16)
    assert len(data.generation["steps"]) == 9  # the target's length, not 16 steps past it
    assert any("answers the prefix alone" in note for note in data.notes)
    without = gather(model, tokenizer, "abcdefgh=", generate=5)
    assert len(without.generation["steps"]) == 5


def test_random_weights_are_named_in_the_notes_and_the_continuation_shows_specials():
    tokenizer = ByteTokenizer(specials=["pad", "bos", "eos"])
    model = build_model(ModelConfig.preset("lesson2-encdec", vocab_size=tokenizer.vocab_size, head_bias=True))
    with torch.no_grad():  # an untrained model that always picks <bos>
        model.head.bias[tokenizer.special_tokens["bos"]] = 1e4
    data = gather(model, tokenizer, "ein Hund", "a dog", generate=16)
    assert len(data.generation["steps"]) == len(tokenizer.encode("a dog")) + 1  # the target and its eos
    assert data.generation["continuation"].startswith("<bos><bos>")
    assert any("random weights" in note for note in data.notes)
    assert "random weights" in render_html(data)

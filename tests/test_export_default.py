"""The default causal LM of `glassformer train` (docs/training.md: no preset) converts to Hugging Face as
GPT-2, character tokenizer included, and `transformers` computes the same logits from it."""

from __future__ import annotations

import pytest
import torch

import glassformer
from glassformer.cli import main

transformers = pytest.importorskip("transformers")

CORPUS = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 8


def test_the_default_causal_lm_loads_in_transformers_with_equal_logits(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    run, hf = tmp_path / "run", tmp_path / "hf"
    assert main(["train", "--data", str(corpus), "--out_dir", str(run), "--max_steps", "3", "--eval_every", "0",
                 "--progress", "false", "--block_size", "32", "--model.d_model", "16", "--model.n_heads", "2",
                 "--model.d_ff", "32"]) == 0
    assert main(["convert", str(run / "best"), str(hf)]) == 0
    ours, tokenizer = glassformer.load(run / "best")
    assert (ours.config.pos, ours.config.scale_embeddings, ours.config.init_std) == ("learned", False, 0.02)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(hf).eval()
    assert type(theirs).__name__ == "GPT2LMHeadModel"
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(hf)
    text = "All:\nSpeak, hear me."
    ids = tokenizer.encode(text)
    assert hf_tokenizer(text)["input_ids"] == ids and hf_tokenizer.decode(ids) == text
    x = torch.tensor([ids])
    with torch.no_grad():
        assert torch.allclose(ours.eval()(x), theirs(x).logits, atol=1e-5)
    capsys.readouterr()

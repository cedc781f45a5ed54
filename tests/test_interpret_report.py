"""The report's "why" sections (logit lens, head scores, ablation effects) and their inspect options."""

from __future__ import annotations

import json
import re

import pytest
import torch

from glassformer import EncoderDecoder, TransformerLM
from glassformer.cli import main
from glassformer.interpret import ablate_heads, head_scores, logit_lens
from glassformer.tokenizers.char import CharTokenizer
from glassformer.viz.report import gather, report_html

TOK = CharTokenizer.from_text("abcdefghijklmnopqrstuvwxyz .", specials=["pad", "bos", "eos"])


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def lm(attn: str = "causal") -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(vocab_size=TOK.vocab_size, n_layers=2, d_model=16, n_heads=2, d_ff=32, attn=attn).eval()


@torch.no_grad()
def test_sections_hold_the_models_numbers():
    model = lm()
    data = gather(model, TOK, "hello world", generate=0, logit_lens=True, head_scores=True, ablation=True).interpret
    x = torch.tensor([TOK.encode("hello world")])
    lens = logit_lens(model, x, top_k=5)
    assert data["lens"]["rows"] == ["before block 0", "before block 1", "output"]
    assert [[c[0]["id"] for c in row] for row in data["lens"]["top"]] == lens.ids[:, 0, :, 0].tolist()
    assert [c[0]["id"] for c in data["lens"]["top"][-1]] == model(x)[0].argmax(-1).tolist()  # the model's output
    assert data["lens"]["top"][0][0][0]["label"] == TOK.id_to_token(lens.ids[0, 0, 0, 0].item())
    scores = head_scores(model, 20, 8, low=3, bos=TOK.bos_id)
    torch.testing.assert_close(torch.tensor(data["heads"]["induction"]), scores.induction)
    choice = model(x).log_softmax(-1).argmax(-1, keepdim=True)
    ablated = ablate_heads(model, x, heads=[(1, 0)]).log_softmax(-1).gather(-1, choice).mean()
    assert data["ablation"]["drop"][1][0] == pytest.approx(data["ablation"]["base"] - float(ablated), abs=1e-5)


def test_sections_are_static_tables_and_off_by_default():
    model = lm("prefix")
    page = report_html(model, TOK, "abc", "de", generate=0, logit_lens=True, head_scores=True, ablation=True)
    assert 'id="gf-lens"' in page and 'id="gf-ablation"' in page and 'id="gf-heads"' not in page
    assert "measured on causal models only" in page
    assert len(re.findall(r'class="gf-lens-cell"', page)) == 3 * 5
    plain = report_html(lm(), TOK, "abc", generate=0)
    assert "gf-lens" not in plain.split("<style>")[0] + plain.split("</style>")[1]
    encdec = EncoderDecoder(vocab_size=TOK.vocab_size, n_enc=1, n_dec=1, d_model=16, n_heads=2, d_ff=32).eval()
    data = gather(encdec, TOK, "ab", "cd", generate=0, logit_lens=True)
    assert data.interpret is None and any("single-stack" in n for n in data.notes)


def test_cli_inspect_options_write_the_sections(tmp_path, capsys):
    out = tmp_path / "why.html"
    assert main(["inspect", "--preset", "lesson2", "--text", "hello hello", "--out", str(out), "--generate", "0",
                 "--logit_lens", "--head_scores", "--ablation"]) == 0
    assert "report written" in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script type="application/json" id="gf-data">(.*?)</script>', page, re.S).group(1))
    assert set(data["interpret"]) == {"lens", "heads", "ablation"}
    assert len(data["interpret"]["heads"]["previous_token"]) == 2

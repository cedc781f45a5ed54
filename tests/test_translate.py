"""glassformer translate and glassformer.generation.translate: batching keeps order and results, BLEU, errors."""

import io
import sys

import pytest
import torch

from glassformer import ModelConfig, TransformerLM, build_model
from glassformer.cli import main
from glassformer.generation import bleu, translate
from glassformer.tokenizers import CharTokenizer
from glassformer.training import save_checkpoint

SOURCES = ["ein hund", "zwei katzen laufen", "x", "", "ein sehr langer satz mit vielen wörtern"]


@pytest.fixture(scope="module")
def seq2seq():
    tokenizer = CharTokenizer(sorted(set("".join(SOURCES) + "abcdefghijklmnopqrstuvwxyz ")), ["pad", "bos", "eos"])
    torch.manual_seed(1)
    config = ModelConfig(tokenizer.vocab_size, arch="encoder-decoder", d_model=32, n_heads=2, n_enc=1, n_dec=1,
                         d_ff=64, max_len=24)
    return build_model(config).eval(), tokenizer


@pytest.fixture(scope="module")
def checkpoint(seq2seq, tmp_path_factory):
    model, tokenizer = seq2seq
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "best", model, tokenizer)


def test_batched_translation_equals_one_at_a_time(seq2seq):
    model, tokenizer = seq2seq
    together = translate(model, tokenizer, SOURCES, batch_size=3)
    alone = [translate(model, tokenizer, [s])[0] for s in SOURCES]
    assert together == alone and len(together) == len(SOURCES)


def test_one_beam_is_greedy_and_beams_run(seq2seq):
    model, tokenizer = seq2seq
    greedy = translate(model, tokenizer, SOURCES)
    assert translate(model, tokenizer, SOURCES, num_beams=1) == greedy
    assert len(translate(model, tokenizer, SOURCES, num_beams=3, batch_size=2)) == len(SOURCES)


def test_translate_rejects_what_it_cannot_do(seq2seq):
    model, tokenizer = seq2seq
    with pytest.raises(ValueError, match="encoder-decoder"):
        translate(TransformerLM(vocab_size=tokenizer.vocab_size), tokenizer, SOURCES)
    with pytest.raises(TypeError, match="single str"):
        translate(model, tokenizer, "ein hund")
    with pytest.raises(ValueError, match=r"num_beams must be an int in \[1, 4096\], got 0"):
        translate(model, tokenizer, SOURCES, num_beams=0)
    with pytest.raises(ValueError, match="'bos' and 'eos'"):
        translate(model, CharTokenizer(list("ab")), SOURCES)


def test_bleu_is_sacrebleu_corpus_bleu():
    refs = ["A dog runs on the grass .", "Two men are talking."]
    assert bleu(refs, refs).score == pytest.approx(100.0)
    score = bleu(["A dog runs on grass .", "Two men talk."], refs)
    assert 0 < score.score < 100 and str(score).startswith("BLEU = ")
    with pytest.raises(ValueError, match="must pair up"):
        bleu(["a"], refs)


def test_cli_reads_files_and_stdin_alike(seq2seq, checkpoint, tmp_path, monkeypatch, capsys):
    model, tokenizer = seq2seq
    expected = translate(model, tokenizer, SOURCES, batch_size=2)
    source = tmp_path / "in.de"
    source.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    assert main(["translate", str(checkpoint), str(source), "--batch_size", "2"]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == expected
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(SOURCES) + "\n"))
    out = tmp_path / "out.en"
    assert main(["translate", str(checkpoint), "--output", str(out), "--ref", str(source), "--beams", "2"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == len(SOURCES)
    assert capsys.readouterr().err.startswith("BLEU = ")


def test_cli_errors_are_one_line(checkpoint, tmp_path, capsys, monkeypatch):
    assert main(["translate", str(tmp_path / "absent")]) == 2
    assert "does not exist" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["translate", str(checkpoint)]) == 2
    assert "nothing to translate" in capsys.readouterr().err

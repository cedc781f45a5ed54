"""Hugging Face folders: load_hf_dir (no transformers needed), save_hf_dir (transformers loads it), convert."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
from tokenizers import Tokenizer as RustTokenizer  # noqa: E402
from tokenizers import models, pre_tokenizers  # noqa: E402

from glassformer.cli import main  # noqa: E402
from glassformer.interop import from_hf, load_hf_dir, save_hf_dir  # noqa: E402
from glassformer.tokenizers import HFTokenizer  # noqa: E402
from glassformer.training.checkpoint import load  # noqa: E402

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "##s",
         ",", ".", "!"]


def bert_folder(tmp_path: Path, with_head: bool = True) -> Path:
    """A tiny BERT saved by transformers (vocab.txt tokenizer), as a Hub download would look."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(WORDS), hidden_size=16, num_attention_heads=2, num_hidden_layers=2,
                                     intermediate_size=32, max_position_embeddings=32, pad_token_id=0)
    model = (transformers.BertForMaskedLM if with_head else transformers.BertModel)(config).eval()
    path = tmp_path / "hf-bert"
    model.save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
    return path


def gpt2_folder(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_embd=16, n_head=2, n_layer=2, n_positions=32, bos_token_id=0,
                                     eos_token_id=0)
    path = tmp_path / "hf-gpt2"
    transformers.GPT2LMHeadModel(config).save_pretrained(path)
    return path


def test_load_hf_dir_matches_transformers(tmp_path):
    path = bert_folder(tmp_path)
    model, tokenizer = load_hf_dir(path)
    reference = transformers.AutoModelForMaskedLM.from_pretrained(path).eval()
    ids = torch.tensor([tokenizer.encode("The cats sat on a mat!", add_special_tokens=True)])
    assert tokenizer.tokens(ids[0].tolist()) == ["[CLS]", "the", "cat", "##s", "sat", "on", "a", "mat", "!", "[SEP]"]
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference(input_ids=ids).logits, atol=1e-5, rtol=0)


def test_load_hf_dir_works_without_transformers(tmp_path):
    """A child process where `import transformers` fails: loading must not need it."""
    path = bert_folder(tmp_path, with_head=False)
    code = ("import sys; sys.modules['transformers'] = None\n"
            "from glassformer.interop import load_hf_dir\n"
            f"model, tok = load_hf_dir({str(path)!r})\n"
            "assert 'transformers' not in [m for m, v in sys.modules.items() if v is not None]\n"
            "print(type(model).__name__, model.config.n_layers, tok.encode('the cat', True))")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "TransformerLM 2 [2, 5, 6, 3]"


@pytest.mark.parametrize("auto, make", [("AutoModelForCausalLM", gpt2_folder), ("AutoModelForMaskedLM", bert_folder)])
def test_save_hf_dir_loads_in_transformers(tmp_path, auto, make):
    model, _ = load_hf_dir(make(tmp_path))
    tokenizer = HFTokenizer(RustTokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]")))
    tokenizer.hf.pre_tokenizer = pre_tokenizers.Whitespace()
    out = save_hf_dir(model, tokenizer, tmp_path / "export")
    reference, info = getattr(transformers, auto).from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    text = "the cat sat on the mat"
    ids = hf_tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert ids[0].tolist() == tokenizer.encode(text) == [5, 6, 7, 8, 5, 9]
    assert hf_tokenizer.pad_token_id == tokenizer.pad_id == 0
    with torch.no_grad():
        torch.testing.assert_close(reference.eval()(input_ids=ids).logits, model(ids), atol=1e-5, rtol=0)


def test_save_hf_dir_bart_round_trip(tmp_path):
    torch.manual_seed(0)
    config = transformers.BartConfig(vocab_size=40, d_model=16, encoder_attention_heads=2, decoder_attention_heads=2,
                                     encoder_layers=1, decoder_layers=1, encoder_ffn_dim=32, decoder_ffn_dim=32,
                                     max_position_embeddings=32)
    model = from_hf(transformers.BartForConditionalGeneration(config).eval())
    out = save_hf_dir(model, None, tmp_path / "bart")
    written = json.loads((out / "config.json").read_text())
    assert written["architectures"] == ["BartForConditionalGeneration"] and written["eos_token_id"] is None
    reloaded, tokenizer = load_hf_dir(out)
    assert tokenizer is None
    reference = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    src, tgt = torch.randint(3, 40, (2, 6)), torch.randint(3, 40, (2, 4))
    with torch.no_grad():
        expected = reference(input_ids=src, decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, tgt), expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(reloaded(src, tgt), expected, atol=0, rtol=0)


def test_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_hf_dir(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        load_hf_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="only pickled PyTorch weights"):
        load_hf_dir(tmp_path)
    path = bert_folder(tmp_path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    missing = r"hf-bert \(BertForMaskedLM\) is missing tensor\(s\) bert\.encoder\.layer\.2\."
    with pytest.raises(ValueError, match=missing):
        load_hf_dir(path)
    (path / "config.json").write_text(json.dumps({**config, "architectures": ["BertForTokenClassification"]}))
    with pytest.raises(ValueError, match="unsupported architecture 'BertForTokenClassification'"):
        load_hf_dir(path)


def test_convert_cli_both_ways(tmp_path, capsys):
    src = bert_folder(tmp_path)
    assert main(["convert", str(src), str(tmp_path / "gf")]) == 0
    assert "Hugging Face folder -> glassformer checkpoint" in capsys.readouterr().out
    model, tokenizer = load(tmp_path / "gf")
    assert tokenizer.kind == "hf" and tokenizer.encode("the dogs ran", True) == [2, 5, 11, 13, 12, 3]
    assert main(["convert", str(tmp_path / "gf"), str(tmp_path / "back")]) == 0
    assert "glassformer checkpoint -> Hugging Face folder" in capsys.readouterr().out
    reference = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "back").eval()
    ids = torch.tensor([[2, 5, 6, 7, 3]])
    with torch.no_grad():
        torch.testing.assert_close(reference(input_ids=ids).logits, model(ids), atol=1e-5, rtol=0)
    assert main(["convert", str(tmp_path / "nowhere"), str(tmp_path / "x")]) == 2
    assert "is not a folder" in capsys.readouterr().err

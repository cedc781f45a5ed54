"""Checkpoints: round trip, atomic replacement, and clear errors for bad files (pickles are refused)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import glassformer
from glassformer import ModelConfig, build_model
from glassformer.tokenizers import CharTokenizer
from glassformer.training import load_checkpoint, load_state_file, save_checkpoint


def make(tmp_path: Path, **state):
    torch.manual_seed(0)
    tok = CharTokenizer.from_text("hello world\n", specials=["pad"])
    model = build_model(ModelConfig.preset("tiny-char", vocab_size=tok.vocab_size))
    path = save_checkpoint(tmp_path / "ckpt", model, tok, training={"objective": "clm"},
                           train_state=state or None)
    return model, tok, path


def test_roundtrip_with_glassformer_load(tmp_path):
    model, tok, path = make(tmp_path, step=3, rng=torch.get_rng_state())
    assert sorted(os.listdir(path)) == ["config.json", "model.safetensors", "tokenizer.json", "train_state.pt",
                                        "training.json"]
    loaded, loaded_tok = glassformer.load(path)
    ids = torch.tensor([tok.encode("hello")])
    assert torch.equal(loaded(ids), model.eval()(ids))
    assert loaded_tok.to_dict() == tok.to_dict() and loaded.config == model.config
    checkpoint = load_checkpoint(path, with_state=True)
    assert checkpoint.training == {"objective": "clm"} and checkpoint.train_state["step"] == 3


def test_save_replaces_atomically_and_a_failed_save_keeps_the_old_one(tmp_path, monkeypatch):
    model, tok, path = make(tmp_path)
    before = (path / "model.safetensors").read_bytes()
    with torch.no_grad():
        next(model.parameters()).add_(1.0)

    def crash(self, where):
        raise OSError("disk full")

    monkeypatch.setattr(CharTokenizer, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, tok)
    assert (path / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temp folder left behind
    monkeypatch.undo()
    save_checkpoint(path, model, tok)
    assert (path / "model.safetensors").read_bytes() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_missing_folder_and_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint folder .* does not exist"):
        glassformer.load(tmp_path / "nope")
    _, _, path = make(tmp_path)
    (path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="has no model.safetensors"):
        glassformer.load(path)


def test_truncated_weights(tmp_path):
    _, _, path = make(tmp_path)
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="model.safetensors is corrupt or truncated"):
        glassformer.load(path)


def test_mismatched_config(tmp_path):
    _, _, path = make(tmp_path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "d_ff": 128}))
    with pytest.raises(ValueError, match="does not match config.json: .*file \\(64, 32\\) vs config \\(128, 32\\)"):
        glassformer.load(path)
    (path / "config.json").write_text(json.dumps({**config, "vocab_size": 99}))
    with pytest.raises(ValueError, match="tokenizer has 10 ids but config.json says vocab_size=99"):
        glassformer.load(path)


class Exploit:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def test_pickle_with_code_is_refused_not_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, _, path = make(tmp_path, step=1)
    torch.save({"step": 1, "evil": Exploit()}, path / "train_state.pt")
    with pytest.raises(ValueError, match="refused to load .*train_state.pt"):
        load_checkpoint(path, with_state=True)
    assert not (tmp_path / "PWNED").exists()


def test_truncated_state(tmp_path):
    _, _, path = make(tmp_path, step=1, big=torch.zeros(10000))
    data = (path / "train_state.pt").read_bytes()
    (path / "train_state.pt").write_bytes(data[:1000])
    with pytest.raises(ValueError, match="corrupt or truncated"):
        load_state_file(path / "train_state.pt")

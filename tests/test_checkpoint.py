"""Checkpoints: round trip, atomic replacement, and clear errors for bad files (pickles are refused)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import glassformer
from glassformer import ModelConfig, build_model
from glassformer.io.fileio import new_directory, replace_symlink
from glassformer.tokenizers import CharTokenizer
from glassformer.training import load_checkpoint, load_state_file, save_checkpoint
from glassformer.training.checkpoint import commit_checkpoint
from glassformer.training.run_dir import find_resumable


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

    def crash(self):
        raise OSError("disk full")

    monkeypatch.setattr(CharTokenizer, "to_dict", crash)
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
    (path / "config.json").write_text(json.dumps({**config, "vocab_size": 99}))  # a tokenizer may be smaller...
    with pytest.raises(ValueError, match=r"embeddings.tok.weight: file \(10, 32\) vs config \(99, 32\)"):
        glassformer.load(path)  # ...but the weights must fit the config
    (path / "config.json").write_text(json.dumps({**config, "vocab_size": 5}))
    with pytest.raises(ValueError, match="tokenizer has 10 ids but config.json says vocab_size=5"):
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


def test_commit_keeps_the_previous_checkpoint_until_the_pointer_moves(tmp_path, monkeypatch):
    """Step folders plus an atomically replaced pointer: a failure at any point leaves `last` usable, and
    the newest complete folder (not the pointer) is what a resumed run continues from."""
    model, tok, _ = make(tmp_path)
    out = tmp_path / "run"
    commit_checkpoint(out, 1, model, tok, training=None, train_state={"step": 1}, best=True)
    assert os.readlink(out / "last") == os.readlink(out / "best") == "ckpt-000001"

    monkeypatch.setattr(CharTokenizer, "to_dict", lambda self: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):  # fails while writing the folder
        commit_checkpoint(out, 2, model, tok, training=None, train_state={"step": 2})
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == ["best", "ckpt-000001", "last"]  # no temp folder left

    real_replace = os.replace
    def crash_at_the_pointer(source, target):  # the folder's own files are written (atomically) as usual
        if Path(target).name != "last":
            return real_replace(source, target)
        raise OSError("crash at the pointer")

    monkeypatch.setattr(os, "replace", crash_at_the_pointer)
    with pytest.raises(OSError, match="crash at the pointer"):  # the folder is complete, the pointer not moved
        commit_checkpoint(out, 2, model, tok, training=None, train_state={"step": 2})
    monkeypatch.setattr(os, "replace", real_replace)
    assert os.readlink(out / "last") == "ckpt-000001" and glassformer.load(out / "last")
    assert find_resumable(out) == out / "ckpt-000002"

    commit_checkpoint(out, 3, model, tok, training=None, train_state={"step": 3})
    assert sorted(p.name for p in out.iterdir()) == ["best", "ckpt-000001", "ckpt-000003", "last"]  # pruned
    assert load_checkpoint(out / "last", with_state=True).train_state["step"] == 3
    assert load_checkpoint(out / "best", with_state=True).train_state["step"] == 1


def test_a_crash_inside_the_folder_swap_is_undone_by_the_next_save(tmp_path, monkeypatch):
    """save_checkpoint (a plain folder) still swaps two names; a crash between them leaves the old
    folder as .NAME.old-PID, and the next save of that path puts it back before anything else."""
    model, tok, path = make(tmp_path)
    before = (path / "model.safetensors").read_bytes()
    os.replace(path, tmp_path / ".ckpt.old-4242")  # what the crash left
    monkeypatch.setattr(CharTokenizer, "to_dict", lambda self: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, tok)
    assert (path / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_replace_symlink_and_new_directory(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "last").mkdir()  # a real folder of the older layout is replaced by the pointer
    replace_symlink(tmp_path / "last", "a")
    assert os.readlink(tmp_path / "last") == "a"
    replace_symlink(tmp_path / "last", "a")  # the same target: nothing to do
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "last"]
    with pytest.raises(FileExistsError), new_directory(tmp_path / "a"):
        pass
    with pytest.raises(RuntimeError), new_directory(tmp_path / "b") as temp:
        (temp / "f").write_text("x")
        raise RuntimeError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "last"]
    with new_directory(tmp_path / "b") as temp:
        (temp / "f").write_text("x")
    assert (tmp_path / "b" / "f").read_text() == "x"

"""The last traceback and wrong-result cases of issue 31, one test each (each failed before its fix).

- A reader of ``out/last`` while the trainer moves it (and prunes the folder it pointed to) reads one
  whole checkpoint: never a false "leads outside" or a missing file.
- A checkpoint folder whose name starts with ``{`` is a folder, not inline JSON.
- Path names that are not UTF-8 (Linux allows any bytes) load, train and print without a traceback.
- A full disk while an SAE run or an export to a Hugging Face folder writes is one line naming the file,
  and leaves no partial file or folder (the previous outputs stay as they were).
- Hugging Face weights that are not floating point (int8, bool) are refused on every way in.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from glassformer import ModelConfig, build_model
from glassformer.cli import main
from glassformer.fileio import replace_symlink
from glassformer.tokenizers import CharTokenizer
from glassformer.training import load_checkpoint, save_checkpoint
from glassformer.training.checkpoint import commit_checkpoint

TEXT = "hello world, a small text\n"


def tiny() -> tuple[torch.nn.Module, CharTokenizer]:
    torch.manual_seed(0)
    tok = CharTokenizer.from_text(TEXT, specials=["pad", "bos", "eos"])
    config = ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=32,
                         pos="learned")
    return build_model(config), tok


def run_cli(capsys, argv: list) -> tuple[int, str, str]:
    """``glassformer argv`` in-process: (status, stdout, stderr)."""
    try:
        status = main([str(a) if not isinstance(a, str) else a for a in argv])
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ---------------------------------------------------------------------- out/last read during training
def _race(out: Path, flip, reads: int) -> list[str]:
    """Load ``out/last`` ``reads`` times while ``flip()`` runs in a loop in another thread; the failures."""
    stop, failures = threading.Event(), []

    def writer():
        while not stop.is_set():
            flip()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(reads):
            try:
                load_checkpoint(out / "last")
            except Exception as error:  # noqa: BLE001 (every failure counts)
                failures.append(f"{type(error).__name__}: {error}")
    finally:
        stop.set()
        thread.join()
    return failures


def test_last_read_while_the_pointer_flips_never_fails(tmp_path):
    model, tok = tiny()
    out = tmp_path / "run"
    for step in (1, 2):
        commit_checkpoint(out, step, model, tok, training=None, train_state={"step": step}, best=step == 1)
    names = iter(["ckpt-000001", "ckpt-000002"] * 1_000_000)
    failures = _race(out, lambda: replace_symlink(out / "last", next(names)), 150)
    assert failures == []


def test_last_read_while_the_trainer_saves_and_prunes_never_fails(tmp_path):
    model, tok = tiny()
    out = tmp_path / "run"
    commit_checkpoint(out, 1, model, tok, training=None, train_state={"step": 1})
    steps = iter(range(2, 1_000_000))

    def save():
        step = next(steps)
        commit_checkpoint(out, step, model, tok, training=None, train_state={"step": step})

    failures = _race(out, save, 150)
    assert failures == []


# ---------------------------------------------------------------------- a folder named "{...}"
def test_a_checkpoint_folder_whose_name_starts_with_a_brace_is_a_folder(tmp_path, capsys, monkeypatch):
    model, tok = tiny()
    save_checkpoint(tmp_path / "{x}", model, tok)
    monkeypatch.chdir(tmp_path)
    status, out, err = run_cli(capsys, ["generate", "{x}", "--prompt", "he", "--max_new_tokens", "2"])
    assert status == 0, err
    assert out.startswith("he")
    status, out, err = run_cli(capsys, ["inspect", "{x}", "--text", "hello"])
    assert status == 0, err
    status, out, err = run_cli(capsys, ["generate", "{nope}", "--prompt", "he"])
    assert status == 2 and err.count("\n") == 1 and "'{nope}' does not exist" in err, err


def test_model_config_from_json_reads_a_brace_named_file_and_says_what_a_missing_one_is(tmp_path, monkeypatch):
    from glassformer.errors import GlassformerError

    model, tok = tiny()
    path = save_checkpoint(tmp_path / "{x}", model, tok)
    monkeypatch.chdir(tmp_path)
    assert ModelConfig.from_json("{x}/config.json") == model.config
    assert ModelConfig.from_json(str(path / "config.json")) == model.config
    assert ModelConfig.from_json(path / "config.json") == model.config
    assert ModelConfig.from_json('{"vocab_size": 5, "d_model": 8, "n_heads": 2, "d_ff": 8}').vocab_size == 5
    with pytest.raises(GlassformerError, match=r"not valid JSON .*; nor is .*{nope}.* an existing file"):
        ModelConfig.from_json("{nope}/config.json")

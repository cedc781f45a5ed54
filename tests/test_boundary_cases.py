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

import errno
import os
import threading
from pathlib import Path

import pytest
import torch

from glassformer import ModelConfig, build_model
from glassformer.cli import main
from glassformer.io.fileio import replace_symlink
from glassformer.tokenizers import CharTokenizer
from glassformer.training import load_checkpoint, save_checkpoint
from glassformer.training.checkpoint import commit_checkpoint

TEXT = "hello world, a small text\n"


def tiny() -> tuple[torch.nn.Module, CharTokenizer]:
    torch.manual_seed(0)
    tok = CharTokenizer.from_text(TEXT, specials=["pad", "bos", "eos"])
    config = ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=32,
                         pos="learned", activation="gelu_tanh", scale_embeddings=False)  # GPT-2's shape
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
    """Load ``out/last`` ``reads`` times while another thread calls ``flip()`` once per read, as the read begins;
    the failures (a flip's own included). A read may overlap its flip (a save and a prune), and the next read
    begins only once that flip is done: the writer is never more than one flip ahead of a reader (a trainer
    saves far less often than a read takes), however busy the machine and however the threads are scheduled."""
    failures: list[str] = []
    go, done = threading.Semaphore(0), threading.Semaphore(0)
    stopping = threading.Event()

    def writer():
        while go.acquire() and not stopping.is_set():
            try:
                flip()
            except Exception as error:  # noqa: BLE001 (a failed save counts too)
                failures.append(f"flip: {type(error).__name__}: {error}")
            finally:
                done.release()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for _ in range(reads):
            go.release()
            try:
                load_checkpoint(out / "last")
            except Exception as error:  # noqa: BLE001 (every failure counts)
                failures.append(f"{type(error).__name__}: {error}")
            assert done.acquire(timeout=600), "the writer hung"  # a bound on a hang, never a verdict by time
    finally:
        stopping.set()
        go.release()
        thread.join(timeout=600)
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


def test_a_save_and_prune_before_any_part_of_a_read_gives_the_newer_checkpoint_whole(tmp_path, monkeypatch):
    """The interleavings the race above meets by chance, each made to happen: just before each part of a read
    of ``out/last`` (config, tokenizer, header, tensors, model, state), the trainer saves a newer step and prunes
    the folder being read. The read then gives the newer checkpoint, whole: its weights and state are one step's."""
    import glassformer.training.checkpoint as checkpoint_module
    from glassformer.tokenizers import Tokenizer

    model, tok = tiny()
    out = tmp_path / "run"
    name, first = next(iter(model.named_parameters()))

    def save(step: int) -> None:
        with torch.no_grad():
            first.fill_(step)  # which step's weights a read returns
        commit_checkpoint(out, step, model, tok, training=None, train_state={"step": step})

    save(1)
    stages = [(ModelConfig, "from_json"), (Tokenizer, "load"), (checkpoint_module, "read_header"),
              (checkpoint_module, "load_tensors"), (checkpoint_module, "build_model"),
              (checkpoint_module, "load_state_file")]
    for step, (owner, attribute) in enumerate(stages, start=2):
        real, saved = getattr(owner, attribute), []

        def save_first(*args, real=real, step=step, saved=saved, **kwargs):
            if not saved:  # once per read: the retry reads on
                saved.append(step)
                save(step)
            return real(*args, **kwargs)

        with monkeypatch.context() as patch:
            patch.setattr(owner, attribute, staticmethod(save_first) if isinstance(owner, type) else save_first)
            checkpoint = load_checkpoint(out / "last", with_state=True)
        assert saved == [step], attribute
        assert sorted(p.name for p in out.iterdir()) == [f"ckpt-{step:06d}", "last"], attribute  # the old one pruned
        assert checkpoint.train_state == {"step": step}, attribute
        assert torch.equal(checkpoint.model.state_dict()[name], torch.full_like(first, step)), attribute


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


# ---------------------------------------------------------------------- a full disk: sae and export to HF
RUST_FULL = 'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'


def _half_written(file, error: BaseException):
    """What a full disk does to a writer: some bytes land in ``file``, then ``error``."""
    Path(file).write_bytes(b"\x00" * 100)
    raise error


def _fsync_fails_for(name: str):
    """An ``os.fsync`` that meets a full disk when it flushes a temporary file of ``name`` (Linux: the
    file behind the descriptor is read from /proc/self/fd)."""
    real = os.fsync

    def fsync(fd: int) -> None:
        if name in os.path.basename(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    return fsync


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _no_leftovers(folder: Path) -> None:
    hidden = [str(p.relative_to(folder)) for p in folder.rglob(".*")]
    assert hidden == [], hidden


SAE_ORDER = ["state", "sae", "metrics.json", "features.html"]  # what an SAE run writes, in order


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
@pytest.mark.parametrize("where", SAE_ORDER)
def test_a_full_disk_in_sae_is_one_line_and_leaves_no_partial_file(tmp_path, capsys, monkeypatch, where):
    from safetensors import SafetensorError

    import glassformer.interpret.sae.model as sae_model
    import glassformer.interpret.sae.train as sae_train
    import glassformer.io.fileio as fileio

    model, tok = tiny()
    save_checkpoint(tmp_path / "ck", model, tok)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT * 40, encoding="utf-8")
    out = tmp_path / "sae"
    words = ["sae", tmp_path / "ck", "--hook", "blocks.0.hook_resid_post", "--data", corpus, "--out_dir", out,
             "--d_sae", "32", "--k", "4", "--steps", "4", "--batch_size", "32", "--buffer_size", "64",
             "--context", "16", "--model_batch", "4", "--progress", "false", "--feature_windows", "4",
             "--eval_batches", "1", "--save_every", "2"]
    status, _, err = run_cli(capsys, words)
    assert status == 0, err
    before = _tree(out)
    if where == "state":
        monkeypatch.setattr(sae_train.torch, "save", lambda obj, file: _half_written(
            file, RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing "
                               "file data/0: file write failed")))
    elif where == "sae":
        monkeypatch.setattr(sae_model, "save_file", lambda tensors, file, metadata=None: _half_written(
            file, SafetensorError(RUST_FULL)))
    else:
        monkeypatch.setattr(fileio.os, "fsync", _fsync_fails_for(where))
    status, _, err = run_cli(capsys, [*words, "--seed", "1"])
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith("glassformer: error: No space left on device: '"), err
    _no_leftovers(out)
    after = _tree(out)
    later = SAE_ORDER[SAE_ORDER.index(where):]  # not yet replaced when the disk filled: as they were
    for name, data in before.items():
        if name.split("/")[0] in later and name.split("/")[0] != "state":
            assert after.get(name) == data, name
    assert {n for n in after if not n.startswith("state/")} == {n for n in before if not n.startswith("state/")}


@pytest.mark.parametrize("where", ["config", "weights", "tokenizer"])
def test_a_full_disk_in_export_to_hf_is_one_line_and_keeps_the_previous_folder(tmp_path, capsys, monkeypatch, where):
    from safetensors import SafetensorError

    import glassformer.interop.hf_dir as hf_dir

    model, tok = tiny()
    save_checkpoint(tmp_path / "ck", model, tok)
    dst = tmp_path / "hf"
    status, _, err = run_cli(capsys, ["convert", tmp_path / "ck", dst])
    assert status == 0, err
    before = _tree(tmp_path)
    if where == "weights":
        monkeypatch.setattr(hf_dir, "save_file", lambda tensors, file, metadata=None: _half_written(
            file, SafetensorError(RUST_FULL)))
    elif where == "tokenizer":
        monkeypatch.setattr(hf_dir.HFTokenizer, "save_hf", lambda self, folder: _half_written(
            Path(folder) / "tokenizer.json", Exception("No space left on device (os error 28)")))
    else:
        real = Path.write_text

        def write_text(self, data, *args, **kwargs):
            if self.name == "config.json":
                _half_written(self, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
            return real(self, data, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", write_text)
    status, _, err = run_cli(capsys, ["convert", tmp_path / "ck", dst])
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"glassformer: error: No space left on device: {str(dst)!r}"), err
    _no_leftovers(tmp_path)
    assert _tree(tmp_path) == before  # the previous export byte for byte, nothing else


# ---------------------------------------------------------------------- HF weights that are not float
def _quantized_hf_dir(tmp_path: Path, dtype: torch.dtype) -> tuple[Path, str]:
    """A Hugging Face GPT-2 folder whose first MLP weight is stored as ``dtype``; (folder, tensor name)."""
    from safetensors.torch import load_file, save_file

    from glassformer.interop.hf_dir import save_hf_dir

    model, tok = tiny()
    folder = save_hf_dir(model, tok, tmp_path / "hf")
    weights = load_file(str(folder / "model.safetensors"))
    name = next(n for n in weights if n.endswith("mlp.c_fc.weight"))
    weights[name] = weights[name].to(dtype)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder, name


@pytest.mark.parametrize("dtype", [torch.int8, torch.bool])
@pytest.mark.parametrize("verb", ["convert", "embed", "inspect"])
def test_hf_int8_and_bool_weights_are_refused_by_every_command(tmp_path, capsys, dtype, verb):
    folder, name = _quantized_hf_dir(tmp_path, dtype)
    argv = {"convert": ["convert", folder, tmp_path / "ck"],
            "embed": ["embed", "--model", folder, "hello"],
            "inspect": ["inspect", folder, "--text", "hello"]}[verb]
    status, _, err = run_cli(capsys, argv)
    assert status == 2 and err.count("\n") == 1, err
    assert name in err and "not floating point" in err, err
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("dtype", [torch.int8, torch.bool])
def test_from_hf_refuses_a_transformers_model_with_int8_or_bool_weights(dtype):
    transformers = pytest.importorskip("transformers")
    from glassformer.errors import GlassformerError
    from glassformer.interop import from_hf

    config = transformers.GPT2Config(vocab_size=40, n_embd=16, n_head=2, n_layer=1, n_positions=16)
    hf = transformers.GPT2LMHeadModel(config).eval()
    mlp = hf.transformer.h[0].mlp.c_fc
    mlp.weight = torch.nn.Parameter(mlp.weight.detach().to(dtype), requires_grad=False)
    with pytest.raises(GlassformerError, match=r"transformer\.h\.0\.mlp\.c_fc\.weight.*not floating point"):
        from_hf(hf)
    from_hf(transformers.GPT2LMHeadModel(config).eval())  # the float model converts


# ---------------------------------------------------------------------- path names that are not UTF-8
def _latin1_name(stem: bytes) -> str:
    """A file name holding the byte 0xE9 (é in Latin-1), which is not UTF-8: how Python spells it
    (os.fsdecode: a lone surrogate), or a skip where the file system refuses such names."""
    name = os.fsdecode(stem + b"\xe9")
    if name.encode("utf-8", "surrogateescape") == stem + b"\xe9" and "\udce9" not in name:
        pytest.skip("the file system encoding is not UTF-8")
    return name


@pytest.fixture
def latin1(tmp_path) -> Path:
    folder = tmp_path / _latin1_name(b"caf")
    try:
        folder.mkdir()
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system refuses names that are not UTF-8")
    return folder


def test_a_checkpoint_folder_whose_name_is_not_utf8_generates_and_inspects(latin1, capsys):
    model, tok = tiny()
    ck = save_checkpoint(latin1 / _latin1_name(b"ck"), model, tok)
    status, out, err = run_cli(capsys, ["generate", ck, "--prompt", "he", "--max_new_tokens", "2",
                                        "--json", latin1 / _latin1_name(b"g")])
    assert status == 0, err
    assert out.startswith("he")
    status, out, err = run_cli(capsys, ["inspect", ck, "--text", "hello", "--out", latin1 / "r.html"])
    assert status == 0, err
    status, out, err = run_cli(capsys, ["convert", ck, latin1 / _latin1_name(b"hf")])
    assert status == 0, err
    assert "caf\\udce9" in out  # the path shown as Python spells it, never a UnicodeEncodeError
    status, out, err = run_cli(capsys, ["generate", latin1 / _latin1_name(b"nope"), "--prompt", "he"])
    assert status == 2 and err.count("\n") == 1 and "does not exist" in err, err


def test_training_on_a_file_whose_name_is_not_utf8_into_such_a_folder(latin1, capsys):
    data = latin1 / _latin1_name(b"text")
    data.write_text(TEXT * 50, encoding="utf-8")
    out = latin1 / _latin1_name(b"run")
    argv = ["train", "--data", data, "--out_dir", out, "--max_steps", "2", "--eval_every", "2",
            "--model.preset", "tiny-char", "--batch_size", "2", "--block_size", "16", "--progress", "false"]
    status, printed, err = run_cli(capsys, argv)
    assert status == 0, err
    load_checkpoint(out / "last")
    status, printed, err = run_cli(capsys, ["inspect", out])
    assert status == 0, err

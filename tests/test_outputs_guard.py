"""One way out: every file a command declares (``WRITES`` in ``glassformer/commands/<verb>.py``) is
guarded. At each declared output this test puts, in turn, a user's file (and, under a JSON name whose
keys glassformer knows, a user's JSON), a symbolic link to one, a hard link to one, a FIFO and (for an
output named on the command line) each of the command's inputs; the command must fail with one line
and everything must survive byte for byte. A new verb, or a new file of an old one, is covered by
declaring it: no new test code.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import stat
from pathlib import Path

import pytest
import torch

from glassformer import ModelConfig, build_model
from glassformer.cli import VERBS, main
from glassformer.fileio import JSON_KEYS, Writes
from glassformer.interpret.transcoders import random_transcoders, save_transcoders
from glassformer.tokenizers import CharTokenizer
from glassformer.training import save_checkpoint

TEXT = "hello world, a small text\nabcabc\n"
USER = b"a user's own notes: glassformer must never touch them\n"
FORTUNES = Path(__file__).parent / "fixtures" / "fortunes" / "tang300"
USER_JSON = b'{"my": "own notes", "in": ["json", "too"]}\n'
HAZARDS = ("user file", "symlink", "hardlink", "fifo")  # and a user's JSON where glassformer knows its keys


def declared() -> list[tuple[str, Writes]]:
    """Every (verb, Writes) the commands declare; a verb without WRITES fails the test below."""
    return [(verb, case) for verb in VERBS
            for case in getattr(importlib.import_module(f"glassformer.commands.{verb}"), "WRITES", ())]


def test_every_verb_declares_what_it_writes():
    missing = [v for v in VERBS if not hasattr(importlib.import_module(f"glassformer.commands.{v}"), "WRITES")]
    assert not missing, f"declare WRITES (an empty tuple for a verb that writes no file) in: {missing}"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """What the placeholders of :class:`Writes` stand for."""
    root = tmp_path_factory.mktemp("inputs")
    torch.manual_seed(0)
    tok = CharTokenizer.from_text(TEXT, specials=["pad", "bos", "eos"])
    small = dict(vocab_size=tok.vocab_size, d_model=16, n_heads=2, d_ff=32, max_len=32)
    found = {"ck": save_checkpoint(root / "ck", build_model(ModelConfig(**small, n_layers=1)), tok),
             "s2s": save_checkpoint(root / "s2s", build_model(ModelConfig(**small, arch="encoder-decoder", n_enc=1,
                                                                          n_dec=1)), tok),
             "text": root / "in.txt", "run": root / "run", "config": root / "train.yaml", "tang": FORTUNES}
    found["tc"] = save_transcoders(random_transcoders(1, 16, 8, scale=4.0), root / "tc")
    found["text"].write_text(TEXT * 4, encoding="utf-8")
    found["run"].mkdir()
    (found["run"] / "metrics.jsonl").write_text('{"step": 1, "train_loss": 3.0}\n{"step": 2, "val_loss": 2.9}\n')
    found["config"].write_text(f"data: {found['text']}\ntokenizer: char\nblock_size: 8\nbatch_size: 2\nmax_steps: 2\n"
                               "model:\n  d_model: 16\n  n_heads: 2\n  n_layers: 1\n  d_ff: 32\n", encoding="utf-8")
    return found


def _fill(word: str, places: dict[str, Path]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: str(places[m.group(1)]), word)


def _snapshot(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry under ``root``: a link's target, a file's bytes, a FIFO's kind (nothing is opened but files)."""
    found = {}
    for entry in sorted(root.rglob("*")):
        info = os.lstat(entry)
        if stat.S_ISLNK(info.st_mode):
            found[str(entry)] = ("link", os.readlink(entry))
        elif stat.S_ISREG(info.st_mode):
            found[str(entry)] = ("file", entry.read_bytes())
        elif stat.S_ISFIFO(info.st_mode):
            found[str(entry)] = ("fifo", "")
    return found


def _place(hazard: str, path: Path, user: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if hazard == "user file":
        path.write_bytes(USER)
    elif hazard == "user json":
        path.write_bytes(USER_JSON)
    elif hazard == "symlink":
        path.symlink_to(user)
    elif hazard == "hardlink":
        os.link(user, path)
    else:
        os.mkfifo(path)


def _one_line_failure(capsys, argv: list[str]) -> str:
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2, f"{argv}: status {status}, stderr {err!r}"
    lines = err.splitlines()  # progress lines may come first; the error is one line, the last
    assert lines and lines[-1].startswith("glassformer: error: ") and err.count("glassformer: error") == 1, err
    return lines[-1]


CASES = [(verb, case, file) for verb, case in declared() for file in case.files]


@pytest.mark.parametrize(("verb", "case", "file"), CASES, ids=[f"{v}:{f}" for v, _, f in CASES])
def test_declared_output_is_guarded(verb, case, file, inputs, tmp_path, capsys):
    """Each hazard at ``file``: the command fails in one line and nothing anywhere changes."""
    for hazard in HAZARDS + (("user json",) if Path(file).name in JSON_KEYS else ()):
        work = tmp_path / hazard.replace(" ", "_")
        places = {**inputs, "out": work / "out"}
        if "{run}" in file:  # the run folder is an input too: each hazard gets its own copy
            places["run"] = work / "run"
            shutil.copytree(inputs["run"], places["run"])
        user = work / "mine" / "precious.txt"
        user.parent.mkdir(parents=True)
        user.write_bytes(USER)
        target = Path(_fill(file, places))
        _place(hazard, target, user)
        before = _snapshot(work), _snapshot(inputs["ck"].parent)
        error = _one_line_failure(capsys, [_fill(w, places) for w in case.argv])
        assert (_snapshot(work), _snapshot(inputs["ck"].parent)) == before, f"{hazard} at {file}: {error}"


NAMED = [(verb, case, file) for verb, case in declared() for file in case.files if file in case.argv]


@pytest.mark.parametrize(("verb", "case", "file"), NAMED, ids=[f"{v}:{f}" for v, _, f in NAMED])
def test_an_input_is_never_an_output(verb, case, file, inputs, tmp_path, capsys):
    """An output named on the command line set to each of the command's inputs (a checkpoint's own files,
    the text read): refused in one line, the input unchanged."""
    places = {**inputs, "out": tmp_path / "out"}
    used = {m for word in case.argv for m in re.findall(r"\{(\w+)\}", word)} - {"out"}
    for name in sorted(used):
        source = inputs[name]
        for read in ([source / "config.json", source / "model.safetensors"] if name in ("ck", "s2s")
                     else [source / "metrics.jsonl"] if name == "run" else [source]):
            argv = [str(read) if word == file else _fill(word, places) for word in case.argv]
            before = read.read_bytes()
            _one_line_failure(capsys, argv)
            assert read.read_bytes() == before


def test_written_files_have_the_ordinary_mode_of_a_new_file(inputs, tmp_path):
    """Checkpoint files were 0600 (safetensors writes them private); now every file glassformer writes
    has the mode any new file gets: 0644 under umask 022, 0640 under 027."""
    from glassformer.fileio import atomic_write
    from glassformer.interpret.sae import identity_sae, save_sae
    from glassformer.training import load

    model, tok = load(inputs["ck"])
    for umask, mode in ((0o022, 0o644), (0o027, 0o640)):
        previous = os.umask(umask)
        try:
            folder = tmp_path / f"umask-{umask:o}"
            written = [*save_checkpoint(folder / "ck", model, tok).iterdir(),
                       *save_sae(identity_sae(16), folder / "sae").iterdir(),
                       atomic_write(folder / "page.json", "{}")]
        finally:
            os.umask(previous)
        assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in written} == {p.name: oct(mode) for p in written}


READ = [(verb, case, file) for verb, case in declared() for file in case.files
        if file not in case.argv and "{text}" in case.argv]


@pytest.mark.parametrize(("verb", "case", "file"), READ, ids=[f"{v}:{f}" for v, _, f in READ])
def test_a_declared_output_that_is_the_text_read_survives(verb, case, file, inputs, tmp_path, capsys):
    """The text a command reads placed at one of its outputs (``sae --data mywork/metrics.json
    --out_dir mywork``): refused in one line, the text unchanged."""
    places = {**inputs, "out": tmp_path / "out"}
    target = Path(_fill(file, places))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(TEXT * 4, encoding="utf-8")
    _one_line_failure(capsys, [str(target) if word == "{text}" else _fill(word, places) for word in case.argv])
    assert target.read_text(encoding="utf-8") == TEXT * 4


def test_nothing_is_written_into_a_checkpoint_folder_the_command_reads(inputs, tmp_path, capsys):
    """``generate ck --json ck/new.json``: a new file in the checkpoint read would make it a folder
    glassformer no longer recognises as its own; refused, the folder unchanged."""
    before = sorted(p.name for p in inputs["ck"].iterdir())
    for argv in (["generate", "{ck}", "--prompt", "ab", "--max_new_tokens", "1", "--json", "{ck}/new.json"],
                 ["inspect", "{ck}", "--text", "ab", "--out", "{ck}/sub/report.html"]):
        _one_line_failure(capsys, [_fill(w, inputs) for w in argv])
    assert sorted(p.name for p in inputs["ck"].iterdir()) == before

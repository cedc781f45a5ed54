"""glassformer removes or replaces only what it can prove it wrote (issue 22, "never destroy").

Every place a command writes is tried with a user's file or folder in it: each is refused with one
line before anything is touched, and survives byte for byte. The rule itself is then a property over
random folder trees (hypothesis): whatever glassformer removes from an out_dir is its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glassformer import ModelConfig, build_model
from glassformer.cli import main
from glassformer.io.fileio import (
    NotOursError,
    atomic_directory,
    atomic_write,
    check_output_file,
    owned_folder,
    run_lock,
)
from glassformer.tokenizers import BPETokenizer, CharTokenizer
from glassformer.training import save_checkpoint
from glassformer.training.run_dir import check_run_dir, clear_run, tidy_run
from training_helpers import config, train

TEXT = "hello world, a small text\n"


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` with a digest of its content (files), its target (links) or 'dir'."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("own")
    tok = BPETokenizer.train([TEXT] * 4, vocab_size=270)  # exportable to a Hugging Face folder
    model = build_model(ModelConfig.preset("gpt2-small", vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=1,
                                           d_ff=32, max_len=32))  # GPT-2's layout: convertible
    return save_checkpoint(root / "src", model, tok)


def user_files(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text("my thesis, no backup\n")
    (folder / "data").mkdir(exist_ok=True)
    (folder / "data" / "corpus.txt").write_bytes(b"\x00\x01 precious")


# ---------------------------------------------------------------------- convert
def test_convert_onto_the_sources_parent_is_refused_and_nothing_changes(tmp_path, ckpt, capsys):
    parent = tmp_path / "p"
    user_files(parent)
    src = parent / "src"
    os.system(f"cp -r {ckpt} {src}")  # noqa: S605 (a test copying a folder)
    before = snapshot(parent)
    assert main(["convert", str(src), str(parent)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "contains the source" in err
    assert snapshot(parent) == before


@pytest.mark.parametrize("kind", ["file", "user_folder", "link", "same"])
def test_convert_refuses_what_it_did_not_write(tmp_path, ckpt, capsys, kind):
    dst = tmp_path / "dst"
    if kind == "file":
        dst.write_text("a regular file where the folder would go\n")
    elif kind == "user_folder":
        user_files(dst)
    elif kind == "link":
        os.symlink(ckpt, dst)
    else:
        dst = ckpt
    before = snapshot(tmp_path), snapshot(ckpt)
    assert main(["convert", str(ckpt), str(dst)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert (snapshot(tmp_path), snapshot(ckpt)) == before
    if kind == "file":
        assert dst.is_file()


def test_convert_replaces_its_own_output_and_an_empty_folder(tmp_path, ckpt):
    dst = tmp_path / "hf"
    dst.mkdir()  # `mkdir out; glassformer convert src out` keeps working
    assert main(["convert", str(ckpt), str(dst)]) == 0
    assert owned_folder(dst)
    assert main(["convert", str(ckpt), str(dst)]) == 0  # its own export: replaced
    back = tmp_path / "back"
    assert main(["convert", str(dst), str(back)]) == 0
    assert main(["convert", str(dst), str(back)]) == 0


def test_save_checkpoint_never_replaces_a_user_folder(tmp_path, ckpt):
    from glassformer.training import load

    model, tok = load(ckpt)
    target = tmp_path / "mine"
    user_files(target)
    before = snapshot(target)
    with pytest.raises(NotOursError, match="notes.txt|data"):
        save_checkpoint(target, model, tok)
    assert snapshot(target) == before


# ---------------------------------------------------------------------- train
@pytest.mark.parametrize("name,make", [
    ("best", lambda p: user_files(p)),
    ("last", lambda p: p.write_text("a user's file called last\n")),
    ("ckpt-5", lambda p: user_files(p)),
    ("ckpt-000003", lambda p: (p.mkdir(), (p / "config.json").write_text("{}"), (p / "thesis.tex").write_text("x"))),
    ("metrics.jsonl", lambda p: p.write_text("not a metrics file\n")),
    ("loss.png", lambda p: p.write_text("not a picture\n")),
    (".last.tmp-77", lambda p: user_files(p)),
])
def test_fresh_train_refuses_user_paths_in_out_dir(tmp_path, name, make):
    out = tmp_path / "run"
    out.mkdir()
    make(out / name)
    (out / "unrelated.txt").write_text("kept\n")
    before = snapshot(out)
    with pytest.raises(NotOursError, match=name.replace(".", r"\.")):
        train(config(tmp_path, "run", max_steps=2, eval_every=0))
    after = {k: v for k, v in snapshot(out).items() if not k.startswith("cache")}  # new token cache files only
    assert after == before


def test_a_fresh_run_still_replaces_an_earlier_run(tmp_path):
    train(config(tmp_path, "run", max_steps=2, eval_every=1))
    _, result = train(config(tmp_path, "run", max_steps=2, eval_every=1))
    assert result["step"] == 2 and os.readlink(tmp_path / "run" / "last") == "ckpt-000002"


def test_a_second_trainer_of_the_same_out_dir_is_refused(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with run_lock(out), pytest.raises(NotOursError, match="in use by another glassformer process"):
        train(config(tmp_path, "run", max_steps=1, eval_every=0))
    _, result = train(config(tmp_path, "run", max_steps=1, eval_every=0))  # released: runs
    assert result["step"] == 1
    assert not (out / ".glassformer.lock").exists()


# ---------------------------------------------------------------------- translate, report, token cache
def test_translate_output_may_not_be_its_input(tmp_path, capsys):
    tok = CharTokenizer.from_text("abc de\n", specials=["pad", "bos", "eos"])
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, arch="encoder-decoder", d_model=16, n_heads=2,
                                    n_enc=1, n_dec=1, d_ff=32, max_len=16))
    ck = save_checkpoint(tmp_path / "mt", model, tok)
    source = tmp_path / "in.txt"
    source.write_text("abc\nde\n")
    before = source.read_bytes()
    assert main(["translate", str(ck), str(source), "--output", str(source)]) == 2
    assert "also an input" in capsys.readouterr().err
    assert source.read_bytes() == before
    link = tmp_path / "link.txt"
    os.symlink(source, link)
    assert main(["translate", str(ck), str(source), "--output", str(link)]) == 2
    assert main(["translate", str(ck), str(source), "--output", str(tmp_path)]) == 2  # a folder
    assert source.read_bytes() == before
    assert main(["translate", str(ck), str(source), "--output", str(tmp_path / "out.txt")]) == 0
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 2


def test_report_output_is_never_a_folder_or_a_device(tmp_path, ckpt, capsys):
    folder = tmp_path / "report.html"
    user_files(folder)
    before = snapshot(folder)
    assert main(["inspect", str(ckpt), "--text", "hello", "--out", str(folder)]) == 2
    assert snapshot(folder) == before
    with pytest.raises(NotOursError):
        check_output_file("/dev/null", (), "report")


def test_token_cache_never_overwrites_and_verifies_what_it_maps(tmp_path):
    import numpy as np

    from glassformer.data.corpus import encode_files
    from glassformer.errors import BadFileError

    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT * 4)
    tok = CharTokenizer.from_text(TEXT)
    ids = encode_files([corpus], tok, tmp_path / "cache")
    (cache,) = (tmp_path / "cache").iterdir()
    assert np.array_equal(np.asarray(ids), tok.encode_to_array(TEXT * 4))
    cache.write_bytes(cache.read_bytes()[:-1])  # truncated: not a whole number of ids
    with pytest.raises(BadFileError, match="whole number"):
        encode_files([corpus], tok, tmp_path / "cache")
    cache.write_bytes(np.full(8, 60000, dtype=np.uint16).tobytes())  # ids beyond the vocabulary
    with pytest.raises(BadFileError, match="ids >="):
        encode_files([corpus], tok, tmp_path / "cache")
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [cache.name]  # no temporary file left


def test_atomic_write_leaves_no_temp_file_when_the_disk_is_full(tmp_path):
    from glassformer.errors import GlassformerError

    target = tmp_path / "f.json"
    target.write_text('[{"prompt": "a", "text": "b"}]\n')  # generate --json's: glassformer may replace it

    def chunks():
        yield b"new"
        raise OSError(28, "No space left on device")

    with pytest.raises(GlassformerError, match="disk is full"):
        atomic_write(target, chunks())
    assert target.read_text() == '[{"prompt": "a", "text": "b"}]\n'
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


# ---------------------------------------------------------------------- the rule as a property
NAMES = ["ckpt-000001", "ckpt-000002", "ckpt-7", "last", "best", ".ckpt-000003.tmp-1-ab", ".last.tmp-9",
         ".last.old-4", "metrics.jsonl", "loss.png", "notes.txt", "cache"]
OURS = ["model.safetensors", "config.json", "tokenizer.json", "training.json", "train_state.pt"]
ENTRY = st.one_of(
    st.tuples(st.just("ours_folder"), st.lists(st.sampled_from(OURS), max_size=3, unique=True)),
    st.tuples(st.just("user_folder"), st.lists(st.sampled_from(OURS + ["a.txt", "sub"]), min_size=1, max_size=3,
                                               unique=True)),
    st.tuples(st.just("link"), st.sampled_from(["ckpt-000001", "ckpt-000002", "../elsewhere", "notes.txt"])),
    st.tuples(st.just("file"), st.binary(max_size=16)),
)


def build(out: Path, tree: dict[str, tuple]) -> None:
    out.mkdir()
    for name, (kind, content) in tree.items():
        path = out / name
        if kind in ("ours_folder", "user_folder"):
            path.mkdir()
            for file in content:
                if file == "sub":
                    (path / file).mkdir()
                else:
                    (path / file).write_bytes(b"x")
        elif kind == "link":
            os.symlink(content, path)
        else:
            path.write_bytes(content)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=st.dictionaries(st.sampled_from(NAMES), ENTRY, max_size=6))
def test_only_glassformers_own_paths_are_ever_removed(tmp_path_factory, tree):
    out = tmp_path_factory.mktemp("tree") / "out"
    build(out, tree)
    before = snapshot(out)
    try:
        check_run_dir(out)
        accepted = True
    except NotOursError:
        accepted = False
    if not accepted:  # refused: clearing and tidying refuse too, and nothing changed
        for act in (lambda: clear_run(out), lambda: tidy_run(out, keep=[])):
            with contextlib.suppress(NotOursError):
                act()
        # tidy_run may remove its own entries before meeting a user's; every removed one must be ours
    else:
        clear_run(out)
    after = snapshot(out)
    for rel, digest in before.items():
        if rel in after:
            assert after[rel] == digest, rel
            continue
        top = (out / rel.split("/")[0])
        kind, content = tree[rel.split("/")[0]]
        # removed: it must have been glassformer's own (a checkpoint folder of its files, or a pointer it makes)
        ours = (kind.endswith("folder") and set(content) <= set(OURS)) or (
            kind == "link" and content.startswith("ckpt-"))
        assert ours, (rel, kind, content, accepted)
        assert not top.exists() or top.is_dir()
    if not accepted:
        assert tree, "an empty out_dir is always accepted"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=st.dictionaries(st.sampled_from(["m", "m/x", "notes"]), ENTRY, max_size=3))
def test_atomic_directory_replaces_only_its_own_folders(tmp_path_factory, tree):
    root = tmp_path_factory.mktemp("dst")
    build(root / "d", {k: v for k, v in tree.items() if "/" not in k})
    target = root / "d" / "m"
    before = snapshot(root)
    ours = not target.exists() and not target.is_symlink() or owned_folder(target)
    try:
        with atomic_directory(target) as temp:
            (temp / "config.json").write_text('{"vocab_size": 8}')  # what a checkpoint's config holds
    except NotOursError:
        assert not ours
        assert snapshot(root) == before
        return
    assert ours and owned_folder(target)
    assert {k: v for k, v in snapshot(root).items() if not k.startswith("d/m")} == \
        {k: v for k, v in before.items() if not k.startswith("d/m")}


def test_user_files_survive_every_writer_byte_for_byte(tmp_path, ckpt):
    """One tree with user files where each writer writes; each refuses and every byte is kept."""
    from glassformer.interop.hf_dir import save_hf_dir
    from glassformer.training import load

    model, tok = load(ckpt)
    root = tmp_path / "tree"
    user_files(root / "run" / "best")
    (root / "run" / "last").write_text("mine\n")
    user_files(root / "run" / "ckpt-5")
    user_files(root / "export")
    (root / "file").write_text("a file where a folder goes\n")
    before = snapshot(root)
    with pytest.raises(NotOursError):
        clear_run(root / "run")
    for target in (root / "export", root / "file", root / "run" / "best"):
        with pytest.raises(NotOursError):
            save_checkpoint(target, model, tok)
        with pytest.raises(NotOursError):
            save_hf_dir(model, tok, target)
    with pytest.raises(NotOursError):
        atomic_write(root / "export", "text")
    assert snapshot(root) == before
    torch.manual_seed(0)


# ---------------------------------------------------------------------- JSON: glassformer's own records only
USERS_JSON = {  # a user's JSON under names glassformer writes (or one the user gives it): never replaced
    "package.json": b'{"name": "mine", "version": "1.0.0", "dependencies": {}}\n',
    "summary.json": b'{"step": 3, "my": "experiment log"}\n',
    "tokenizer.json": b'{"my": "tokenizer notes"}\n',
    "bench.json": b'{"results": [1, 2, 3]}\n',
    "g.json": b'[1, 2, 3]\n',
    "rows.json": b'[{"prompt": "mine"}]\n',
    "kernel-choices.json": b'{"my": "cache"}\n',
    "training.json": b'{"epochs": 3}\n',
}


@pytest.mark.parametrize("name", sorted(USERS_JSON))
def test_a_users_json_is_not_glassformers(tmp_path, name):
    """Valid JSON is not enough: glassformer replaces a JSON file only when it holds one of its own records."""
    path = tmp_path / name
    path.write_bytes(USERS_JSON[name])
    with pytest.raises(NotOursError, match="did not write"):
        atomic_write(path, "{}")
    assert path.read_bytes() == USERS_JSON[name]


def test_a_users_json_survives_generate_and_convert(tmp_path, ckpt, capsys):
    """``generate --json package.json`` and a convert destination holding a user's tokenizer.json: one line each,
    every byte kept."""
    package = tmp_path / "package.json"
    package.write_bytes(USERS_JSON["package.json"])
    dest = tmp_path / "export"
    dest.mkdir()
    (dest / "tokenizer.json").write_bytes(USERS_JSON["tokenizer.json"])
    before = snapshot(tmp_path)
    for argv in (["generate", str(ckpt), "--prompt", "he", "--max_new_tokens", "1", "--json", str(package)],
                 ["convert", str(ckpt), str(dest)]):
        assert main(argv) == 2
        assert capsys.readouterr().err.count("glassformer: error:") == 1
    assert snapshot(tmp_path) == before


def test_glassformers_own_json_is_recognised(tmp_path, ckpt, capsys):
    """What glassformer writes it may write again: a config, each tokenizer kind, a Hugging Face export,
    generate's JSON, a run summary, records of older versions kept in tests."""
    from glassformer.io.fileio import recognised
    from glassformer.training import load

    model, tok = load(ckpt)
    written = [model.config.to_json(tmp_path / "config-copy.json") and tmp_path / "config-copy.json"]
    for kind in (tok, CharTokenizer.from_text(TEXT, specials=["pad"])):
        kind.save(tmp_path / f"{type(kind).__name__}.json")
        written.append(tmp_path / f"{type(kind).__name__}.json")
    assert main(["convert", str(ckpt), str(tmp_path / "hf")]) == 0
    written += sorted((tmp_path / "hf").glob("*.json"))
    g = tmp_path / "g.json"
    for _ in range(2):  # the second run replaces the first one's file
        assert main(["generate", str(ckpt), "--prompt", "he", "--max_new_tokens", "1", "--json", str(g)]) == 0
    capsys.readouterr()
    written.append(g)
    (tmp_path / "summary.json").write_text('{"step": 2, "stopped": "max_steps", "train_loss": null}\n')
    written.append(tmp_path / "summary.json")
    assert {p.name: recognised(p) for p in written} == {p.name: True for p in written}


def test_replay_never_replaces_a_trainings_microscope_records(tmp_path):
    """``replay_checkpoints(run, run)``: the run folder holds the checkpoints read and the training's own
    microscope.jsonl (its records became one); refused before any checkpoint is loaded, every byte kept."""
    from glassformer.training.replay import replay_checkpoints

    train(config(tmp_path, max_steps=2, eval_every=2, eval_batches=1, watch={"every": 1, "probe_length": 3,
                                                                               "probe_batch": 2}))
    run = tmp_path / "run"
    assert len((run / "microscope.jsonl").read_text().splitlines()) == 3
    before = snapshot(tmp_path)
    for checkpoints, out in ((run, run), (run / "ckpt-000002", run), (run / "ckpt-000002", run / "ckpt-000002"),
                             ([run / "ckpt-000002"], tmp_path)):
        with pytest.raises(NotOursError):
            replay_checkpoints(checkpoints, out)
    assert snapshot(tmp_path) == before
    assert [r["step"] for r in replay_checkpoints(run, tmp_path / "replayed")] == [2]  # elsewhere: replayed

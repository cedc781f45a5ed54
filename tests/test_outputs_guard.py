"""One way out: every file a command declares (``WRITES`` in ``glassformer/cli/commands/<verb>.py``) is
guarded. At each declared output this test puts, in turn, a user's file (and, at a JSON output, a user's
JSON object and list), a symbolic link to one, a hard link to one, a FIFO and (for an output named on the
command line) each of the command's inputs; the command must fail with one line and everything must
survive byte for byte. A new verb, or a new file of an old one, is covered by declaring it: no new test code.

The library's own writers are found by reading its source (every function that writes, directly or through
a function of its module): each public one is either tried here with the same hazards (:data:`API_WRITERS`)
or named with the verb whose ``WRITES`` covers it; a raw write (``write_text``, ``open(..., "w")``) is
allowed only into what glassformer has just made. A new writer fails the test until it is declared.
"""

from __future__ import annotations

import ast
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
from glassformer.interpret.transcoders import random_transcoders, save_transcoders
from glassformer.io.fileio import Writes
from glassformer.tokenizers import CharTokenizer
from glassformer.training import save_checkpoint

TEXT = "hello world, a small text\nabcabc\n"
USER = b"a user's own notes: glassformer must never touch them\n"
FORTUNES = Path(__file__).parent / "fixtures" / "fortunes" / "tang300"
USER_JSON = b'{"my": "own notes", "in": ["json", "too"]}\n'
USER_LIST = b'[{"my": "rows"}, 1, 2]\n'
HAZARDS = ("user file", "symlink", "hardlink", "fifo")  # and a user's JSON object and list at a .json output


def declared() -> list[tuple[str, Writes]]:
    """Every (verb, Writes) the commands declare; a verb without WRITES fails the test below."""
    return [(verb, case) for verb in VERBS
            for case in getattr(importlib.import_module(f"glassformer.cli.commands.{verb}"), "WRITES", ())]


def test_every_verb_declares_what_it_writes():
    missing = [v for v in VERBS if not hasattr(importlib.import_module(f"glassformer.cli.commands.{v}"), "WRITES")]
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
    elif hazard == "user json list":
        path.write_bytes(USER_LIST)
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
    for hazard in HAZARDS + (("user json", "user json list") if file.endswith(".json") else ()):
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
    from glassformer.interpret.sae import identity_sae, save_sae
    from glassformer.io.fileio import atomic_write
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


# ---------------------------------------------------------------------- the library's writers (found by reading it)
PACKAGE = Path(importlib.import_module("glassformer").__file__).parent
RAW = {"write_text", "write_bytes", "save_file", "savefig", "open"}  # writes no guard sees ("open": for writing)
GUARDED = {"atomic_write", "atomic_directory", "new_directory", "replace_symlink",
           "write_page"}  # write_page: viz.page's atomic_write of an HTML page


def _calls(function: ast.AST) -> set[str]:
    """The names a function calls; ``open`` only when it opens for writing or appending."""
    found = set()
    for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
        if name == "open":
            modes = [a.value for a in [*call.args[1:2], *(k.value for k in call.keywords if k.arg == "mode")]
                     if isinstance(a, ast.Constant)]
            if not any(isinstance(m, str) and set(m) & set("wax+") for m in modes):
                continue
        if name:
            found.add(name)
    return found


def library_writers() -> dict[str, set[str]]:
    """"module.qualname" -> how it writes (a write call, or ``other()``: a function of its module that writes) for
    every function of glassformer outside ``cli.commands`` (covered by WRITES), ``lessons`` and ``io.fileio`` (the
    guard)."""
    found: dict[str, set[str]] = {}
    for file in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(file.relative_to(PACKAGE).with_suffix("").parts)
        if module.startswith(("cli.commands", "lessons")) or module == "io.fileio":
            continue
        functions: dict[str, set[str]] = {}

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    functions[prefix + child.name] = _calls(child)  # noqa: B023 (used at once)

        visit(ast.parse(file.read_text(encoding="utf-8")), "")
        writes = {name: calls & (RAW | GUARDED) for name, calls in functions.items()}
        grown = True
        while grown:  # through the module's own functions and methods (``_save``, ``self._log``)
            grown = False
            for name, calls in functions.items():
                via = {f"{other}()" for other, how in writes.items() if how and other != name and (
                    other in calls or (other.rsplit(".", 1)[-1] in calls and "." in other
                                       and other.rsplit(".", 1)[0] == name.rsplit(".", 1)[0]))}
                if not via <= writes[name]:
                    writes[name] |= via
                    grown = True
        found.update({f"{module}.{name}": how for name, how in writes.items() if how})
    return found


# Raw writes into what glassformer has just made (nothing of a user's can be there) or appends to a file the
# guard claimed when the run began.
RAW_INTO_OWN = {
    "interop.hf_dir.save_hf_dir": "into atomic_directory's temporary folder",
    "interpret.sae.model._write": "into save_sae's temporary folder",
    "training.checkpoint._write_files": "into save_checkpoint's / commit_checkpoint's temporary folder",
    "training.trackers._write_state": "a new temporary name (open 'x') renamed over the claimed tracker.json",
    "viz.plots.save_figure": "savefig into a BytesIO, then atomic_write",
    "training.microscope.Microscope.record": "appends to microscope.jsonl, which start() wrote by atomic_write",
    "training.loop.Trainer._log": "appends to metrics.jsonl, claimed and rewritten when the run starts",
    "interpret.transcoders.format.write_transcoder_files": "each file claimed first; its callers stage a new folder",
}
# Public writers of a run's own files: covered by the verb whose WRITES declares them.
BY_VERB = {
    "data.corpus.encode_files": "train", "data.prepare.prepare": "prepare",
    "training.microscope.Microscope.start": "train",
    "training.microscope.Microscope.record": "train",
    "interpret.sae.run.run_sae": "sae", "interpret.sae.run.train_sae": "sae", "recipes.corpora.download": "recipe",
    "recipes.corpora.corpus_file": "recipe", "recipes.corpora.tinyshakespeare": "recipe", "recipes.corpora.multi30k":
    "recipe", "recipes.corpora.multi30k_pairs": "recipe", "recipes.induction.run_induction": "recipe",
    "recipes.run.run_recipe": "recipe", "runtime.kernel_choice.choose": "generate",
    "runtime.kernel_choice.reset_choices": "bench", "training.checkpoint.commit_checkpoint": "train",
    "training.loop.Trainer.train": "train", "training.loop.Trainer.train_step": "train",
    "training.resume.tidy_run_dir": "train", "training.run_dir.recover_run": "train",
    "training.run_dir.point_and_tidy": "train",
    "training.trackers.Trackers.log": "train", "training.trackers.open_trackers": "train",
    "interpret.sae.loop.ActivationTrainer.train": "sae", "interpret.sae.loop.ActivationTrainer.save_state": "sae",
    "interpret.transcoders.run.run_transcoders": "transcoders", "interpret.transcoders.run.train_transcoders":
    "transcoders", "interpret.transcoders.format.write_transcoder_files": "transcoders",
    "interpret.transcoders.format.save_transcoders": "transcoders", "viz.report_sae.write_transcoder_pages":
    "transcoders", "interpret.graph.files.save_graph_pt": "graph", "viz.report_graph.write_graph_page": "graph",
}


def _public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


@pytest.fixture(scope="module")
def api(inputs) -> dict[str, object]:
    """What the writers below are called with: a model, its tokenizer, a circuit, an SAE, a run folder."""
    from glassformer.interpret.circuits import Circuit
    from glassformer.interpret.sae import identity_sae
    from glassformer.tokenizers import BPETokenizer
    from glassformer.training import load

    model, tok = load(inputs["ck"])
    bpe = BPETokenizer.train([TEXT * 4], vocab_size=270)
    return {"model": model, "tok": tok, "hf": bpe.to_hf() if hasattr(bpe, "to_hf") else None, "bpe": bpe,
            "circuit": Circuit([("embed", "logits", 1.0)], 1.0, 1.0, 1.0, 0.0, "attribution", 1),
            "sae": identity_sae(16), "run": inputs["run"]}


def _feature_summary() -> dict:
    return {"hook": "blocks.0.hook_resid_post", "kind": "topk", "d_sae": 1, "tokens": 1, "features": [], "dead": []}


# Each public writer of a file at a path the caller gives: (call writing at ``out``, whether ``out`` is a folder).
API_WRITERS = {
    "config.ModelConfig.to_json": (lambda a, out: a["model"].config.to_json(out), False),
    "tokenizers.base.Tokenizer.save": (lambda a, out: a["tok"].save(out), False),
    "tokenizers.hf.HFTokenizer.save_hf": (lambda a, out: _hf_tokenizer(a).save_hf(out.parent), False),
    "viz.plots.plot_losses": (lambda a, out: _plots().plot_losses([{"step": 1, "train_loss": 2.0}], out), False),
    "viz.plots.save_figure": (lambda a, out: _plots().save_figure(_plots().pyplot().figure(), out), False),
    "viz.plots.plot_attention": (lambda a, out: _plots().plot_attention(torch.full((2, 2), 0.5), ["a", "b"], out),
                                 False),
    "viz.page.write_page": (lambda a, out: _viz("page").write_page(out, "<!doctype html><p>page"), False),
    "viz.report.Report.save": (lambda a, out: _viz("report").Report("<!doctype html><p>page").save(out), False),
    "viz.report.write_report": (lambda a, out: _viz("report").write_report(a["model"], a["tok"], "ab", out=out,
                                                                           generate=0), False),
    "viz.report_circuit.write_circuit_page": (lambda a, out: _viz("report_circuit").write_circuit_page(a["circuit"],
                                                                                                       out), False),
    "viz.report_run.write_run_page": (lambda a, out: _viz("report_run").write_run_page(a["run"], out), False),
    "viz.report_sae.write_feature_pages": (lambda a, out: _viz("report_sae").write_feature_pages(_feature_summary(),
                                                                                                 out), False),
    "recipes.corpora.write_poem_text": (lambda a, out: importlib.import_module("glassformer.recipes.corpora")
                                        .write_poem_text([_poem()], out), False),
    "training.checkpoint.save_checkpoint": (lambda a, out: save_checkpoint(out, a["model"], a["tok"]), True),
    "interop.hf_dir.save_hf_dir": (lambda a, out: importlib.import_module("glassformer.interop.hf_dir")
                                   .save_hf_dir(a["model"], a["tok"], out), True),
    "interpret.sae.model.save_sae": (lambda a, out: importlib.import_module("glassformer.interpret.sae")
                                     .save_sae(a["sae"], out), True),
    "training.replay.replay_checkpoints": (lambda a, out: importlib.import_module("glassformer.training.replay")
                                           .replay_checkpoints([a["ck"]], out.parent), False),
}
API_OUTPUT = {"tokenizers.hf.HFTokenizer.save_hf": "tokenizer.json", "training.replay.replay_checkpoints":
              "microscope.jsonl"}  # a writer of a folder's files: the file the hazards go at


def _plots():
    return importlib.import_module("glassformer.viz.plots")


def _viz(name: str):
    return importlib.import_module(f"glassformer.viz.{name}")


def _poem():
    from glassformer.recipes.corpora import Poem

    return Poem("t", "a", ["line"])


def _hf_tokenizer(a: dict):
    from glassformer.tokenizers.hf import HFTokenizer

    return HFTokenizer(a["bpe"].hf, {})


def test_raw_writes_go_only_into_what_glassformer_made():
    """``write_text``, ``write_bytes``, ``save_file``, ``savefig``, ``open(..., "w")`` outside fileio: only where
    :data:`RAW_INTO_OWN` says why nothing of a user's can be there; every other write goes through the guard."""
    raw = {name for name, how in library_writers().items() if how & RAW}
    assert raw == set(RAW_INTO_OWN), f"write through io.fileio.atomic_write instead: {raw - set(RAW_INTO_OWN)}"


def test_every_public_writer_is_tried_or_covered_by_a_verb():
    """A public function that writes (found by reading the source) is tried below, or a verb's WRITES covers it."""
    public = {name for name in library_writers() if _public(name)}
    undeclared = public - set(API_WRITERS) - set(BY_VERB)
    assert not undeclared, f"add to API_WRITERS (how to call it) or BY_VERB (the verb that covers it): {undeclared}"
    assert set(BY_VERB) <= public and set(BY_VERB.values()) <= set(VERBS), set(BY_VERB) - public  # none stale
    # tried though found through another module (write_report -> Report.save, replay_checkpoints -> replay)
    assert set(API_WRITERS) - public == {"viz.report.write_report", "training.replay.replay_checkpoints"}


API_HAZARDS = ("user file", "user json", "user json list", "symlink", "hardlink", "fifo", "checkpoint weights")


@pytest.mark.parametrize("name", sorted(API_WRITERS))
def test_api_writer_is_guarded(name, api, inputs, tmp_path):
    """Each hazard where a library writer writes: a GlassformerError (NotOursError), nothing anywhere changed."""
    from glassformer.errors import GlassformerError

    call, folder = API_WRITERS[name]
    args = {**api, "ck": inputs["ck"]}
    for hazard in API_HAZARDS:
        work = tmp_path / hazard.replace(" ", "_")
        user = work / "mine" / "precious.txt"
        user.parent.mkdir(parents=True)
        user.write_bytes(USER)
        out = work / "out" / (API_OUTPUT.get(name, "written.json"))
        weights = inputs["ck"] / "model.safetensors"
        if hazard == "checkpoint weights":  # a checkpoint's own file as the output: refused, never overwritten
            out = weights if not folder else inputs["ck"].parent
        elif folder:  # a folder holding a user's file (or link, FIFO...) where the writer puts its folder
            _place(hazard, out / "config.json", user)
        else:
            _place(hazard, out, user)
        before = _snapshot(work), _snapshot(inputs["ck"].parent)
        with pytest.raises((GlassformerError, FileExistsError)):
            call(args, out)
        assert (_snapshot(work), _snapshot(inputs["ck"].parent)) == before, f"{name}: {hazard}"

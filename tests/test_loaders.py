"""One way in (issue 31): each file glassformer reads is checked where it enters, and whatever a
third-party reader raises (a Rust panic included) is one glassformer error naming the file."""

from __future__ import annotations

import json

import pytest
import torch

import glassformer.tokenizers.hf as hf_module
from glassformer import ModelConfig, build_model
from glassformer.cli import main
from glassformer.errors import BadFileError, GlassformerError
from glassformer.io.loaders import check_tokenizer_json
from glassformer.tokenizers import BPETokenizer
from glassformer.tokenizers.hf import HFTokenizer
from glassformer.training import save_checkpoint

TEXT = "hello world, a small text for a tiny tokenizer\n"


@pytest.fixture(scope="module")
def bpe_checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe")
    tok = BPETokenizer.train([TEXT] * 10, 270, ["bos", "eos", "pad"])
    config = ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=16)
    return save_checkpoint(root / "ck", build_model(config), tok)


def _edit_tokenizer(folder, change):
    file = folder / "tokenizer.json"
    data = json.loads(file.read_text(encoding="utf-8"))
    change(data.get("hf", data))
    file.write_text(json.dumps(data), encoding="utf-8")


def test_a_huge_padding_length_is_refused_before_the_rust_library_sees_it(bpe_checkpoint, tmp_path, capsys):
    """Issue 31: padding.strategy.Fixed = 2**40 aborted the process inside tokenizers."""
    import shutil

    folder = tmp_path / "ck"
    shutil.copytree(bpe_checkpoint, folder)
    _edit_tokenizer(folder, lambda hf: hf.update(padding={"strategy": {"Fixed": 2 ** 40}, "direction": "Right",
                                                          "pad_to_multiple_of": None, "pad_id": 0,
                                                          "pad_type_id": 0, "pad_token": "[PAD]"}))
    assert main(["generate", str(folder), "--prompt", "hello", "--max_new_tokens", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "padding.strategy.Fixed" in err and "tokenizer" in err, err


@pytest.mark.parametrize("padding", [{"strategy": {"Fixed": -1}}, {"strategy": {"Fixed": "8"}}, [1, 2],
                                     {"strategy": "BatchLongest", "pad_to_multiple_of": 2 ** 40}])
def test_bad_padding_values_are_one_error(padding):
    with pytest.raises(BadFileError, match="padding"):
        check_tokenizer_json({"padding": padding}, "tokenizer.json")


def test_a_rust_panic_becomes_one_glassformer_error(tmp_path, monkeypatch):
    """pyo3's PanicException derives from BaseException: ``except Exception`` let it through."""
    class PanicException(BaseException):
        pass

    def panic(_text):
        raise PanicException("called `Option::unwrap()` on a `None` value")

    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}}), encoding="utf-8")
    monkeypatch.setattr(hf_module.RustTokenizer, "from_str", staticmethod(panic))
    with pytest.raises(GlassformerError, match="tokenizer.json.*unwrap"):
        HFTokenizer.from_dir(folder)


def test_a_state_file_inflating_past_its_size_is_refused_before_torch_load(tmp_path):
    """Issue 31: a 3 MB train_state.pt whose record deflates to 3 GB cost 3.4 GB before the refusal."""
    import zipfile

    from glassformer.io.loaders import load_state_file

    file = tmp_path / "train_state.pt"
    torch.save({"step": 1}, file)
    with zipfile.ZipFile(file) as archive:
        records = [(info.filename, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in records:
            archive.writestr(name, data + (b"\0" * (1 << 22) if name.endswith("data.pkl") else b""))
    with pytest.raises(BadFileError, match="refused before reading"):
        load_state_file(file)


def test_a_state_file_whose_zip_version_zipfile_cannot_read_is_refused(tmp_path):
    """A record's "version needed" past zipfile's (hypothesis found 6.4 by one flipped byte) hid its sizes from the
    check and raised NotImplementedError; torch.load ignores it and would inflate the record."""
    from glassformer.io.loaders import load_state_file

    file = tmp_path / "train_state.pt"
    torch.save({"step": 1}, file)
    content = bytearray(file.read_bytes())
    central = content.index(b"PK\x01\x02")  # the first central directory entry; its version needed at +6
    content[central + 6] = 64
    file.write_bytes(bytes(content))
    with pytest.raises(BadFileError, match="zip file version 6.4.*refused before reading"):
        load_state_file(file)


def test_a_5000_digit_number_in_a_json_or_yaml_file_is_one_line(bpe_checkpoint, tmp_path, capsys):
    """Issue 31: Python's int-str limit raised a ValueError deep inside json and yaml."""
    import shutil

    folder = tmp_path / "ck"
    shutil.copytree(bpe_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps(config)[:-1] + ', "d_model": ' + "9" * 5000 + "}")
    assert main(["generate", str(folder), "--prompt", "hello", "--max_new_tokens", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config.json" in err and "digits" in err, err
    (tmp_path / "train.yaml").write_text("max_steps: " + "9" * 5000 + "\n", encoding="utf-8")
    assert main(["train", "--config", str(tmp_path / "train.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train.yaml" in err and "digits" in err, err


@pytest.mark.parametrize("line", ['{"step": 2, "train_loss": "abc"}', '{"step": -3, "val_loss": 1.0}',
                                  '{"step": 2, "lr": [1]}', '{"step": true, "train_loss": 1.0}'])
def test_a_crafted_metrics_line_in_a_run_folder_is_one_line(tmp_path, capsys, line):
    """Issue 31: ``inspect RUN_DIR`` with "train_loss": "abc" in metrics.jsonl was a traceback."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "train_loss": 3.0}\n' + line + '\n{"step": 3, "val_loss": 2.0}\n')
    assert main(["inspect", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "metrics.jsonl" in err and "line 2" in err, err
    assert not (run / "run.html").exists()


def test_a_home_folder_in_yaml_paths_is_expanded(tmp_path, monkeypatch):
    """Issue 31: YAML ``out_dir: ~/x`` made a folder named ``~``."""
    from glassformer.interpret.sae import SAETrainConfig
    from glassformer.training import TrainConfig

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "train.yaml").write_text("out_dir: ~/runs/x\ndata: [~/corpus.txt]\ncache_dir: ~/cache\n")
    config = TrainConfig.from_yaml(tmp_path / "train.yaml")
    assert config.out_dir == str(tmp_path / "runs" / "x") and config.data == [str(tmp_path / "corpus.txt")]
    assert config.cache_dir == str(tmp_path / "cache")
    sae = SAETrainConfig.from_dict({"hook": "blocks.0.hook_resid_post", "data": ["~/a.txt"], "out_dir": "~/sae"})
    assert sae.out_dir == str(tmp_path / "sae") and sae.data == [str(tmp_path / "a.txt")]


@pytest.mark.parametrize("dtype", [torch.int8, torch.bool])
def test_hf_weights_that_are_not_floating_point_are_refused(tmp_path, dtype):
    """Issue 31: HF int8/bool weights were cast to float without a word."""
    from safetensors.torch import load_file, save_file

    from glassformer.interop.hf_dir import load_hf_dir, save_hf_dir

    config = ModelConfig(vocab_size=40, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=16, pos="learned",
                         activation="gelu_tanh", scale_embeddings=False)
    folder = save_hf_dir(build_model(config), None, tmp_path / "hf")
    weights = load_file(str(folder / "model.safetensors"))
    name = next(n for n in weights if n.endswith("mlp.c_fc.weight"))
    weights[name] = weights[name].to(dtype)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(GlassformerError, match=f"{name}.*not floating point"):
        load_hf_dir(folder)


@pytest.mark.parametrize(("name", "content"), [("microscope.json", "[1, 2]"), ("microscope.json", "{bad"),
                                               ("attribution.json", '{"x": ' + "7" * 5000 + "}")])
def test_a_crafted_json_file_in_a_run_folder_is_one_line(tmp_path, capsys, name, content):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "train_loss": 3.0}\n')
    from glassformer.interpret.attribution import ATTRIBUTION

    (run / (ATTRIBUTION if name == "attribution.json" else name)).write_text(content)
    assert main(["inspect", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "glassformer: error:" in err, err


def test_json_text_and_pairs_lines_with_a_5000_digit_number_are_one_error(tmp_path):
    from glassformer.data.seq2seq import read_pairs

    with pytest.raises(BadFileError, match="digits"):
        ModelConfig.from_json('{"d_model": ' + "9" * 5000 + "}")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"src": "a", "tgt": "b"}\n{"src": ' + "1" * 5000 + ', "tgt": "c"}\n', encoding="utf-8")
    with pytest.raises(BadFileError, match="pairs.jsonl:2.*digits"):
        read_pairs(pairs=pairs)


@pytest.fixture(scope="module")
def watched_run(tmp_path_factory):
    """A real run folder with microscope records (1 layer, 2 heads, 3 records)."""
    from training_helpers import config, train

    root = tmp_path_factory.mktemp("watched")
    watch = {"every": 2, "probe_length": 3, "probe_batch": 2, "text_rows": 2, "snapshot_tokens": 6}
    train(config(root, max_steps=4, watch=watch))
    return root / "run"


def _set(key, value):
    return lambda record: record.update({key: value})


@pytest.mark.parametrize("change", [
    _set("loss_first", "abc"), _set("induction", [[0.1]]), _set("induction", [[0.1, "x"]]), _set("lens_loss", []),
    _set("attention", {"0.0": [[1.0]]}), lambda r: r.pop("entropy"), _set("extra", 1.0), _set("entropy", [[1.0], 2.0]),
], ids=["string", "fewer-heads", "string-in-list", "empty", "smaller-map", "missing", "extra-key", "ragged"])
def test_a_crafted_microscope_record_is_one_line_and_a_real_one_draws(watched_run, tmp_path, capsys, change):
    """Issue 31: 38 crafted run folders were tracebacks from the run page."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(watched_run, run, symlinks=True)
    assert main(["inspect", str(run)]) == 0 and (run / "run.html").is_file()
    capsys.readouterr()
    lines = (run / "microscope.jsonl").read_text().splitlines()
    record = json.loads(lines[-2])
    change(record)
    lines[-2] = json.dumps(record)
    (run / "microscope.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["inspect", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "microscope.jsonl" in err and f"line {len(lines) - 1}" in err, err

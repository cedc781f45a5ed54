"""One error type of our own: the command line prints user mistakes as one line and lets bugs show.

``glassformer.cli.main`` prints a GlassformerError (bad input, bad file, bad config) or an OSError (the
environment: a permission, a folder where a file belongs) as ``glassformer: error: ...`` with exit status
2; argparse's usage errors are one line too; every other exception is a bug and keeps its traceback.
Then each case of issue 14, run in-process, is one line naming the value, the key or the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import glassformer.cli.commands.convert as convert_verb
from glassformer import ModelConfig, build_model
from glassformer.cli import main
from glassformer.errors import BadFileError, GlassformerError
from glassformer.interop.hf_dir import save_hf_dir
from glassformer.tokenizers import BPETokenizer, CharTokenizer
from glassformer.training import save_checkpoint

TEXT = "hello world, a small text\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Tiny checkpoints (decoder, encoder-decoder, encoder), a Hugging Face folder and a text file."""
    root = tmp_path_factory.mktemp("cli")
    torch.manual_seed(0)
    tok = CharTokenizer.from_text(TEXT, specials=["pad", "bos", "eos"])
    small = dict(vocab_size=tok.vocab_size, d_model=16, n_heads=2, d_ff=32, max_len=32)
    out = {
        "lm": save_checkpoint(root / "lm", build_model(ModelConfig(**small, n_layers=1, pos="learned")), tok),
        "encdec": save_checkpoint(root / "encdec", build_model(ModelConfig(**small, arch="encoder-decoder", n_enc=1,
                                                                           n_dec=1)), tok),
        "encoder": save_checkpoint(root / "encoder", build_model(ModelConfig(**small, n_layers=1,
                                                                             attn="bidirectional")), tok),
    }
    bpe = BPETokenizer.train([TEXT] * 20, 300, ["bos", "eos", "pad"])
    gpt2 = ModelConfig(vocab_size=bpe.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=32, pos="learned",
                       activation="gelu_tanh", scale_embeddings=False)
    out["hf"] = save_hf_dir(build_model(gpt2), bpe, root / "hf")
    out["text"] = root / "src.txt"
    out["text"].write_text("hello world\nsmall\n", encoding="utf-8")
    out["root"] = root
    return out


def one_line(capsys, argv: list[str], *expected: str) -> str:
    """Run ``glassformer argv``; assert exit status 2 and one stderr line holding each expected text."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("glassformer"), err
    for text in expected:
        assert text in err, (text, err)
    return err


# ------------------------------------------------------------------------------------------ the rule
def _raising(error: BaseException):
    def run(args):
        raise error
    return run


@pytest.mark.parametrize("error", [ValueError("a bug"), TypeError("a bug"), RuntimeError("a bug"),
                                   KeyError("a bug"), IndexError("a bug"), UnicodeDecodeError("utf-8", b"", 0, 1, "x")])
def test_bugs_keep_their_traceback(monkeypatch, tmp_path, error):
    monkeypatch.setattr(convert_verb, "run", _raising(error))
    with pytest.raises(type(error)):
        main(["convert", str(tmp_path), str(tmp_path / "out")])


@pytest.mark.parametrize("error, expected", [
    (GlassformerError("d_model must be\nan int"), "glassformer: error: d_model must be an int"),
    (BadFileError("x.json is not valid JSON"), "glassformer: error: x.json is not valid JSON"),
    (PermissionError(13, "Permission denied", "/root/secret"), "glassformer: error: Permission denied: '/root/secret'"),
    (IsADirectoryError(21, "Is a directory", "out.json"), "glassformer: error: Is a directory: 'out.json'"),
    (FileNotFoundError(2, "No such file or directory", "a", None, "b"),
     "glassformer: error: No such file or directory: 'a' -> 'b'"),
    (OSError(28, "No space left on device"), "glassformer: error: No space left on device"),
])
def test_user_and_environment_errors_are_one_line(monkeypatch, tmp_path, capsys, error, expected):
    monkeypatch.setattr(convert_verb, "run", _raising(error))
    assert one_line(capsys, ["convert", tmp_path, tmp_path / "out"]) == expected + "\n"


@pytest.mark.parametrize("argv, expected", [
    (["nope"], "argument VERB: invalid choice: 'nope'"),
    (["generate", "ck", "--prompt", "a", "--max_new_tokens", "1e9"], "invalid int value: '1e9'"),
    (["generate", "ck"], "the following arguments are required: --prompt"),
    (["embed", "--model"], "expected one argument"),
    (["convert", "a", "b", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_usage_errors_are_one_line(capsys, argv, expected):
    one_line(capsys, argv, expected, "--help")


def test_an_os_error_from_a_real_verb_names_the_file(files, capsys):
    folder = files["root"] / "a-folder"
    folder.mkdir()
    one_line(capsys, ["generate", files["lm"], "--prompt", "hello", "--max_new_tokens", "2", "--json", folder],
             "Is a directory", str(folder))


# ------------------------------------------------------------------------------------------ issue 14, case by case
def test_absurd_lengths_are_one_line_at_once(files, capsys):
    one_line(capsys, ["translate", files["encdec"], files["text"], "--max_new_tokens", "1000000000"],
             "--max_new_tokens=1000000000 is more than glassformer generates in one call")
    one_line(capsys, ["generate", files["lm"], "--prompt", "hello", "--max_new_tokens", "1000000000"],
             "--max_new_tokens=1000000000")
    one_line(capsys, ["inspect", files["lm"], "--text", "hello", "--generate", "100000000",
                      "--out", files["root"] / "r.html"], "--generate must be an int in [0, 1024], got 100000000")
    assert not (files["root"] / "r.html").exists()


def test_empty_text_to_embed(files, capsys):
    one_line(capsys, ["embed", "--model", files["encoder"], "hello", ""], "TEXT 2 is empty")


@pytest.mark.parametrize("yaml_text, expected", [
    ("device: tpu\n", "device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'tpu'"),
    ("lr: .nan\n", "lr must be a finite number > 0.0, got nan"),
    ("weight_decay: .inf\n", "weight_decay must be a finite number >= 0.0, got inf"),
    ("grad_clip: .nan\n", "grad_clip must be a finite number >= 0.0, got nan"),
    ("label_smoothing: .nan\n", "label_smoothing must be a finite number"),
    ("model: {norm_eps: .nan}\n", "model: norm_eps must be a finite number > 0.0, got nan"),
    ("model: {dropout: .inf}\n", "model: dropout must be a finite number >= 0.0 and < 1.0, got inf"),
    ("model: {rope_theta: -.inf, pos: rope}\n", "model: rope_theta must be a finite number > 0.0"),
    ("lr: 1" + "0" * 400 + "\n", "lr must be a finite number, got an int of about 401 digits"),
    ("seed: -1\n", "seed must be an int in [0, 9223372036854775807], got -1"),
    ("lr: [1, 2]\n", "lr must be a float, got [1, 2]"),
    ("{1: 2, a: 3}\n", "unknown config key(s) [1, 'a']"),
    ("lr: 0.1\n  bad: [\n", "is not valid YAML"),
])
def test_bad_training_configs_are_one_line(files, capsys, yaml_text, expected):
    config = files["root"] / "train.yaml"
    config.write_text(yaml_text, encoding="utf-8")
    one_line(capsys, ["train", "--config", config, "--data", files["text"]], expected)


def test_bad_training_overrides_and_out_dir_are_one_line(files, capsys):
    one_line(capsys, ["train", "--data", files["text"], "--out_dir", files["text"]],
             f"out_dir {str(files['text'])!r} is a file; it must be a folder")
    one_line(capsys, ["train", "--data", files["text"], "--out_dir", files["text"] / "sub"], "which is a file")
    one_line(capsys, ["train", "--data", files["text"], "--model.norm_eps", "nan"], "model: norm_eps must be a finite")
    one_line(capsys, ["train", "--data", files["text"], "--lr", "inf"], "lr must be a finite number > 0.0, got inf")
    out = files["root"] / "never-made"  # issue 47: refused at construction, before any folder (a raw ValueError
    for key in ("--eval_batches", "--eval_batch_size", "--max_steps"):  # from islice after cache/ and loss.png)
        one_line(capsys, ["train", "--data", files["text"], "--out_dir", out, key, str(10**20)],
                 f"{key[2:]} must be an int in [")
        assert not out.exists()
    for key, message in (("--watch.probe_length", "watch.probe_length(s) up to 1099511627776 need max_len >= "),
                         ("--watch.probe_batch", "the microscope's repeated-tokens probe (watch.probe_batch=")):
        one_line(capsys, ["train", "--data", files["text"], "--out_dir", out, "--progress", "false", key, str(2**40)],
                 message)
        assert not out.exists()  # refused before the token cache (out/cache) was made
    bad = files["root"] / "latin1.yaml"
    bad.write_bytes("lr: 0.1 # caf\xe9\n".encode("latin-1"))
    one_line(capsys, ["train", "--config", bad], "is not UTF-8 text")


@pytest.mark.parametrize("flags, expected", [
    (["--sample", "--temperature", "nan"], "temperature must be a finite number > 0, got nan"),
    (["--temperature", "inf"], "temperature must be a finite number > 0, got inf"),  # greedy: checked all the same
    (["--num_beams", "2", "--length_penalty", "inf"], "length_penalty must be a finite number >= -10.0 and <= 10.0"),
    (["--sample", "--top_p", "nan"], "top_p must be a finite number > 0 and <= 1, got nan"),
    (["--sample", "--min_p=-inf"], "min_p must be a finite number"),
    (["--repetition_penalty", "nan"], "repetition_penalty must be a finite number"),
    (["--num_beams", "100000"], "num_beams must be an int in [1, 4096]"),
    (["--seed", "-1"], "seed must be an int in [0, 9223372036854775807]"),
])
def test_nan_and_inf_generation_options_are_one_line(files, capsys, flags, expected):
    one_line(capsys, ["generate", files["lm"], "--prompt", "hello", "--max_new_tokens", "2", *flags], expected)


def test_a_malformed_tokenizer_json_is_one_line(files, capsys, tmp_path):
    import shutil

    ck = Path(shutil.copytree(files["lm"], tmp_path / "ck"))
    for text, expected in [('{"kind": "char", "chars": 5}', "tokenizer field 'chars' must be a str, got 5"),
                           ('{"kind": "bpe", "hf": {"model": 1}}', "the 'hf' field is not a tokenizer"),
                           ('{"kind": "nope"}', "unknown tokenizer kind 'nope'"),
                           ("[1, 2", "is not valid JSON"),
                           ('{"kind": "char", "chars": "ab", "specials": [[1]]}', "specials must be a list of names")]:
        (ck / "tokenizer.json").write_text(text)
        one_line(capsys, ["generate", ck, "--prompt", "a", "--max_new_tokens", "1"], "tokenizer.json", expected)
    hf = Path(shutil.copytree(files["hf"], tmp_path / "hf"))
    (hf / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": 5}}')
    one_line(capsys, ["embed", "--model", hf, "hello"], "tokenizer.json' is not a tokenizer the Hugging Face library")


def test_corrupt_hugging_face_weights_are_one_line(files, capsys, tmp_path):
    import shutil

    hf = Path(shutil.copytree(files["hf"], tmp_path / "hf"))
    data = (hf / "model.safetensors").read_bytes()
    (hf / "model.safetensors").write_bytes(data[:100] + b"\0" * 64)
    one_line(capsys, ["convert", hf, tmp_path / "out"], "model.safetensors is corrupt or truncated")
    (hf / "model.safetensors").write_bytes(data[:-7])
    one_line(capsys, ["convert", hf, tmp_path / "out"], "model.safetensors is corrupt or truncated")
    assert not (tmp_path / "out").exists()


def test_absurd_configs_in_model_folders_are_one_line(files, capsys, tmp_path):
    import shutil

    ck = Path(shutil.copytree(files["lm"], tmp_path / "ck"))
    config = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**config, "d_model": 2**30, "n_heads": 1}))
    one_line(capsys, ["generate", ck, "--prompt", "a"], "config.json does not fit its weights", "d_model=1073741824")
    (ck / "config.json").write_text(json.dumps({**config, "norm_eps": float("nan")}))
    one_line(capsys, ["generate", ck, "--prompt", "a"], "config.json: norm_eps must be a finite number > 0.0, got nan")
    hf = Path(shutil.copytree(files["hf"], tmp_path / "hf"))
    hf_config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**hf_config, "vocab_size": 10**12}))
    one_line(capsys, ["embed", "--model", hf, "hello"], "vocab_size=1000000000000")


def test_an_option_glued_to_a_double_dash_is_one_usage_line(capsys):
    """argparse turns ``--config=--`` into an empty list (found by tests/test_fuzz.py): refused at once."""
    from glassformer.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["train", "--config=--"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--config=--: '--' is not a value" in err[0]


def test_a_closed_pipe_stops_quietly(tmp_path):
    """`glassformer ... | head`: when the reader goes away the command stops with 141 (128 + SIGPIPE, as
    a shell reports it) and prints nothing, rather than "error: Broken pipe" or a traceback at exit."""
    import subprocess
    import sys

    script = tmp_path / "spam.py"
    script.write_text("import argparse, sys\nfrom glassformer import cli\n"
                      "def spam(args):\n    for i in range(200000):\n        print('line', i)\n"
                      "parser = argparse.ArgumentParser()\nparser.set_defaults(func=spam)\n"
                      "cli.build_parser = lambda: parser\nsys.exit(cli.main([]))\n", encoding="utf-8")
    done = subprocess.run(["bash", "-o", "pipefail", "-c", f"'{sys.executable}' '{script}' | head -1"],
                          capture_output=True, text=True, timeout=600)
    assert done.stdout == "line 0\n" and done.stderr == "" and done.returncode == 141


def test_ctrl_c_while_the_command_is_still_importing_is_one_line_and_130():
    """The command's imports take seconds (torch): Ctrl-C then prints one line, no traceback. Simulated
    by a SIGINT sent the moment the command starts importing torch (an import hook), inside cli.main."""
    import subprocess
    import sys

    # Ctrl-C as in a terminal: a runner started in the background (`make test &`) hands its children SIGINT
    # ignored, and then no KeyboardInterrupt would come
    code = ("import os, signal, sys, time\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "class Hook:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch':\n"
            "            os.kill(os.getpid(), signal.SIGINT)\n"
            "            time.sleep(5)\n"
            "sys.meta_path.insert(0, Hook())\n"
            "from glassformer import cli\n"
            "sys.exit(cli.main(['generate', 'no-such-checkpoint', '--prompt', 'a']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 130 and done.stderr == "glassformer: interrupted\n"
    library = subprocess.run([sys.executable, "-c", "import signal; before = signal.getsignal(signal.SIGINT); "
                              "import glassformer, glassformer.cli; assert signal.getsignal(signal.SIGINT) is before"],
                             capture_output=True, text=True, timeout=600)
    assert library.returncode == 0, library.stderr  # a library user's Ctrl-C stays Python's


@pytest.mark.parametrize("argv, expected", [
    (["bench", "--rounds", "0"], "glassformer: error: --rounds must be an int >= 1, got 0"),
    (["bench", "--defaults", "--tolerance", "-1"],
     "glassformer: error: --tolerance must be a finite number >= 0.0, got -1.0"),
])
def test_bench_names_its_flags_before_any_timing(capsys, argv, expected):
    """A command-line value is refused under the flag's own name (the library's message says ``rounds``)."""
    assert one_line(capsys, argv) == expected + "\n"

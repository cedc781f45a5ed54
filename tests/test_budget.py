"""An estimate before any allocation (issue 22): every resource option, alone or multiplied by another,
is refused in under a second and under 200 MB of memory growth when it cannot fit, naming the option
and the estimate. The cases run in a child process that reads its own peak memory.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from allocation_helpers import allocations
from glassformer import ModelConfig, build_model
from glassformer.errors import BadFileError, GlassformerError
from glassformer.io.budget import (
    OutOfMemoryError,
    check_training_fits,
    param_count,
    parse_size,
    training_bytes,
)
from glassformer.io.loaders import MAX_YAML_NODES, expanded_size
from glassformer.tokenizers import CharTokenizer
from glassformer.training import save_checkpoint

TEXT = "hello world, a small text\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("budget")
    tok = CharTokenizer.from_text(TEXT, specials=["pad", "bos", "eos"])
    small = dict(vocab_size=tok.vocab_size, d_model=16, n_heads=2, d_ff=32)
    lm = save_checkpoint(root / "lm", build_model(ModelConfig(**small, n_layers=1, max_len=32, pos="learned")), tok)
    mt = save_checkpoint(root / "mt", build_model(ModelConfig(**small, arch="encoder-decoder", n_enc=1, n_dec=1,
                                                              max_len=4096)), tok)
    enc = save_checkpoint(root / "enc", build_model(ModelConfig(**small, n_layers=1, max_len=32,
                                                                attn="bidirectional")), tok)
    corpus = root / "corpus.txt"
    corpus.write_text(TEXT * 20)
    lines = root / "lines.txt"
    lines.write_text("hello\n" * 1000)
    bomb = root / "bomb.yaml"
    bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))
        + "data: *i\n")
    return {"lm": str(lm), "mt": str(mt), "enc": str(enc), "corpus": str(corpus), "lines": str(lines),
            "bomb": str(bomb), "out": str(root / "out")}


PROBE = r"""
import contextlib, io, json, resource, sys
sys.path.insert(0, sys.argv[2])  # tests/: allocation_helpers
from allocation_helpers import allocations
import torch
from glassformer.cli import main

f = json.loads(sys.argv[1])
torch.set_num_threads(1)
TRAIN = ["train", "--data", f["corpus"], "--out_dir", f["out"], "--max_steps", "1", "--progress", "false",
         "--device", "cpu", "--model.d_model", "16", "--model.n_heads", "2", "--model.d_ff", "32", "--block_size", "8",
         "--batch_size", "2"]
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # warm up
    main(["eval", f["lm"], "--data", f["corpus"], "--block_size", "8"])

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

cases = {
    "n_layers": TRAIN + ["--model.n_layers", "1000000"],
    "d_model": TRAIN + ["--model.d_model", "100000000", "--model.n_heads", "1"],
    "d_ff": TRAIN + ["--model.d_ff", "1000000000"],
    "max_len": TRAIN + ["--model.max_len", "1000000000", "--model.pos", "learned"],
    "batch_size": TRAIN + ["--batch_size", "1000000000"],
    "block_size": TRAIN + ["--block_size", "1000000000"],
    "bpe_vocab": TRAIN + ["--tokenizer", "bpe", "--tokenizer_vocab_size", "1000000000000"],
    "int64": TRAIN + ["--model.n_layers", "99999999999999999999999"],
    "layers_x_width": TRAIN + ["--model.n_layers", "3000", "--model.d_model", "30000", "--model.n_heads", "1"],
    "batch_x_block": TRAIN + ["--batch_size", "100000", "--block_size", "100000"],
    "max_memory": TRAIN + ["--max_memory", "10KB"],
    "yaml_aliases": ["train", "--config", f["bomb"]],
    "eval_block_size": ["eval", f["lm"], "--data", f["corpus"], "--block_size", "1000000000000"],
    "eval_batch": ["eval", f["lm"], "--data", f["corpus"], "--batch_size", "1000000000000"],
    "eval_max_memory": ["eval", f["lm"], "--data", f["corpus"], "--max_memory", "10KB"],
    "beams_x_batch": ["translate", f["mt"], f["lines"], "--beams", "4096", "--batch_size", "1000"],
    "similarity": ["embed", "--model", f["enc"], "--similarity", *["a text"] * 100000],
    "embed_max_memory": ["embed", "--model", f["enc"], "a", "b", "--max_memory", "1KB"],
}
before, results = peak(), {}
for argv in cases.values():  # first, each verb's imports (Python memory, not the case's): then counted
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(argv)
for name, argv in cases.items():
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), allocations() as seen:
        code = main(argv)
    results[name] = [code, seen.total(), err.getvalue()]
print(json.dumps({"growth": peak() - before, "results": results}))
"""


def test_every_resource_option_alone_or_combined_is_refused_before_allocating(files):
    """Each absurd option is one line, refused before the allocation it asks for: under 16 MiB of
    tensors and Python memory counted in the call (the tiny fixtures included), peak RSS growth under
    200 MB. Bytes are counted, not seconds: a busy machine is slow, not wrong."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE), json.dumps(files), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    named = {"n_layers": "n_layers=1000000", "d_model": "d_model=100000000", "d_ff": "d_ff=1000000000",
             "max_len": "max_len=1000000000", "batch_size": "batch_size=1000000000",
             "block_size": "block_size=1000000000", "bpe_vocab": "vocab_size=1000000000000",
             "int64": "n_layers must be an int in [0, 9007199254740992]",
             "layers_x_width": "n_layers=3000, d_model=30000",
             "batch_x_block": "batch_size=100000, block_size=100000", "max_memory": "--max_memory 10 KB",
             "yaml_aliases": "aliases", "eval_block_size": "--block_size must be an int in [1, 32], got 1000000000000",
             "eval_batch": "--batch_size 1000000000000", "eval_max_memory": "--max_memory 10 KB",
             "beams_x_batch": "--beams 4096 x --batch_size 1000", "similarity": "at most 4,096 texts",
             "embed_max_memory": "--max_memory 1 KB"}
    for name, (code, allocated, err) in report["results"].items():
        assert code == 2, (name, err)
        assert err.count("\n") == 1 and err.startswith("glassformer: error: "), (name, err)
        assert named[name] in err, (name, err)
        assert "needs at least" in err or name in ("int64", "yaml_aliases", "eval_block_size", "similarity"), err
        assert allocated < 16 * 2**20, (name, allocated)
    assert report["growth"] < 200 * 2**20, report["growth"]


def test_what_fits_is_never_refused():
    config = ModelConfig.preset("gpt2-small")
    check_training_fits(config, 8, 1024, max_memory="64GB")  # 124M weights x 12 bytes + a batch: about 9 GB
    assert 120e6 < param_count(config) < 130e6  # the count leaves out only norms and biases (124.4M in all)
    with pytest.raises(OutOfMemoryError, match="needs at least .* more than the --max_memory 1 GB"):
        check_training_fits(config, 8, 1024, max_memory="1GB")


@settings(max_examples=60, deadline=None)
@given(n_layers=st.integers(1, 2**40), d_model=st.integers(1, 2**40), d_ff=st.integers(1, 2**40),
       vocab=st.integers(1, 2**40), batch=st.integers(1, 2**40), block=st.integers(1, 2**40))
def test_the_estimate_is_arithmetic_only_and_grows_with_every_option(n_layers, d_model, d_ff, vocab, batch, block):
    # learned positions: any d_model is valid (sinusoidal ones need an even width)
    config = ModelConfig(vocab_size=vocab, d_model=d_model, n_heads=1, n_layers=n_layers, d_ff=d_ff, max_len=8,
                         pos="learned")
    need = training_bytes(config, batch, block)
    assert need >= 12 * (vocab * d_model + n_layers * 2 * d_model * (d_model + d_ff))
    assert need >= batch * block * 4 * (n_layers * (6 * d_model + 2 * d_ff) + 2 * vocab)
    bigger = ModelConfig(vocab_size=vocab, d_model=d_model, n_heads=1, n_layers=n_layers + 1, d_ff=d_ff, max_len=8,
                         pos="learned")
    assert training_bytes(bigger, batch, block) > need and training_bytes(config, batch + 1, block) > need


@pytest.mark.parametrize("text,expected", [("8GB", 8 * 10**9), ("512MiB", 512 * 2**20), ("2e9", 2 * 10**9),
                                           ("1000", 1000)])
def test_max_memory_reads_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "-1GB", "nan", "inf", "8XB", "1e400", "9" * 100, True])
def test_max_memory_refuses_what_is_not_a_size(bad):
    with pytest.raises(GlassformerError, match="--max_memory must be a size"):
        parse_size(bad)


def test_yaml_aliases_are_bounded(files):
    from glassformer.training.config import read_yaml

    with pytest.raises(BadFileError, match="expands .* aliases"):
        read_yaml(files["bomb"])
    recursive = Path(files["out"]).parent / "loop.yaml"
    recursive.write_text("a: &a [1, *a]\n")
    with pytest.raises(BadFileError, match="aliases"):
        read_yaml(recursive)
    assert expanded_size({"a": [1, 2], "b": {"c": 3}}) < 10 < MAX_YAML_NODES


def test_bpe_vocabulary_is_capped():
    from glassformer.tokenizers import BPETokenizer

    with pytest.raises(GlassformerError, match=r"vocab_size must be an int in \[256, 4194304\], got 1000000000000"):
        BPETokenizer.train(["some text"], vocab_size=10**12)


def test_a_corrupt_gz_corpus_is_one_line(tmp_path):
    from glassformer.data import iter_text

    good = gzip.compress(TEXT.encode() * 1000)
    path = tmp_path / "c.txt.gz"
    path.write_bytes(good[:40] + b"\xff" * 40 + good[80:])
    with pytest.raises(BadFileError, match="corrupt or truncated gzip") as error:
        list(iter_text(path))
    assert "\n" not in str(error.value)
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(BadFileError, match="c.txt.gz"):
        list(iter_text(path))


CORPUS_PROBE = r"""
import json, resource, sys
from glassformer.data import encode_files
from glassformer.tokenizers import CharTokenizer

tok = CharTokenizer.from_text("ab \n")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
ids = encode_files([sys.argv[1]], tok, sys.argv[2])
print(json.dumps({"growth": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before, "n": len(ids)}))
"""


@pytest.mark.parametrize("newlines", [True, False])
def test_a_corpus_without_newlines_streams_like_one_with_them(tmp_path, newlines):
    path = tmp_path / "big.txt"
    line = "ab ab ab\n" if newlines else "ab ab ab "
    with open(path, "w") as handle:
        for _ in range(24):
            handle.write(line * (2**20 // len(line)) * 1)  # 24 MB in all
    done = subprocess.run([sys.executable, "-c", CORPUS_PROBE, str(path), str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["n"] == path.stat().st_size
    assert report["growth"] < 150 * 2**20, report  # measured: 65 MB either way (before: 670 MB without newlines)


def test_eval_writes_strict_json(files, capsys):
    from glassformer.cli import main

    assert main(["eval", files["lm"], "--data", files["corpus"], "--block_size", "8"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    json.loads(line, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    torch.manual_seed(0)


@settings(max_examples=80, deadline=None)
@given(options=st.fixed_dictionaries({name: st.one_of(st.integers(1, 64), st.integers(1, 2**80)) for name in (
    "n_layers", "d_model", "d_ff", "max_len", "vocab_size", "batch_size", "block_size")}))
def test_any_combination_of_sizes_is_accepted_within_the_budget_or_refused_at_once(options):
    """Deciding allocates nothing sized by the options (bytes counted: no tensor, under 1 MiB of Python
    memory), whatever they are."""
    model = {k: options[k] for k in ("n_layers", "d_model", "d_ff", "max_len", "vocab_size")}
    with allocations() as seen:
        decide(model, options)
    assert seen.tensor_bytes == 0 and seen.python_peak < 2**20, seen


def decide(model: dict, options: dict) -> None:
    """Build the config and check the training fits: refused with one line, or accepted within 1 GB."""
    try:
        config = ModelConfig(**model, n_heads=1, pos="learned")
        check_training_fits(config, options["batch_size"], options["block_size"], max_memory="1GB")
    except OutOfMemoryError as error:
        assert "needs at least" in str(error) and "--max_memory 1 GB" in str(error)
    except GlassformerError as error:
        assert "\n" not in str(error)
        assert max(options.values()) > 2**63 - 1 or "must" in str(error)
    else:
        assert training_bytes(config, options["batch_size"], options["block_size"]) <= 10**9


def test_beams_times_prompts_is_estimated_as_a_product():
    from glassformer.io.budget import check_fits, generation_bytes

    config = ModelConfig.preset("gpt2-small")
    check_fits(generation_bytes(config, 4096, 1024), "4096 beams", max_memory="1TB")  # each cap alone: fine
    with pytest.raises(OutOfMemoryError, match="1000 prompts x 4096 beams needs at least"):
        check_fits(generation_bytes(config, 1000 * 4096, 1), "1000 prompts x 4096 beams", max_memory="1TB")

"""Nothing unbounded: options and files cannot make glassformer allocate memory or time out of proportion.

- max_new_tokens is capped (MAX_NEW_TOKENS) and buffers (tokens, beams, KV caches) grow with the tokens
  actually generated, not with the request;
- a model's config.json (glassformer's or Hugging Face's) is checked against the safetensors header
  before any weight is allocated: absurd sizes are refused in well under a second;
- files named inside a model folder stay inside it;
- the peak memory of all the absurd requests together stays under 200 MB (measured in a child process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import glassformer
from allocation_helpers import allocations
from glassformer import ModelConfig, build_model
from glassformer.errors import BadFileError, GlassformerError
from glassformer.generation import MAX_NEW_TOKENS, generate, generate_text, setup_generation, translate
from glassformer.interop.hf_dir import load_hf_dir, save_hf_dir
from glassformer.io.checks import check_inside
from glassformer.nn import KVCache
from glassformer.tokenizers import BPETokenizer, CharTokenizer
from glassformer.training import save_checkpoint
from glassformer.viz.report import write_report

TEXT = "hello world, a small text\n"


def tiny_lm(**kw) -> torch.nn.Module:
    torch.manual_seed(0)
    config = dict(vocab_size=20, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=32, pos="rope") | kw
    return build_model(ModelConfig(**config)).eval()


def checkpoint(tmp_path: Path, name: str = "ckpt", **changes) -> Path:
    """A tiny glassformer checkpoint; ``changes`` are then written over its config.json."""
    tok = CharTokenizer.from_text(TEXT, specials=["pad", "bos", "eos"])
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=32))
    path = save_checkpoint(tmp_path / name, model, tok)
    if changes:
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**config, **changes}))
    return path


def hf_folder(tmp_path: Path, name: str = "hf", vocab_pad: int = 0, **changes) -> Path:
    """A tiny GPT-2 Hugging Face folder (written by glassformer: no transformers needed)."""
    torch.manual_seed(0)
    tok = BPETokenizer.train([TEXT] * 20, 300, ["bos", "eos", "pad"])
    config = ModelConfig(vocab_size=tok.vocab_size + vocab_pad, d_model=16, n_heads=2, n_layers=2, d_ff=64,
                         max_len=32, pos="learned", activation="gelu_tanh", scale_embeddings=False)
    path = save_hf_dir(build_model(config), tok, tmp_path / name)
    if changes:
        hf = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**hf, **changes}))
    return path


def refused_quickly(call, match: str, error: type[Exception] = GlassformerError) -> None:
    """``call`` raises ``error`` before it allocates what the absurd value asks: under 16 MiB of tensors
    and Python memory in all (the tiny model included), counted, not timed (a busy machine is slow)."""
    with allocations() as seen, pytest.raises(error, match=match):
        call()
    assert seen.total() < 16 * 2**20, seen


# ------------------------------------------------------------------------------------------ generation
@pytest.mark.parametrize("value", [MAX_NEW_TOKENS + 1, 10**9, 10**30])
def test_max_new_tokens_beyond_the_cap_is_refused_at_once(value):
    refused_quickly(lambda: generate(tiny_lm(), [1, 2, 3], value), f"max_new_tokens={value} is more than")


def test_max_new_tokens_of_the_wrong_type_is_named():
    with pytest.raises(ValueError, match=r"max_new_tokens must be an int in \[1, 1000000\], got 1000000000.0"):
        generate(tiny_lm(), [1, 2], 1e9)


class StopAfter:
    """A stopping criterion that ends every row after ``n`` new tokens."""

    def __init__(self, start: int, n: int):
        self.end = start + n

    def __call__(self, seq: torch.Tensor) -> torch.Tensor:
        return torch.full((seq.shape[0],), seq.shape[1] >= self.end)


def test_buffers_grow_with_the_tokens_generated_not_with_the_request():
    model = tiny_lm(max_len=2**16)  # a long context: caches sized by it would be (B, kv, 65536, hd) per layer
    setup = setup_generation(model, [[1, 2, 3]] * 8, max_new_tokens=MAX_NEW_TOKENS,
                             stopping_criteria=[StopAfter(3, 5)])
    from glassformer.generation import iter_steps
    with torch.inference_mode():
        steps = list(iter_steps(setup))
    assert len(steps) == 5
    assert setup.decoder.tokens.shape[1] <= 3 + 64  # not 3 + 1,000,000
    assert all(cache.capacity <= 64 for cache in setup.decoder.cache)  # not 65,536


def test_kv_cache_doubles_as_it_fills_and_stops_at_max_len():
    cache = KVCache(1, 2, 300, 4)
    assert cache.capacity == KVCache.INITIAL
    chunks = [torch.randn(1, 2, n, 4) for n in (50, 30, 100)]
    for chunk in chunks:
        keys, values = cache.update(chunk, -chunk)
    assert cache.length == 180 and cache.capacity == 256  # 64 -> 128 -> 256
    assert torch.equal(keys, torch.cat(chunks, dim=2)) and torch.equal(values, -keys)
    cache.update(torch.randn(1, 2, 120, 4), torch.randn(1, 2, 120, 4))
    assert cache.capacity == 300  # grown to the limit, not beyond
    with pytest.raises(ValueError, match="KV cache holds 300 positions; cannot add 1 to 300"):
        cache.update(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))


def test_generation_past_the_initial_buffers_equals_the_uncached_result():
    """Growing buffers (tokens, KV cache, beams) change nothing: 150 tokens cross several doublings."""
    model = tiny_lm(max_len=256)
    cached = generate(model, [[1, 2, 3], [4, 5, 6]], 150)
    assert torch.equal(cached, generate(model, [[1, 2, 3], [4, 5, 6]], 150, use_cache=False))
    beams = generate(model, [[1, 2, 3]], 100, num_beams=3, num_return_sequences=2)
    assert beams.shape == (2, 103)
    assert torch.equal(beams, generate(model, [[1, 2, 3]], 100, num_beams=3, num_return_sequences=2,
                                       use_cache=False))


def test_beam_search_with_a_huge_limit_allocates_for_what_it_generates():
    model = tiny_lm(head_bias=True)
    with torch.no_grad():  # token 7 (the eos) is by far the likeliest next token: beams end at once
        model.head.bias[7] = 1e4
    out = generate(model, [[1, 2, 3]] * 64, MAX_NEW_TOKENS, num_beams=4, eos_token_id=7, early_stopping=True)
    assert out.shape == (64, 4) and set(out[:, 3].tolist()) == {7}


def test_translate_and_report_refuse_absurd_lengths_at_once(tmp_path):
    tok = CharTokenizer.from_text(TEXT, specials=["pad", "bos", "eos"])
    encdec = build_model(ModelConfig(vocab_size=tok.vocab_size, arch="encoder-decoder", d_model=16, n_heads=2,
                                     n_enc=1, n_dec=1, d_ff=32, max_len=32)).eval()
    refused_quickly(lambda: translate(encdec, tok, ["hello"], max_new_tokens=10**9), "max_new_tokens=1000000000")
    lm = tiny_lm(vocab_size=tok.vocab_size)
    refused_quickly(lambda: write_report(lm, tok, "hello", out=tmp_path / "r.html", generate=10**8),
                    r"generate must be an int in \[0, 1024\], got 100000000")
    refused_quickly(lambda: write_report(lm, tok, "hello", out=tmp_path / "r.html", max_tokens=10**6),
                    r"max_tokens must be an int in \[1, 2048\]")
    refused_quickly(lambda: write_report(lm, tok, "hello", out=tmp_path / "r.html", pad_to=10**9),
                    r"pad_to must be an int in \[1, 2048\]")
    assert not (tmp_path / "r.html").exists()


# ------------------------------------------------------------------------------------------ files
@pytest.mark.parametrize("changes, named", [
    (dict(d_model=2**30, n_heads=1), "d_model=1073741824"),
    (dict(vocab_size=10**12), "vocab_size=1000000000000"),
    (dict(n_layers=10**9), "n_layers=1000000000"),
    (dict(d_ff=10**10), "d_ff=10000000000"),
    (dict(max_len=10**11, pos="rope"), "max_len=100000000000 with pos='rope'"),
    (dict(max_len=10**11, pos="learned"), "max_len=100000000000"),
    (dict(n_heads=2**17, d_model=2**17, pos="alibi"), "n_heads=131072"),
])
def test_absurd_checkpoint_config_is_refused_before_allocating(tmp_path, monkeypatch, changes, named):
    path = checkpoint(tmp_path, **changes)
    import glassformer.training.checkpoint as ck

    monkeypatch.setattr(ck, "build_model", lambda *a: pytest.fail("a model was built"))
    monkeypatch.setattr(ck, "load_tensors", lambda *a: pytest.fail("tensors were read"))
    refused_quickly(lambda: glassformer.load(path), f"config.json.*{named}", BadFileError)


@pytest.mark.parametrize("changes, named", [
    (dict(n_embd=10**9), "d_model=1000000000"),
    (dict(vocab_size=10**12), "vocab_size=1000000000000"),
    (dict(n_layer=10**9), "n_layers=1000000000"),
    (dict(n_positions=10**10), "max_len=10000000000"),
])
def test_absurd_hugging_face_config_is_refused_before_allocating(tmp_path, monkeypatch, changes, named):
    path = hf_folder(tmp_path, **changes)
    import glassformer.interop.hf as hf
    import glassformer.interop.hf_dir as hf_dir

    monkeypatch.setattr(hf, "build_model", lambda *a: pytest.fail("a model was built"))
    monkeypatch.setattr(hf_dir, "load_tensors", lambda *a: pytest.fail("tensors were read"))
    refused_quickly(lambda: load_hf_dir(path), f"config.json does not fit its weights.*{named}", BadFileError)


def test_a_small_mismatch_is_named_tensor_by_tensor_before_reading_tensors(tmp_path, monkeypatch):
    import glassformer.interop.hf_dir as hf_dir
    import glassformer.training.checkpoint as ck

    monkeypatch.setattr(ck, "load_tensors", lambda *a: pytest.fail("tensors were read"))
    monkeypatch.setattr(hf_dir, "load_tensors", lambda *a: pytest.fail("tensors were read"))
    with pytest.raises(BadFileError, match=r"does not match config.json: .*file \(32, 16\) vs config \(64, 16\)"):
        glassformer.load(checkpoint(tmp_path, d_ff=64))
    with pytest.raises(GlassformerError, match=r"shape mismatch: .*but the config needs \(16, 128\)"):
        load_hf_dir(hf_folder(tmp_path, n_inner=128))


def test_hugging_face_config_with_missing_or_mistyped_fields_is_named(tmp_path):
    path = hf_folder(tmp_path)
    hf = json.loads((path / "config.json").read_text())
    del hf["n_embd"]
    (path / "config.json").write_text(json.dumps(hf))
    with pytest.raises(GlassformerError, match="config.json: gpt2 config.json has no 'n_embd'"):
        load_hf_dir(path)
    (path / "config.json").write_text(json.dumps({**hf, "n_embd": "16"}))
    with pytest.raises(GlassformerError, match="gpt2 config field n_embd must be an int >= 1, got '16'"):
        load_hf_dir(path)
    (path / "config.json").write_text("[1, 2]")
    with pytest.raises(GlassformerError):  # not a mapping: then not a Hugging Face folder at all
        load_hf_dir(path)


def test_corrupt_weights_in_a_hugging_face_folder_are_one_error(tmp_path):
    path = hf_folder(tmp_path)
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[:100] + b"\0" * 40)
    with pytest.raises(BadFileError, match="model.safetensors is corrupt or truncated"):
        load_hf_dir(path)
    (path / "model.safetensors").write_bytes(data[: len(data) - 10])
    with pytest.raises(BadFileError, match="model.safetensors is corrupt or truncated"):
        load_hf_dir(path)


def test_shards_must_stay_inside_the_model_folder(tmp_path):
    path = hf_folder(tmp_path)
    outside = tmp_path / "outside.safetensors"
    (path / "model.safetensors").rename(outside)
    index = path / "model.safetensors.index.json"
    for shard, message in [("../outside.safetensors", "outside the folder"),
                           (str(outside), "outside the folder"),
                           ("~/x.safetensors", "outside the folder"),
                           (5, "must be a file name")]:
        index.write_text(json.dumps({"weight_map": {"transformer.wte.weight": shard}}))
        with pytest.raises(BadFileError, match=message):
            load_hf_dir(path)
    (path / "link.safetensors").symlink_to(outside)
    index.write_text(json.dumps({"weight_map": {"transformer.wte.weight": "link.safetensors"}}))
    with pytest.raises(BadFileError, match="leads outside the model folder"):
        load_hf_dir(path)
    (path / "model.safetensors").symlink_to(outside)  # the single-file form too
    with pytest.raises(BadFileError, match="leads outside the model folder"):
        load_hf_dir(path)


def test_check_inside_allows_the_hugging_face_cache_layout(tmp_path):
    snapshot = tmp_path / "models--x--y" / "snapshots" / "abc123"
    blob = tmp_path / "models--x--y" / "blobs" / "f00d"
    snapshot.mkdir(parents=True)
    blob.parent.mkdir()
    blob.write_text("{}")
    (snapshot / "config.json").symlink_to(Path("../../blobs/f00d"))
    assert check_inside(snapshot, "config.json") == snapshot / "config.json"
    (snapshot / "evil.json").symlink_to(tmp_path / "models--x--y" / "other")
    with pytest.raises(BadFileError, match="leads outside"):
        check_inside(snapshot, "evil.json")


def test_checkpoint_files_may_not_link_outside(tmp_path):
    path = checkpoint(tmp_path)
    (tmp_path / "elsewhere.json").write_text((path / "config.json").read_text())
    (path / "config.json").unlink()
    (path / "config.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(BadFileError, match="leads outside the model folder"):
        glassformer.load(path)


# ------------------------------------------------------------------------------------------ padded vocabulary
def test_a_model_vocabulary_larger_than_its_tokenizer_converts_loads_and_generates(tmp_path):
    """convert and load agree: a padded vocabulary works, and its extra ids are never generated."""
    from glassformer.cli import main

    src = hf_folder(tmp_path, vocab_pad=20)
    assert main(["convert", str(src), str(tmp_path / "ck")]) == 0
    model, tok = glassformer.load(tmp_path / "ck")
    assert model.config.vocab_size == tok.vocab_size + 20
    with torch.no_grad():  # make the padded ids the most likely ones
        model.embeddings.tok.weight[tok.vocab_size:] = 10 * model.embeddings.tok.weight[:20].abs().max()
    text = generate_text(model, tok, "hello", 8, do_sample=True, seed=0)
    assert isinstance(text, str)
    ids = generate(model, tok.encode("hello"), 8, tokenizer=tok)
    assert int(ids.max()) < tok.vocab_size


def test_convert_refuses_a_tokenizer_larger_than_the_model(tmp_path, capsys):
    from glassformer.cli import main

    src = hf_folder(tmp_path)
    hf = json.loads((src / "config.json").read_text())
    import safetensors.torch as st

    state = st.load_file(str(src / "model.safetensors"))
    state["transformer.wte.weight"] = state["transformer.wte.weight"][:-5].clone()
    st.save_file(state, str(src / "model.safetensors"))
    (src / "config.json").write_text(json.dumps({**hf, "vocab_size": hf["vocab_size"] - 5}))
    assert main(["convert", str(src), str(tmp_path / "ck")]) == 2
    err = capsys.readouterr().err
    n = hf["vocab_size"]
    assert err.count("\n") == 1 and f"its tokenizer has {n} ids but the model's vocab_size is {n - 5}" in err
    assert not (tmp_path / "ck").exists()


# ------------------------------------------------------------------------------------------ memory
MEMORY_PROBE = r"""
import json, resource, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])  # tests/: allocation_helpers
from allocation_helpers import allocations
import torch
import glassformer
from glassformer.generation import generate
from glassformer.interop.hf_dir import load_hf_dir

folders = json.loads(sys.argv[1])
torch.set_num_threads(1)
model, tok = glassformer.load(folders["ok"])  # warm up: imports, lazy modules, one small load and generate
generate(model, [1, 2, 3], 2)
load_hf_dir(folders["hf_ok"])

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB

before, results = peak(), {}
for name, call in [
    *[(f, lambda f=f: glassformer.load(folders[f])) for f in folders if f.startswith("ck_")],
    *[(f, lambda f=f: load_hf_dir(folders[f])) for f in folders if f.startswith("hf_") and f != "hf_ok"],
    ("max_new_tokens", lambda: generate(model, [[1, 2, 3]] * 64, 10**9)),
    ("max_new_tokens_beams", lambda: generate(model, [[1, 2, 3]] * 64, 10**9, num_beams=4)),
]:
    with allocations() as seen:
        try:
            call()
            outcome = "accepted"
        except ValueError as error:
            outcome = type(error).__name__
    results[name] = [outcome, seen.total()]
print(json.dumps({"growth": peak() - before, "results": results}))
"""


def test_absurd_sizes_are_refused_with_peak_memory_growth_under_200_mb(tmp_path):
    folders = {
        "ok": checkpoint(tmp_path, "ok"),
        "hf_ok": hf_folder(tmp_path, "hf_ok"),
        "ck_d_model": checkpoint(tmp_path, "d", d_model=2**30, n_heads=1),
        "ck_vocab": checkpoint(tmp_path, "v", vocab_size=10**12),
        "ck_layers": checkpoint(tmp_path, "l", n_layers=10**9),
        "ck_max_len": checkpoint(tmp_path, "m", max_len=10**11, pos="sinusoidal"),
        "hf_d_model": hf_folder(tmp_path, "hd", n_embd=10**9),
        "hf_vocab": hf_folder(tmp_path, "hv", vocab_size=10**12),
        "hf_layers": hf_folder(tmp_path, "hl", n_layer=10**9),
    }
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(MEMORY_PROBE), json.dumps(
        {k: str(v) for k, v in folders.items()}), str(Path(__file__).parent)], capture_output=True, text=True,
        timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for name, (outcome, allocated) in report["results"].items():
        assert outcome in ("BadFileError", "GlassformerError"), (name, outcome)
        assert allocated < 16 * 2**20, (name, allocated)  # refused before the model: bytes counted, not seconds
    assert report["growth"] < 200 * 2**20, report

"""Tests that hunt: hypothesis throws arbitrary input at every door and the answer is always one of two.

Either it works (and then nothing is NaN, every id is in range, every config is valid) or it is a
:class:`~glassformer.errors.GlassformerError` (one line from the command line, exit status 2). Any other
exception is a bug. Doors: ModelConfig from JSON, TrainConfig from YAML, generation options, tokenizer
input (arbitrary Unicode, lone surrogates, bytes that are not UTF-8, malformed tokenizer files) and
the command line's argument parser for each verb. Examples are few per test (the file runs in well
under a minute); GLASSFORMER_FUZZ_SCALE=20 hunts twenty times longer. Hypothesis keeps the failures it
finds in its database (.hypothesis/) and replays them first.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import math
import os
import shutil
import tempfile
from dataclasses import fields
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from glassformer import ModelConfig, build_model
from glassformer.cli import main
from glassformer.config import ACTIVATIONS, ARCHS, ATTN_TYPES, NORMS, POS_TYPES
from glassformer.errors import GlassformerError
from glassformer.generation import generate
from glassformer.interop.hf_dir import save_hf_dir
from glassformer.tokenizers import BPETokenizer, ByteTokenizer, CharTokenizer, HFTokenizer, Tokenizer
from glassformer.training import TrainConfig, save_checkpoint

SCALE = float(os.environ.get("GLASSFORMER_FUZZ_SCALE", "1"))  # e.g. 20 to hunt longer than `make test` does
FAST = settings(max_examples=int(40 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=int(15 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow])
TEXT = "hello world, a small text\n"
ROOT = Path(tempfile.mkdtemp(prefix="glassformer-fuzz-"))
atexit.register(shutil.rmtree, ROOT, True)

# ---------------------------------------------------------------------------------------------- values
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1e-300, 1e308]))
INTS = st.one_of(st.integers(-3, 70), st.sampled_from([2**31, 2**63, 10**30, -(10**30), 10**400]))
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, st.text(max_size=8),
                    st.sampled_from(["nan", "inf", "1e-3", "3", "rope", "learned", "causal", "gelu"]))
JSONISH = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                       max_leaves=6)


def _choices() -> dict[str, st.SearchStrategy]:
    """A ModelConfig field -> plausible and implausible values (valid ones often enough to pass)."""
    special = {"arch": st.sampled_from(ARCHS), "attn": st.sampled_from(ATTN_TYPES), "pos": st.sampled_from(POS_TYPES),
               "norm": st.sampled_from(NORMS), "activation": st.sampled_from(ACTIVATIONS),
               "d_model": st.sampled_from([8, 16, 12]), "n_heads": st.sampled_from([1, 2, 4]),
               "vocab_size": st.integers(1, 50)}
    return {f.name: st.one_of(special.get(f.name, SCALARS), JSONISH) for f in fields(ModelConfig)}


def _is_finite_config(config: ModelConfig) -> bool:
    return all(math.isfinite(v) for f in fields(config) if isinstance(v := getattr(config, f.name), float))


# ---------------------------------------------------------------------------------------------- configs
@FAST
@given(data=st.fixed_dictionaries({}, optional=_choices()), extra=st.dictionaries(st.text(max_size=6), SCALARS,
                                                                                    max_size=2))
def test_model_config_from_json_is_valid_or_one_error(data, extra):
    text = json.dumps({**data, **extra})  # NaN and Infinity are written as JSON's common extension
    try:
        config = ModelConfig.from_json(text)
    except GlassformerError:
        return
    assert _is_finite_config(config)
    assert ModelConfig.from_json(config.to_json()) == config


@FAST
@given(text=st.one_of(st.text(max_size=40).map(lambda t: "{" + t), st.text(max_size=40)))
def test_model_config_from_arbitrary_text_or_file_is_one_error(text):
    """Any text is a config or one error; a config read back from its own JSON is the same config, and
    JSON text reads the same whether passed as text or as a file."""
    path = ROOT / "config.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    outcomes = []
    for source in (text, path):
        try:
            config = ModelConfig.from_json(source)
        except GlassformerError as error:
            outcomes.append(type(error))
            continue
        assert ModelConfig.from_json(config.to_json()) == config  # a round trip
        outcomes.append(config)
    if text.lstrip().startswith("{") and not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert outcomes[0] == outcomes[1]  # text and file agree: the same config, or the same kind of error


TRAIN_KEYS = {"lr": FLOATS, "min_lr": FLOATS, "weight_decay": FLOATS, "grad_clip": FLOATS, "beta1": FLOATS,
              "beta2": FLOATS, "eps": FLOATS, "label_smoothing": FLOATS, "mask_prob": FLOATS, "val_fraction": FLOATS,
              "max_steps": INTS, "batch_size": INTS, "grad_accum": INTS, "block_size": INTS, "seed": INTS,
              "warmup_steps": INTS, "eval_every": INTS, "eval_batches": INTS, "num_threads": INTS,
              "device": st.sampled_from(["auto", "cpu", "cuda:0", "tpu", "cuda:x", "", "mps"]),
              "objective": st.sampled_from(["clm", "mlm", "prefix", "seq2seq", "gan"]),
              "tokenizer": st.sampled_from(["char", "byte", "bpe", "word"]),
              "specials": st.one_of(st.none(), st.lists(st.sampled_from(["pad", "bos", "eos", "cls", ""]), max_size=3)),
              "out_dir": st.sampled_from(["out-fuzz", "", str(ROOT / "config.json"), str(ROOT / "config.json" / "x"),
                                          "a\x00b"]),
              "model": st.one_of(st.fixed_dictionaries({}, optional=_choices()), JSONISH)}


@FAST
@given(data=st.fixed_dictionaries({}, optional={k: st.one_of(v, SCALARS) for k, v in TRAIN_KEYS.items()}),
       extra=st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), SCALARS, max_size=2))
def test_train_config_from_yaml_is_valid_or_one_error(data, extra):
    path = ROOT / "train.yaml"
    path.write_text(yaml.safe_dump({**data, **extra}, allow_unicode=True), encoding="utf-8")
    try:
        config = TrainConfig.from_yaml(path)
    except GlassformerError:
        return
    numbers = [getattr(config, f.name) for f in fields(config) if isinstance(getattr(config, f.name), float)]
    assert all(math.isfinite(v) for v in numbers)
    assert _is_finite_config(config.model_config(vocab_size=10))


@FAST
@given(text=st.text(max_size=60))
def test_train_config_from_arbitrary_yaml_text_is_one_error(text):
    """Any YAML text is a training config or one error; a config survives its own round trip."""
    path = ROOT / "any.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        config = TrainConfig.from_yaml(path)
    except GlassformerError:
        return
    assert TrainConfig.from_dict(config.to_dict()) == config


# ---------------------------------------------------------------------------------------------- generation
_MODELS: dict[str, torch.nn.Module] = {}


def model(kind: str) -> torch.nn.Module:
    if kind not in _MODELS:
        torch.manual_seed(0)
        config = dict(vocab_size=12, d_model=16, n_heads=2, d_ff=32, max_len=10, n_layers=1, n_enc=1, n_dec=1)
        config |= {"lm": dict(pos="rope"), "learned": dict(pos="learned"), "prefix": dict(attn="prefix"),
                   "encdec": dict(arch="encoder-decoder")}[kind]
        _MODELS[kind] = build_model(ModelConfig(**config)).eval()
    return _MODELS[kind]


OPTION = st.one_of(SCALARS, st.lists(st.integers(-2, 14), max_size=3))
OPTIONS = {"do_sample": st.booleans(), "temperature": st.one_of(FLOATS, SCALARS), "top_k": OPTION, "top_p": OPTION,
           "min_p": OPTION, "repetition_penalty": OPTION, "no_repeat_ngram_size": OPTION,
           "num_beams": st.one_of(st.integers(-1, 4), st.sampled_from([4097, 2.0, "2"])),
           "num_return_sequences": st.one_of(st.integers(-1, 4), st.sampled_from([10**9, None])),
           "length_penalty": OPTION, "early_stopping": st.one_of(st.sampled_from([True, False, "never", "always"]),
                                                                  SCALARS),
           "eos_token_id": OPTION, "pad_token_id": OPTION, "seed": OPTION, "prefix_len": OPTION,
           "decoder_start_token_id": OPTION, "use_cache": st.booleans(),
           "stop_strings": st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=2), st.text(max_size=3))}


@FAST
@given(kind=st.sampled_from(["lm", "learned", "prefix", "encdec"]),
       ids=st.one_of(st.lists(st.integers(-2, 14), max_size=12),
                     st.lists(st.lists(st.integers(0, 11), max_size=6), max_size=3), SCALARS),
       max_new_tokens=st.one_of(st.integers(-2, 5), st.sampled_from([10**6 + 1, 10**9, 2**63, 3.0, "3", None])),
       options=st.fixed_dictionaries({}, optional=OPTIONS))
def test_generation_options_give_ids_or_one_error(kind, ids, max_new_tokens, options):
    m = model(kind)
    try:
        out = generate(m, ids, max_new_tokens, **options)
    except GlassformerError:
        return
    assert out.dtype == torch.long and out.dim() == 2
    assert int(out.min()) >= 0 and int(out.max()) < m.config.vocab_size


@FAST
@given(temperature=st.floats(min_value=1e-300, max_value=1e300), penalty=st.floats(min_value=1e-300, max_value=1e300),
       top_k=st.integers(0, 20), top_p=st.floats(min_value=1e-9, max_value=1.0), ngram=st.integers(0, 3),
       seen=st.lists(st.integers(0, 11), min_size=1, max_size=30), seed=st.integers(0, 2**32))
def test_sampling_distribution_stays_a_distribution_at_extreme_settings(temperature, penalty, top_k, top_p, ngram,
                                                                         seen, seed):
    from glassformer.generation import make_processors
    from glassformer.generation.search import sampling_probs

    processors = make_processors(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p,
                                 repetition_penalty=penalty, no_repeat_ngram_size=ngram)
    scores = torch.randn(2, 12, generator=torch.Generator().manual_seed(seed)) * 30
    probs = sampling_probs(processors(torch.tensor([seen, seen]), scores))
    assert torch.isfinite(probs).all() and torch.allclose(probs.sum(-1), torch.ones(2))
    torch.multinomial(probs, 1)


# ---------------------------------------------------------------------------------------------- tokenizers
_TOKENIZERS: dict[str, Tokenizer] = {}


def tokenizer(kind: str) -> Tokenizer:
    if kind not in _TOKENIZERS:
        bpe = BPETokenizer.train([TEXT, "çà 春天 ☃ 🎉"] * 10, 300, ["bos", "eos", "unk"])
        _TOKENIZERS.update(char=CharTokenizer.from_text(TEXT, ["pad"]), char_unk=CharTokenizer.from_text(TEXT, ["unk"]),
                           byte=ByteTokenizer(["eos"]), bpe=bpe, hf=HFTokenizer(bpe.hf))
    return _TOKENIZERS[kind]


ANY_TEXT = st.one_of(
    st.text(max_size=30),
    st.lists(st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr)), max_size=20).map("".join),
    st.binary(max_size=30).map(lambda b: b.decode("utf-8", "surrogateescape")),  # invalid bytes, as argv holds them
)


@FAST
@given(kind=st.sampled_from(["char", "char_unk", "byte", "bpe", "hf"]), text=ANY_TEXT, specials=st.booleans())
def test_tokenizers_encode_any_text_or_refuse_it_in_one_error(kind, text, specials):
    tok = tokenizer(kind)
    try:
        ids = tok.encode(text, add_special_tokens=specials)
    except GlassformerError:
        assert kind.startswith("char") or any(0xD800 <= ord(c) <= 0xDFFF for c in text)
        return
    assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
    if kind in ("byte", "bpe") and not specials:
        assert tok.decode(ids) == text  # byte-level schemes lose nothing
    assert list(tok.encode_to_array(text)) == tok.encode(text) or kind == "hf"


@FAST
@given(kind=st.sampled_from(["char", "byte", "bpe", "hf"]),
       ids=st.lists(st.one_of(st.integers(-5, 400), st.sampled_from([2**70, 1.5, "3", None])), max_size=10),
       skip=st.booleans())
def test_tokenizers_decode_any_ids_or_refuse_them_in_one_error(kind, ids, skip):
    try:
        text = tokenizer(kind).decode(ids, skip_special_tokens=skip)
    except GlassformerError:
        assert not all(isinstance(i, int) and 0 <= i < tokenizer(kind).vocab_size for i in ids)  # refused: a bad id
        return
    assert tokenizer(kind).decode(ids, skip_special_tokens=skip) == text  # decoding is deterministic


@FAST
@given(content=st.one_of(st.binary(max_size=60), JSONISH.map(lambda v: json.dumps(v).encode()),
                         st.fixed_dictionaries({"kind": st.sampled_from(["char", "byte", "bpe", "hf", "x"])},
                                               optional={"chars": JSONISH, "specials": JSONISH, "hf": JSONISH,
                                                         "special_tokens": JSONISH}).map(
                             lambda d: json.dumps(d).encode())))
def test_malformed_tokenizer_files_are_one_error(content):
    path = ROOT / "tokenizer.json"
    path.write_bytes(content)
    try:
        tok = Tokenizer.load(path)
    except GlassformerError:
        return
    tok.save(ROOT / "again.json")  # a tokenizer that loads saves, and reloads as the same tokenizer
    assert Tokenizer.load(ROOT / "again.json").to_dict() == tok.to_dict()


# ---------------------------------------------------------------------------------------------- weights files
def _safetensors(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data


TENSOR_ENTRY = st.fixed_dictionaries(
    {"dtype": st.sampled_from(["F32", "F16", "BF16", "I64", "BOOL", "F99", 5]),
     "shape": st.lists(st.one_of(st.integers(0, 40), st.sampled_from([2**40, -1, 2**64])), max_size=3),
     "data_offsets": st.lists(st.integers(-1, 5000), min_size=2, max_size=2)})


NAMES = st.sampled_from(["embeddings.tok.weight", "head.bias", "x", "__metadata__"])


@FEW
@given(content=st.one_of(
    st.binary(max_size=80),
    st.builds(_safetensors, st.dictionaries(NAMES, st.one_of(TENSOR_ENTRY, JSONISH), max_size=3),
              st.binary(max_size=600)),
    st.integers(0, 2**64 - 1).map(lambda n: n.to_bytes(8, "little") + b"{}")),
       mutation=st.tuples(st.integers(0, 100), st.sampled_from(["dtype", "shape", "data_offsets", "drop", "cut"]),
                          TENSOR_ENTRY))
def test_malformed_weights_files_are_one_error(folders, content, mutation):
    """Random files, and the real file with one tensor's entry changed (or dropped, or the file cut)."""
    import glassformer
    from glassformer.interop.hf_dir import load_hf_dir

    for kind, load in (("lm", glassformer.load), ("hf", load_hf_dir)):
        target = ROOT / f"weights-{kind}"
        if not target.exists():
            shutil.copytree(folders[kind], target)
        real = (folders[kind] / "model.safetensors").read_bytes()
        size = int.from_bytes(real[:8], "little")
        header, data = json.loads(real[8:8 + size]), real[8 + size:]
        index, field, entry = mutation
        name = sorted(k for k in header if k != "__metadata__")[index % (len(header) - 1)]
        if field == "drop":
            del header[name]
        elif field == "cut":
            data = data[: len(data) * index // 101]
        else:
            header[name][field] = entry[field]
        for blob in (content, _safetensors(header, data)):
            (target / "model.safetensors").write_bytes(blob)
            try:
                model = load(target)[0]
            except GlassformerError as error:
                assert str(target) in str(error) or "model.safetensors" in str(error)  # names the file
                continue
            if kind == "lm":  # a load that succeeds gives exactly the file's tensors
                stored = load_file(target / "model.safetensors")
                state = model.state_dict()
                assert all(torch.equal(state[k], v) for k, v in stored.items() if k in state)


# ---------------------------------------------------------------------------------------------- the command line
@pytest.fixture(scope="module")
def folders() -> dict[str, Path]:
    torch.manual_seed(0)
    root = ROOT / "cli"
    tok = CharTokenizer.from_text(TEXT, specials=["pad", "bos", "eos", "mask"])
    small = dict(vocab_size=tok.vocab_size, d_model=16, n_heads=2, d_ff=32, max_len=24)
    bpe = tokenizer("bpe")
    gpt2 = ModelConfig(vocab_size=bpe.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=24,
                       pos="learned", activation="gelu_tanh", scale_embeddings=False)
    text = root / "src.txt"
    out = {
        "lm": save_checkpoint(root / "lm", build_model(ModelConfig(**small, n_layers=1)), tok),
        "encdec": save_checkpoint(root / "ed", build_model(ModelConfig(**small, arch="encoder-decoder", n_enc=1,
                                                                       n_dec=1)), tok),
        "encoder": save_checkpoint(root / "enc", build_model(ModelConfig(**small, n_layers=1, attn="bidirectional")),
                                   tok),
        "hf": save_hf_dir(build_model(gpt2), bpe, root / "hf"),
        "text": text, "root": root,
    }
    text.write_text("hello world\nsmall\n", encoding="utf-8")
    return out


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``glassformer argv`` in-process; (exit status, standard error)."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), contextlib.chdir(ROOT):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else 2
    return status, err.getvalue()


def check_cli(argv: list[str]) -> None:
    status, err = run_cli(argv)
    assert status in (0, 2), (argv, status, err)
    if status == 2:
        assert err.count("\n") == 1 and err.startswith("glassformer"), (argv, err)


def mostly(usual: list[str], odd: list[str]) -> st.SearchStrategy:
    """Usual words three times as often as odd ones, so that many examples get past the first check."""
    return st.one_of(st.sampled_from(usual), st.sampled_from(usual), st.sampled_from(usual), st.sampled_from(odd))


NUMBER_WORDS = (["0", "1", "2", "3", "0.5", "0.9", "1.5"],
                ["-1", "1e-300", "1e308", "-1e308", "nan", "inf", "-inf", "4097", "1000000000", "1e9", "x", ""])
COUNT_WORDS = (["1", "2", "3"], ["-1", "0", "1000001", "1000000000", "1e9", "x", ""])
TEXT_WORDS = (["hello", "hel", "a small", "world, "],
              ["", "Zebra", "h" * 40, "\udcff", "\ud800x", "春天", "--", "-x"])


def flags(pool: dict[str, st.SearchStrategy | None]) -> st.SearchStrategy:
    """Random ``--flag=value`` words from ``pool`` (None: a switch without a value), now and then a junk
    word. (``=`` keeps argparse from reading a value such as "-1" as an option: the values reach the checks.)"""
    def words(name: str) -> st.SearchStrategy:
        value = pool[name]
        return st.just([name]) if value is None else value.map(lambda v: [f"{name}={v}"])

    junk = st.sampled_from([["--bogus"], ["extra"], ["-"]])
    if not pool:
        return st.lists(junk, max_size=2).map(lambda parts: [w for part in parts for w in part])
    real = st.sampled_from(sorted(pool)).flatmap(words)
    one = st.one_of(real, real, real, real, real, real, junk)
    return st.lists(one, max_size=5).map(lambda parts: [w for part in parts for w in part])


NUMBER, COUNT, WORD = mostly(*NUMBER_WORDS), mostly(*COUNT_WORDS), mostly(*TEXT_WORDS)
GENERATE = {"--max_new_tokens": COUNT, "--sample": None, "--temperature": NUMBER, "--top_k": NUMBER, "--top_p": NUMBER,
            "--min_p": NUMBER, "--repetition_penalty": NUMBER, "--no_repeat_ngram_size": NUMBER, "--num_beams": NUMBER,
            "--length_penalty": NUMBER, "--early_stopping": mostly(["true", "false", "never"], ["x"]),
            "--num_return_sequences": NUMBER, "--seed": NUMBER, "--stop": WORD, "--ignore_eos": None,
            "--no_cache": None, "--stream": None, "--trace": None, "--trace_top_k": NUMBER, "--prompt": WORD}


@FAST
@given(which=st.sampled_from(["lm", "encdec", "encoder", "missing"]), prompt=WORD, extra=flags(GENERATE))
def test_cli_generate_never_shows_a_traceback(folders, which, prompt, extra):
    if not any(word.startswith("--max_new_tokens") for word in extra):
        extra = [*extra, "--max_new_tokens=3"]
    check_cli(["generate", str(folders.get(which, ROOT / "nope")), f"--prompt={prompt}", *extra])


@FEW
@given(extra=flags({"--beams": NUMBER, "--length_penalty": NUMBER, "--batch_size": NUMBER, "--max_new_tokens": COUNT,
                    "--ref": st.sampled_from(["src.txt", "missing.txt", "cli"])}))
def test_cli_translate_never_shows_a_traceback(folders, extra):
    check_cli(["translate", str(folders["encdec"]), str(folders["text"]), *extra, "--output", str(ROOT / "t.txt")])


@FEW
@given(which=st.sampled_from(["lm", "encdec", "encoder", "--preset"]), text=WORD,
       extra=flags({"--target": WORD, "--prefix_len": NUMBER, "--pad_to": NUMBER,
                    "--generate": st.sampled_from(["0", "2", "1025", "100000000", "-1", "x"]),
                    "--top_k": NUMBER, "--max_tokens": NUMBER, "--add_special_tokens": None,
                    "--attn": st.sampled_from(["causal", "prefix", "bidirectional", "x"]), "--seed": NUMBER}))
def test_cli_inspect_never_shows_a_traceback(folders, which, text, extra):
    source = ["--preset", "lesson2"] if which == "--preset" else [str(folders[which])]
    if not any(word.startswith("--generate") for word in extra):
        extra = [*extra, "--generate=2"]
    check_cli(["inspect", *source, f"--text={text}", *extra, "--out", str(ROOT / "report.html")])


@FEW
@given(which=st.sampled_from(["lm", "encoder", "hf", "text"]), texts=st.lists(WORD, min_size=1, max_size=3),
       extra=flags({"--similarity": None, "--pooling": st.sampled_from(["mean", "cls", "max"]), "--digits": NUMBER}))
def test_cli_embed_never_shows_a_traceback(folders, which, texts, extra):
    check_cli(["embed", "--model", str(folders[which]), *extra, "--", *texts])


@settings(max_examples=8, deadline=None)
@given(which=st.sampled_from(["lm", "encdec", "hf", "text", "root"]), extra=flags({}))
def test_cli_convert_never_shows_a_traceback(folders, which, extra):
    check_cli(["convert", str(folders[which]), str(ROOT / "converted"), *extra])


@FAST
@given(extra=flags({"--lr": NUMBER, "--max_steps": NUMBER, "--device": st.sampled_from(["cpu", "tpu", "cuda:x"]),
                    "--model.d_model": NUMBER, "--model.norm_eps": NUMBER, "--model.pos": WORD,
                    "--batch_size": NUMBER, "--grad_clip": NUMBER, "--weight_decay": NUMBER, "--seed": NUMBER,
                    "--out_dir": st.sampled_from(["fuzz-out", "src.txt", ""]), "--config": WORD,
                    "--objective": st.sampled_from(["clm", "mlm", "x"])}))
def test_cli_train_never_shows_a_traceback(folders, extra):
    # the data is shorter than one window (block_size 64), so no run ever starts: only parsing and checks
    check_cli(["train", "--data", str(folders["text"]), "--progress", "false", *extra, "--block_size", "64",
               "--tokenizer", "char"])


@FAST
@given(argv=st.lists(st.sampled_from(["generate", "translate", "inspect", "embed", "convert", "nope", "", "-x",
                                      "--version", "--prompt", "1e9", "\udcff"]), max_size=4))
def test_cli_top_level_never_shows_a_traceback(argv):
    check_cli(argv)


# ---------------------------------------------------------------------------------------------- the loaders
BIG_NUMBERS = st.sampled_from(["9" * 5000, "-" + "1" * 4301, "1e999999", "0x" + "f" * 5000, "1" * 4300])
DOCUMENTS = st.one_of(st.binary(max_size=80), JSONISH.map(lambda v: json.dumps(v).encode()),
                      BIG_NUMBERS.map(lambda n: f'{{"step": 1, "x": {n}}}'.encode()),
                      st.integers(1, 3000).map(lambda depth: ("[" * depth + "]" * depth).encode()),
                      BIG_NUMBERS.map(lambda n: f"a: {n}\n".encode()))


@FAST
@given(content=DOCUMENTS, numbers=st.booleans())
def test_loaders_read_any_bytes_or_give_one_glassformer_error(content, numbers):
    """Every reader of glassformer.io.loaders, fed arbitrary bytes, deep nesting and numbers past Python's
    int-digit limit: a value, or a GlassformerError; never a ValueError, RecursionError or panic."""
    from glassformer.io.loaders import load_json, load_yaml, read_records

    path = ROOT / "document"
    path.write_bytes(content)
    for read in (lambda: load_json(path), lambda: load_yaml(path), lambda: read_records(path, numbers)):
        with contextlib.suppress(GlassformerError):
            read()


PADDING = st.fixed_dictionaries({}, optional={
    "strategy": st.one_of(st.just("BatchLongest"), st.fixed_dictionaries({"Fixed": st.one_of(INTS, SCALARS)}),
                          JSONISH),
    "pad_to_multiple_of": st.one_of(INTS, SCALARS), "direction": st.sampled_from(["Right", "Left", "Up"]),
    "pad_id": st.one_of(INTS, SCALARS), "pad_type_id": INTS, "pad_token": st.text(max_size=4)})
TRUNCATION = st.fixed_dictionaries({}, optional={
    "max_length": st.one_of(INTS, SCALARS), "stride": st.one_of(INTS, SCALARS),
    "strategy": st.sampled_from(["LongestFirst", "OnlyFirst", "x"]), "direction": st.sampled_from(["Right", "x"])})


@FAST
@given(padding=st.one_of(st.none(), PADDING, JSONISH), truncation=st.one_of(st.none(), TRUNCATION, JSONISH))
def test_a_tokenizer_json_with_any_padding_or_truncation_loads_or_is_one_error(padding, truncation):
    """Issue 31: a padding length of 2**40 aborted the process inside the Rust library."""
    from glassformer.io.loaders import rust_tokenizer

    data = json.loads(tokenizer("bpe").hf.to_str())
    data.update(padding=padding, truncation=truncation)
    try:
        rust = rust_tokenizer(data, Path("tokenizer.json"))
    except GlassformerError:
        return
    rust.encode_batch(["hello", "world and more"])


@FEW
@given(cut=st.integers(0, 4000), flips=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=4),
       deflate=st.booleans())
def test_a_damaged_torch_state_loads_or_is_one_error(cut, flips, deflate):
    """A real train_state.pt cut, with bytes changed, or its records deflated: a dict or one error."""
    import zipfile

    from glassformer.io.loaders import load_state_file

    path = ROOT / "state.pt"
    torch.save({"step": 3, "m": torch.arange(200, dtype=torch.float32), "rng": torch.zeros(5, dtype=torch.uint8)}, path)
    if deflate:
        with zipfile.ZipFile(path) as archive:
            records = [(info.filename, archive.read(info)) for info in archive.infolist()]
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in records:
                archive.writestr(name, data)
    content = bytearray(path.read_bytes())
    for place, value in flips:
        if place < len(content):
            content[place] = value
    path.write_bytes(bytes(content[:max(cut, 1)] if cut < len(content) else content))
    with contextlib.suppress(GlassformerError):
        assert isinstance(load_state_file(path), dict)


# ------------------------------------------------------------------------- command-line values typed by field
ARGV_TEXT = st.text(st.characters(exclude_characters="\x00"), min_size=1, max_size=24)  # what argv can hold
YAML_WORDS = st.sampled_from(["exp #2", "a\nb", "null", "yes", "{x}", "0123", "[a]", "&a x", "*a", "- x", "key: v",
                              "~", "!!python/object x", "'q'", " lead", "1e3", "%TAG"])
STRING_VALUES = st.one_of(YAML_WORDS, ARGV_TEXT, st.builds(lambda a, w, b: a + w + b, ARGV_TEXT, YAML_WORDS, ARGV_TEXT))
STRING_KEYS = ("out_dir", "cache_dir", "device", "max_memory", "src")


@FEW
@given(key=st.sampled_from(STRING_KEYS), text=STRING_VALUES, glued=st.booleans())
def test_a_string_option_takes_the_text_as_written(key, text, glued):
    """``--out_dir 'exp #2'``, ``$'a\\nb'``, ``null``, ``yes``, ``{x}``, ``0123``: a string field holds exactly
    what was typed (it was read as YAML: a comment cut it, null and yes changed type)."""
    from glassformer.cli.commands.overrides import overrides_from_argv
    from glassformer.training import apply_overrides

    argv = [f"--{key}={text}"] if glued else [f"--{key}", text]
    data = apply_overrides({}, overrides_from_argv(argv))
    try:
        config = TrainConfig.from_dict(data)
    except GlassformerError:  # a device or size that is no such thing; a folder name the folder check refuses
        return
    expected = os.path.expanduser(text) if key in ("out_dir", "cache_dir", "src") else text
    assert getattr(config, key) == expected


@FEW
@given(text=st.one_of(ARGV_TEXT, st.sampled_from(["[a.txt, b.txt]", "{n_layers: 2}", "[[0, 1]]", "&a [1, *a]", "null",
                                                  "0123", "yes", "1e-3", "nan", "[" * 3000])),
       key=st.sampled_from(["max_steps", "lr", "compile", "num_threads", "model.n_layers",
                                            "watch.every", "data", "model", "watch.heads", "specials"]))
def test_a_typed_option_is_its_type_or_one_error(text, key):
    """A number, bool, list or mapping option: parsed as its field's type (YAML, bounded and without aliases,
    only for lists and mappings), or one GlassformerError naming the option."""
    from glassformer.cli.commands.overrides import overrides_from_argv
    from glassformer.training import apply_overrides

    try:
        config = TrainConfig.from_dict(apply_overrides({}, overrides_from_argv([f"--{key}", text])))
    except GlassformerError:
        return
    head, _, rest = key.partition(".")
    value = getattr(config, head)[rest] if rest else getattr(config, head)
    kind = {"max_steps": int, "lr": float, "compile": bool, "n_layers": int, "every": int, "data": list,
            "model": dict, "heads": list, "specials": (list, type(None)), "num_threads": (int, type(None))}
    assert isinstance(value, kind[rest or head]) and not isinstance(value, str)

"""Issue 47: what a hostile user reached past the checks at 6ed5783, refused at each public entry with one
error naming the argument (root causes 5, 6 and 8): files and thread counts sized before they are read or
started, circuit and lens arguments, older API values, tokenizers' Rust failures, paths and recipe options."""

from __future__ import annotations

import json
import resource

import pytest
import torch

from glassformer import ModelConfig, build_model
from glassformer.errors import ArgumentTypeError, BadFileError, GlassformerError, OutOfMemoryError

GB = 10**9


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(ModelConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=16)).eval()


# ------------------------------------------------------------------------------------------ root cause 5: memory
def test_a_config_file_is_sized_before_it_is_parsed(tmp_path):
    """A 17 MB config.json was parsed whole (5x its size in memory) before its unknown key was named."""
    file = tmp_path / "config.json"
    file.write_text('{"vocab_size": 10, "padding": "' + "x" * (17 * 2**20) + '"}')
    with pytest.raises(BadFileError, match=r"is 17,825,[0-9]{3} bytes, too large for a JSON config file "
                                           r"\(at most 16,777,216\)"):
        ModelConfig.from_json(file)


def test_a_huge_added_token_is_refused_before_the_tokenizer_is_built(tmp_path):
    from tokenizers import Tokenizer, models

    from glassformer.tokenizers.hf import HFTokenizer

    rust = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    data = json.loads(rust.to_str())
    data["added_tokens"] = [{"id": 2, "content": "b" * 100_000, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": False}]
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(BadFileError, match=r"added_tokens\[0\] is 100,000 characters long, expected at most 4,096"):
        HFTokenizer.from_dir(tmp_path)


def _rlimit(monkeypatch, tmp_path, address: int | None, nproc: int | None = None) -> None:
    from glassformer.io import budget

    (tmp_path / "statm").write_text("0 0 0 0 0 0 0\n")

    def getrlimit(kind: int) -> tuple[int, int]:
        value = address if kind == resource.RLIMIT_AS else nproc
        return (resource.RLIM_INFINITY if value is None else value), resource.RLIM_INFINITY
    monkeypatch.setattr(budget, "SOURCES", budget.MemorySources(statm=tmp_path / "statm", getrlimit=getrlimit,
                                                                gpu=False))


def test_thread_counts_are_checked_against_ulimit(monkeypatch, tmp_path):
    """num_threads 4096 under ulimit -v 3 GB ended the process in libgomp with no glassformer line."""
    from glassformer.io.budget import check_threads

    _rlimit(monkeypatch, tmp_path, 3 * GB)
    check_threads(4)
    with pytest.raises(OutOfMemoryError, match=r"num_threads=4096 needs at least 295 GB of address space .* left "
                                               r"under ulimit -v \(RLIMIT_AS 3 GB"):
        check_threads(4096)
    _rlimit(monkeypatch, tmp_path, None, nproc=100)
    with pytest.raises(GlassformerError, match=r"num_threads=200 is more threads than ulimit -u allows"):
        check_threads(200)


def test_edge_attribution_is_estimated_before_it_allocates(model, monkeypatch, tmp_path):
    from glassformer.interpret.circuits import edge_attribution
    from glassformer.io.budget import address_reserve

    ids = torch.zeros(4096, 16, dtype=torch.long)  # 5 x (S=7 + R=15) writes of 4096 x 16 x 16 floats: 462 MB
    _rlimit(monkeypatch, tmp_path, 200 * 10**6 + address_reserve())
    with pytest.raises(OutOfMemoryError, match=r"edge_attribution over 7 senders x 15 receivers on \(4096, 16\) "
                                               r"tokens needs at least 4[6-9][0-9] MB, more than the 200 MB left"):
        edge_attribution(model, ids, ids, lambda logits: logits[:, -1, 0].mean())


# ------------------------------------------------------------------------------ root cause 6: API arguments
def test_circuit_arguments_are_checked(model):
    from glassformer.interpret.circuits import edge_attribution, path_patching

    ids = torch.randint(0, 20, (2, 6))

    def metric(logits):
        return logits[:, -1, 0].mean()
    for bad, message in ((torch.zeros(0, 6, dtype=torch.long), r"clean must hold at least one sequence"),
                         (torch.zeros(2, 0, dtype=torch.long), r"clean must hold at least one sequence"),
                         (torch.full((2, 6), 99), r"token id 99 in clean is out of range")):
        with pytest.raises(GlassformerError, match=message):
            edge_attribution(model, bad, bad, metric)
    with pytest.raises(GlassformerError, match="metric must be differentiable"):
        edge_attribution(model, ids, ids, lambda logits: logits[0, -1, 0].detach(), method="eap")
    with pytest.raises(GlassformerError, match="metric must return a 0-dim float tensor"):
        edge_attribution(model, ids, ids, lambda logits: logits.argmax(), method="eap")
    for edges in ("L0H0->L1H0.q", [("L0H0",)], [(torch.tensor(1), "logits")], None):
        with pytest.raises(ArgumentTypeError, match="edge"):
            path_patching(model, ids, ids, metric, edges)


def test_older_api_checks(model, tmp_path):
    from glassformer.interpret.lens import direct_logit_attribution
    from glassformer.io.state_check import check_optimizer_state
    from glassformer.tokenizers import CharTokenizer

    ids = torch.randint(0, 20, (2, 6))
    with pytest.raises(GlassformerError, match="token id 999 in token is out of range"):
        direct_logit_attribution(model, ids, token=999)
    with pytest.raises(GlassformerError, match=r"position must be an int in \[-6, 5\], got 6"):
        direct_logit_attribution(model, ids, token=1, position=6)
    for eps in (float("nan"), -1.0, 0.0):
        with pytest.raises(GlassformerError, match="norm_eps must be a finite number > 0"):
            ModelConfig(vocab_size=10, norm="rmsnorm", norm_eps=eps)
    with pytest.raises(ArgumentTypeError, match="token id must be an int, got True"):
        CharTokenizer.from_text("abc").decode([True, False])
    if not torch.cuda.is_available():
        from glassformer.tokenizers import CharTokenizer as Char
        from glassformer.training import load, save_checkpoint

        save_checkpoint(tmp_path / "ckpt", model, Char.from_text("abcdefghijklmnop"))
        with pytest.raises(GlassformerError, match="map_location='cuda' asks for a GPU"):
            load(tmp_path / "ckpt", map_location="cuda")
    adam = torch.optim.Adam(model.parameters())
    saved = adam.state_dict()
    saved["param_groups"][0]["eps"] = -1.0
    with pytest.raises(BadFileError, match=r"optimizer.param_groups\[0\].eps holds -1.0, expected a number in \[0"):
        check_optimizer_state(saved, adam, "state.pt")


def test_replay_checks_its_probe_text(model):
    from glassformer.tokenizers import CharTokenizer
    from glassformer.training.microscope import replay

    tok = CharTokenizer.from_text("abcdefghijklmnop")
    for text in (torch.arange(6), torch.zeros(0, 6, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long)):
        with pytest.raises(GlassformerError, match="probe_text"):
            replay([(0, model, tok)], probe_text=text)


# ---------------------------------------------------------------------------- root cause 8: tokenizers, paths
def _hf(tokenizer):
    from glassformer.io.loaders import rust_tokenizer
    from glassformer.tokenizers.hf import HFTokenizer

    return HFTokenizer(rust_tokenizer(json.loads(tokenizer.to_str()), "tokenizer.json"), {})


def test_a_tokenizers_rust_failures_are_one_error():
    from tokenizers import Regex, Tokenizer, models, normalizers

    for model_type in (models.WordPiece, models.WordLevel):
        tok = _hf(Tokenizer(model_type({"a": 0, "b": 1}, unk_token="[UNK]")))
        with pytest.raises(GlassformerError, match=r"could not encode the text .*Missing \[UNK\] token.*: the "
                                                   "tokenizer's vocabulary lacks the unknown token"):
            tok.encode("zzz")
    rust = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    rust.normalizer = normalizers.Replace(Regex("(a|aa)+c"), "x")  # catastrophic backtracking: a Rust panic
    tok = _hf(rust)
    with pytest.raises(GlassformerError, match="could not encode the text .*retry-limit"):
        tok.encode("a" * 5000)
    with pytest.raises(GlassformerError, match="could not encode the text .*retry-limit"):
        tok.encode_batch(["a", "a" * 5000])


def test_environment_variables_in_paths_are_expanded_or_refused(tmp_path, monkeypatch):
    from glassformer.training.config import TrainConfig

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GF_RUNS", str(tmp_path / "runs"))
    monkeypatch.delenv("GF_NOT_SET", raising=False)
    config = TrainConfig.from_dict({"data": ["$HOME/corpus.txt"], "out_dir": "${GF_RUNS}/x"})
    assert config.data == [str(tmp_path / "corpus.txt")] and config.out_dir == str(tmp_path / "runs" / "x")
    with pytest.raises(GlassformerError, match=r"names the environment variable \$GF_NOT_SET, which is not set"):
        TrainConfig.from_dict({"data": ["a.txt"], "out_dir": "$GF_NOT_SET/x"})


def test_an_sae_folder_under_a_non_utf8_path_is_written(tmp_path):
    from glassformer.interpret.sae.model import SparseAutoencoder, load_sae, save_sae

    sae = SparseAutoencoder(d_in=4, d_sae=64, kind="relu")
    folder = tmp_path / "sd\udcff" / "sae"
    save_sae(sae, folder, {"out_dir": str(folder.parent)})
    assert load_sae(folder).config.d_sae == 64


@pytest.mark.parametrize("recipe,message", [
    ({"task": "lm", "prompts": 5}, "recipe.prompts must be a non-empty list of strings, got 5"),
    ({"task": "lm", "temperature": "hot"}, "recipe.temperature must be a finite number > 0, got 'hot'"),
    ({"task": "lm", "temperatur": 0.5}, r"unknown recipe \(task lm\) key\(s\) \['temperatur'\]"),
    ({"task": "translation", "beams": [0]}, "recipe.beams must be a non-empty list of ints >= 1"),
    ({"task": "induction", "gpt2": "yes"}, "recipe.gpt2 must be true or false")])
def test_recipe_options_are_checked(tmp_path, recipe, message):
    from glassformer.recipes import load_recipe

    with pytest.raises(GlassformerError, match=message):
        load_recipe({"recipe": recipe, "out_dir": str(tmp_path / "out")})


def test_a_checkpoint_moved_while_read_is_read_again(tmp_path):
    """A training replaced out/last and removed the folder while glassformer.load read it: torch's or
    safetensors' RuntimeError was raised as it was (3 times in 866 reads)."""
    from glassformer.training.run_dir import read_pointed

    for step in (1, 2):
        (tmp_path / f"ckpt-00000{step}").mkdir()
    (tmp_path / "last").symlink_to("ckpt-000001")
    seen = []

    def read(folder):
        seen.append(folder.name)
        if folder.name == "ckpt-000001":  # the trainer moves the pointer while this read fails
            (tmp_path / "last").unlink()
            (tmp_path / "last").symlink_to("ckpt-000002")
            raise RuntimeError("PytorchStreamReader failed reading zip archive")
        return folder.name
    assert read_pointed(tmp_path / "last", read) == "ckpt-000002" and seen == ["ckpt-000001", "ckpt-000002"]

    def always_moving(folder):
        target = "ckpt-000002" if folder.name == "ckpt-000001" else "ckpt-000001"
        (tmp_path / "last").unlink()
        (tmp_path / "last").symlink_to(target)
        raise RuntimeError("file removed")
    with pytest.raises(GlassformerError, match="moved to another checkpoint 20 times while it was read"):
        read_pointed(tmp_path / "last", always_moving)
    with pytest.raises(RuntimeError, match="a bug"):  # nothing moved: the error as it is
        read_pointed(tmp_path / "last", lambda folder: (_ for _ in ()).throw(RuntimeError("a bug")))


def test_reading_a_small_json_file_sets_aside_its_size_not_the_bound(tmp_path):
    """read(max_bytes + 1) set 256 MiB (1 GiB before) aside for every tokenizer.json read: under ulimit -v
    that is address space a 2-byte file took."""
    from allocation_helpers import allocations
    from glassformer.io.loaders import load_json

    (tmp_path / "t.json").write_text('{"a": 1}')
    with allocations() as seen:
        assert load_json(tmp_path / "t.json", "tokenizer file") == {"a": 1}
    assert seen.total() < 2**20, seen


def test_attention_names_a_width_that_is_not_d_model():
    """MultiHeadAttention given x of the wrong width: one GlassformerError naming the width and d_model (it was
    torch's RuntimeError from the projection), self- and cross-attention alike; the right width still works."""
    from glassformer import MultiHeadAttention

    attention = MultiHeadAttention(16, 4)
    with pytest.raises(GlassformerError, match=r"x has width 8 .*expects d_model=16"):
        attention(torch.zeros(2, 3, 8))
    with pytest.raises(GlassformerError, match=r"x has width 8 .*expects d_model=16"):
        attention(torch.zeros(2, 3, 8), torch.zeros(2, 5, 16))
    out, _ = attention(torch.zeros(2, 3, 16))
    assert out.shape == (2, 3, 16)

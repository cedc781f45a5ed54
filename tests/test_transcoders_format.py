"""circuit-tracer's transcoder folder, read and written by glassformer.interpret.transcoders.format: a round trip
keeps every tensor, and a crafted or damaged folder gets one BadFileError line naming the file."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from glassformer import TransformerLM
from glassformer.errors import BadFileError, GlassformerError, MissingFileError, NotOursError
from glassformer.interpret.transcoders import (
    Transcoders,
    is_transcoder_folder,
    load_transcoders,
    random_transcoders,
    save_transcoders,
)

FIELDS = ("W_enc", "b_enc", "W_dec", "b_dec", "W_skip", "threshold")


def same(a: Transcoders, b: Transcoders) -> None:
    assert (a.kind, a.activation, a.k, a.n_layers, a.scan) == (b.kind, b.activation, b.k, b.n_layers, b.scan)
    for x, y in zip(a.layers, b.layers, strict=True):
        for name in FIELDS:
            u, v = getattr(x, name), getattr(y, name)
            assert (u is None) == (v is None), name
            if u is not None:
                assert torch.equal(u, v), name


@pytest.mark.parametrize(("kind", "activation", "skip"), [
    ("plt", "relu", False), ("plt", "jumprelu", True), ("plt", "topk", False),
    ("clt", "relu", False), ("clt", "jumprelu", False)])
def test_round_trip_keeps_every_tensor(tmp_path, kind, activation, skip):
    tc = random_transcoders(3, 8, 12, kind=kind, activation=activation, k=3 if activation == "topk" else None,
                            skip=skip, seed=1)
    save_transcoders(tc, tmp_path / "tc")
    assert is_transcoder_folder(tmp_path / "tc")
    same(tc, load_transcoders(tmp_path / "tc"))
    save_transcoders(random_transcoders(3, 8, 12, kind=kind, seed=2), tmp_path / "tc")  # ours: replaced
    assert load_transcoders(tmp_path / "tc").activation == "relu"


def test_model_must_fit(tmp_path):
    save_transcoders(random_transcoders(2, 8, 12), tmp_path / "tc")
    fits = TransformerLM(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16)
    assert load_transcoders(tmp_path / "tc", fits).d_transcoder == 12
    with pytest.raises(GlassformerError, match="2 layers of width 8 do not fit a model of 3 layers of width 8"):
        load_transcoders(tmp_path / "tc", TransformerLM(vocab_size=11, d_model=8, n_heads=2, n_layers=3, d_ff=16))
    bad_hook = random_transcoders(2, 8, 12, feature_input_hook="ln9.hook_normalized")
    with pytest.raises(GlassformerError, match="'ln9.hook_normalized' is not a hook point of block 0"):
        bad_hook.check_model(fits)


def test_a_folder_of_someone_else_is_not_replaced(tmp_path):
    (tmp_path / "tc").mkdir()
    (tmp_path / "tc" / "notes.txt").write_text("mine")
    with pytest.raises(NotOursError, match="replaces only folders it wrote"):
        save_transcoders(random_transcoders(1, 4, 4), tmp_path / "tc")
    assert (tmp_path / "tc" / "notes.txt").read_text() == "mine"


def _plt(tmp_path, **tensors):
    folder = tmp_path / "crafted"
    save_transcoders(random_transcoders(1, 4, 6), folder)
    good = {"W_enc": torch.zeros(6, 4), "b_enc": torch.zeros(6), "W_dec": torch.zeros(6, 4), "b_dec": torch.zeros(4)}
    save_file({k: v for k, v in {**good, **tensors}.items() if v is not None}, str(folder / "layer_0.safetensors"))
    return folder


@pytest.mark.parametrize(("tensors", "match"), [
    ({"W_dec": torch.zeros(6, 5)}, r"W_dec has shape \(6, 5\), expected \(6, 4\)"),
    ({"W_enc": torch.zeros(6, 4, dtype=torch.int32)}, "W_enc has dtype I32, expected a float"),
    ({"b_dec": torch.tensor([0.0, float("nan"), 0, 0])}, "b_dec holds NaN or inf"),
    ({"W_dec": None}, "missing tensor 'W_dec'"),
    ({"surprise": torch.zeros(1)}, "unexpected tensor 'surprise'"),
])
def test_crafted_layer_files_get_one_line(tmp_path, tensors, match):
    with pytest.raises(BadFileError, match=match) as error:
        load_transcoders(_plt(tmp_path, **tensors))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("config", "match"), [
    ("model_kind: sae\nfeature_input_hook: a\nfeature_output_hook: b\n", "model_kind must be"),
    ("model_kind: transcoder_set\nfeature_output_hook: b\n", "feature_input_hook must be a hook name"),
    ("model_kind: transcoder_set\nfeature_input_hook: a\nfeature_output_hook: b\ntranscoders: [../x.safetensors]\n",
     "outside the folder"),
    ("model_kind: transcoder_set\nfeature_input_hook: a\nfeature_output_hook: b\n"
     "transcoders: ['hf://org/repo/layer_0.safetensors']\n", "only local files"),
    ("model_kind: transcoder_set\nfeature_input_hook: a\nfeature_output_hook: b\nactivation: topk\n", "needs k"),
    ("a: &a [*a]\n", "not valid YAML|nested|mapping"),
    ("[1, 2]\n", "must hold a mapping"),
])
def test_crafted_configs_get_one_line(tmp_path, config, match):
    folder = _plt(tmp_path)
    (folder / "config.yaml").write_text(config)
    with pytest.raises(BadFileError, match=match) as error:
        load_transcoders(folder)
    assert "\n" not in str(error.value)


def test_truncated_and_missing_files(tmp_path):
    folder = _plt(tmp_path)
    data = (folder / "layer_0.safetensors").read_bytes()
    (folder / "layer_0.safetensors").write_bytes(data[:-20])
    with pytest.raises(BadFileError, match="layer_0.safetensors"):
        load_transcoders(folder)
    (folder / "layer_0.safetensors").unlink()
    with pytest.raises(MissingFileError, match="layer_0.safetensors"):
        load_transcoders(folder)
    with pytest.raises(MissingFileError, match="does not exist"):
        load_transcoders(tmp_path / "nowhere")


def test_clt_decoder_must_span_later_layers(tmp_path):
    folder = tmp_path / "clt"
    save_transcoders(random_transcoders(3, 4, 6, kind="clt"), folder)
    save_file({"W_dec_1": torch.zeros(6, 3, 4)}, str(folder / "W_dec_1.safetensors"))
    with pytest.raises(BadFileError, match=r"W_dec_1 has shape \(6, 3, 4\), expected \(6, 2, 4\)"):
        load_transcoders(folder)

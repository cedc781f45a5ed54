"""Checkpoints written with the previous state-dict names (n1/n2/n3, logits_bias, head_transform,
embeddings.dec_pos/dec_norm) still load, with identical logits."""

from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import load_file, save_file

import glassformer
from glassformer import ModelConfig, build_model
from glassformer.models import upgrade_state_dict
from glassformer.tokenizers import CharTokenizer
from glassformer.training.checkpoint import save_checkpoint

TEXT = "hello world\n"
SMALL = dict(d_model=16, n_heads=2, d_ff=32, max_len=16)
CASES = {
    "lesson2": dict(n_layers=2),
    "untied-with-bias": dict(n_layers=1, pos="learned", tie=False, head_bias=True),
    "bert-like": dict(n_layers=2, attn="bidirectional", pos="learned", norm_first=False, head_bias=True,
                      head_transform=True, n_token_types=2, embed_norm=True),
    "encdec": dict(arch="encoder-decoder", n_enc=1, n_dec=2),
    "bart-like": dict(arch="encoder-decoder", n_enc=1, n_dec=1, pos="learned", pos_offset=2, split_positions=True,
                      embed_norm=True, norm_first=False, head_bias=True),
    "bart-untied": dict(arch="encoder-decoder", n_enc=1, n_dec=1, pos="learned", pos_offset=2,
                        split_positions=True, embed_norm=True, norm_first=False, head_bias=True, tie=False),
}
# today's name -> the name the previous version wrote (written out here, independently of models/legacy.py)
OLD_NAMES = [
    (r"(^|\.)attn_norm\.", r"\1n1."),
    (r"(^|\.)cross_norm\.", r"\1n2."),
    (r"(^|\.)ffn_norm\.", r"\1n3."),
    (r"^head\.transform\.", "head_transform."),
    (r"^dec_embedding\.pos\.", "embeddings.dec_pos."),
    (r"^dec_embedding\.norm\.", "embeddings.dec_norm."),
]


def old_name(name: str, tied: bool) -> str:
    for new, old in OLD_NAMES:
        name = re.sub(new, old, name)
    return "logits_bias" if tied and name == "head.bias" else name


def logits(model, ids):
    with torch.no_grad():
        if model.config.arch == "encoder-decoder":
            return model(ids, ids[:, :3])
        return model(ids)


@pytest.mark.parametrize("case", sorted(CASES))
def test_checkpoint_with_old_key_names_loads_with_identical_logits(tmp_path, case):
    torch.manual_seed(0)
    tok = CharTokenizer.from_text(TEXT)
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, **SMALL, **CASES[case])).eval()
    with torch.no_grad():  # every parameter matters (norm gains and zero biases included)
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    path = save_checkpoint(tmp_path / "ckpt", model, tok)
    weights = load_file(str(path / "model.safetensors"))
    old = {old_name(name, model.config.tie): t for name, t in weights.items()}
    assert set(old) != set(weights)  # the file really uses old names
    save_file(old, str(path / "model.safetensors"), metadata={"format": "pt"})

    loaded, _ = glassformer.load(path)
    ids = torch.tensor([tok.encode("hello"), tok.encode("world")])
    assert torch.equal(logits(loaded, ids), logits(model, ids))


def test_upgrade_leaves_todays_names_alone_and_refuses_a_mix():
    model = build_model(ModelConfig(vocab_size=10, **SMALL, n_layers=1, head_bias=True, head_transform=True,
                                    attn="bidirectional"))
    state = model.state_dict()
    assert list(upgrade_state_dict(state)) == list(state)
    assert "logits_bias" not in state and "head.bias" in state
    with pytest.raises(ValueError, match="both 'blocks.0.n1.weight' and"):
        upgrade_state_dict({"blocks.0.attn_norm.weight": torch.ones(1), "blocks.0.n1.weight": torch.ones(1)})

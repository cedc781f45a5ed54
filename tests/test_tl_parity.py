"""TransformerLens's per-head hooks, backward hooks, cache algebra and weight-space circuits against
TransformerLens 4.x itself, on the random GPT-2 (random norm gains) and Llama (RMSNorm, RoPE, GQA,
SwiGLU) folders of tests/test_hooks_vs_transformer_lens.py. TransformerLens runs in compatibility mode
without weight processing (``enable_compatibility_mode(no_processing=True)``: glassformer keeps the
model's own weights), with its flags on for the hooks it only has behind them.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from glassformer.interpret import hooks, run_with_cache, run_with_hooks

pytest.importorskip("transformer_lens", reason="transformer-lens is not installed (pip install 'glassformer[dev]')")
from test_hooks_vs_transformer_lens import _ids, _pair  # noqa: E402  (the same random folders)

ATOL = 1e-5


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def pair(request, tmp_path_factory):
    ours, theirs = _pair(request.param, tmp_path_factory.mktemp(request.param))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs.enable_compatibility_mode(no_processing=True, disable_warnings=True)
    return request.param, ours, theirs


def _flags(bridge, *, result=False, split=False, attn_in=False, mlp_in=False):
    """TransformerLens's hook flags (split q/k/v inputs and attn_in exclude each other there)."""
    bridge.set_use_split_qkv_input(False)
    bridge.set_use_attn_in(False)
    bridge.set_use_attn_result(result)
    bridge.set_use_split_qkv_input(split)
    bridge.set_use_attn_in(attn_in)
    bridge.set_use_hook_mlp_in(mlp_in)


def _close(mine, reference, name=""):
    assert mine.shape == reference.shape, name
    torch.testing.assert_close(mine, reference.to(mine.dtype), rtol=0, atol=ATOL, msg=name)


PER_HEAD = ["result", "q_input", "k_input", "v_input", "mlp_in"]


def test_per_head_hooks_hold_the_same_tensors(pair):
    _, ours, theirs = pair
    ids = _ids(0)
    _flags(theirs, result=True, split=True, mlp_in=True)
    with torch.no_grad():
        _, their_cache = theirs.run_with_cache(ids)
        logits, cache = run_with_cache(ours, ids, names=PER_HEAD)
        plain = ours(ids)
    torch.testing.assert_close(logits, plain, rtol=0, atol=ATOL)  # hooked per head, the same forward
    assert len(cache) == 10
    for name in cache:
        _close(cache[name], their_cache[name], name)
    _flags(theirs, attn_in=True)
    with torch.no_grad():
        _, their_cache = theirs.run_with_cache(ids)
        _, cache = run_with_cache(ours, ids, names="attn_in")
    for layer in range(2):
        name = f"blocks.{layer}.hook_attn_in"
        _close(cache[name], their_cache[name], name)


def _edit_head(index):
    """A hook adding a fixed vector to one head's slice (a per-head edit: not scale-invariant)."""
    def edit(x, hook):
        x = x.clone()
        x[:, :, index] += 5.0 * torch.linspace(-1.0, 1.0, x.shape[-1]) ** 3
        return x
    return edit


@pytest.mark.parametrize("name, flags", [
    ("blocks.1.attn.hook_result", dict(result=True)),
    ("blocks.0.hook_q_input", dict(split=True)),
    ("blocks.0.hook_k_input", dict(split=True)),
    ("blocks.1.hook_v_input", dict(split=True)),
    ("blocks.0.hook_attn_in", dict(attn_in=True)),
])
def test_editing_one_head_gives_the_same_logits(pair, name, flags):
    _, ours, theirs = pair
    ids = _ids(1)
    _flags(theirs, **flags)
    hook = [(name, _edit_head(1))]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = theirs.run_with_hooks(ids, fwd_hooks=hook)
        edited = run_with_hooks(ours, ids, fwd_hooks=hook)
        plain = ours(ids)
    torch.testing.assert_close(edited, reference, rtol=0, atol=ATOL)
    assert (edited - plain).abs().max() > 1e-4  # the edit changed something


def test_editing_mlp_in_leaves_the_residual_alone(pair):
    _, ours, theirs = pair
    ids = _ids(2)
    _flags(theirs, mlp_in=True)

    def shift(x, hook):
        return x + 0.5

    def shift_in_place(x, hook):  # edits the copy the MLP reads, not the stream (TransformerLens's Llama
        x += 0.5                  # bridge lets this one reach the stream: docs/interpret.md)
        return x

    with torch.no_grad():
        reference = theirs.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_mlp_in", shift)])
        edited = run_with_hooks(ours, ids, fwd_hooks=[("blocks.0.hook_mlp_in", shift)])
        in_place = run_with_hooks(ours, ids, fwd_hooks=[("blocks.0.hook_mlp_in", shift_in_place)])
        with hooks(ours, [("blocks.0.hook_mlp_in", shift_in_place)]):
            with_mid = run_with_cache(ours, ids, names="blocks.0.hook_resid_mid")[1]
        plain = run_with_cache(ours, ids, names="blocks.0.hook_resid_mid")[1]
    torch.testing.assert_close(edited, reference, rtol=0, atol=ATOL)
    torch.testing.assert_close(in_place, edited, rtol=0, atol=0)
    torch.testing.assert_close(with_mid["blocks.0.hook_resid_mid"], plain["blocks.0.hook_resid_mid"], rtol=0, atol=0)

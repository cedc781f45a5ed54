"""TransformerLens's spellings: ``get_act_name`` (against TransformerLens's own function), ``model.W_Q`` ...
(against :func:`glassformer.interpret.weights`), ``model.run_with_hooks`` / ``run_with_cache`` (against the free
functions), and the names ``glassformer.interpret`` exports."""

import pytest
import torch

from glassformer import EncoderDecoder, TransformerLM
from glassformer.errors import ArgumentTypeError, GlassformerError
from glassformer.interpret import get_act_name, hook_points, run_with_cache, run_with_hooks, weights

SPELLINGS = [("k", 6, "a"), ("pre", 2, None), ("embed", None, None), ("normalized", 27, "ln2"), ("k6", None, None),
             ("scale4ln1", None, None), ("pre5", None, None), ("attn", 0, None), ("attn_logits", 1, None),
             ("resid_pre", 3, None), ("mlp_out", 0, None), ("z", 1, None), ("query", 2, None), ("mlp_post", 1, None),
             ("blocks.0.attn.hook_z", None, None), ("scale", None, None), ("pos_embed", None, None)]


@pytest.mark.parametrize("args", SPELLINGS)
def test_get_act_name_spells_as_transformer_lens(args):
    utilities = pytest.importorskip("transformer_lens.utilities.components_utils")
    assert get_act_name(*args) == utilities.get_act_name(*args)


def test_get_act_name_names_only_points_glassformer_has():
    model = TransformerLM(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16)
    points = hook_points(model)
    for name in ("attn0", "resid_post1", "v1", "post0", "normalized1ln2"):
        assert get_act_name(name) in points
    with pytest.raises(GlassformerError, match=r"'blocks.1.mlp.hook_mid', which is no glassformer hook point"):
        get_act_name("mid", 1)
    with pytest.raises(GlassformerError, match="hook_nothing"):
        get_act_name("nothing")
    with pytest.raises(ArgumentTypeError, match="layer must be a block index"):
        get_act_name("z", -1)


def test_stacked_weights_are_the_per_head_views():
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=11, d_model=16, n_heads=4, n_layers=3, d_ff=32, n_kv_heads=2, attn="causal")
    w = weights(model)
    assert model.W_Q.shape == (3, 4, 16, 4) and model.W_K.shape == (3, 2, 16, 4) and model.W_O.shape == (3, 4, 4, 16)
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        torch.testing.assert_close(getattr(model, name).detach(), getattr(w, name), rtol=0, atol=0)
    model.W_Q.sum().backward()  # views of the parameters: gradients flow
    assert model.blocks[1].self_attn.qkv.weight.grad is not None


def test_run_with_hooks_and_cache_as_methods():
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=11, d_model=16, n_heads=4, n_layers=2, d_ff=32).eval()
    ids = torch.randint(0, 11, (2, 6))

    def zero(z, hook):
        return torch.zeros_like(z)
    hooks = [(get_act_name("z", 1), zero)]
    torch.testing.assert_close(model.run_with_hooks(ids, fwd_hooks=hooks), run_with_hooks(model, ids, hooks=hooks),
                               rtol=0, atol=0)
    logits, cache = model.run_with_cache(ids, names_filter=lambda name: name.endswith("hook_pattern"))
    free_logits, free_cache = run_with_cache(model, ids, names="pattern")
    torch.testing.assert_close(logits, free_logits, rtol=0, atol=0)
    assert list(cache) == list(free_cache) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    encdec = EncoderDecoder(vocab_size=11, d_model=8, n_heads=2, n_enc=1, n_dec=1, d_ff=16).eval()
    _, cache = encdec.run_with_cache(ids, ids, names="cross_pattern")
    assert list(cache) == ["decoder_blocks.0.cross_attn.hook_pattern"]


def test_circuit_names_are_exported():
    import glassformer.interpret as interpret
    from glassformer.interpret.circuits import EdgeScores, circuit_metric

    assert interpret.EdgeScores is EdgeScores and interpret.circuit_metric is circuit_metric
    assert {"EdgeScores", "circuit_metric", "get_act_name"} <= set(interpret.__all__)

"""glassformer.interpret: hook points, caches that decompose exactly, patching, ablation, lenses, detectors.

Every equality here is between numbers the model computed and numbers rebuilt from the cache (or from
a model with weights changed by hand), for every attention kind and position scheme.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from glassformer import EncoderDecoder, TransformerLM
from glassformer.generation import generate
from glassformer.interpret import (
    ablate_heads,
    ablation_hooks,
    act_name,
    attention_weights,
    direct_logit_attribution,
    head_ablation_effects,
    head_scores,
    hook_points,
    hooks,
    induction_scores,
    logit_lens,
    patching_effects,
    previous_token_scores,
    record,
    repeated_tokens,
    run_with_cache,
    run_with_hooks,
    run_with_patch,
)
from glassformer.nn.feedforward import activate
from glassformer.nn.taps import Tap

V = 40
SMALL = dict(vocab_size=V, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=32)
LM_CASES = {
    "causal-sinusoidal": dict(),
    "causal-learned-gelu_tanh": dict(pos="learned", activation="gelu_tanh", scale_embeddings=False),
    "causal-rope-gqa": dict(pos="rope", n_kv_heads=2),
    "causal-alibi-mqa": dict(pos="alibi", n_kv_heads=1),
    "llama-style": dict(pos="rope", norm="rmsnorm", activation="swiglu", bias=False, tie=False, n_kv_heads=2),
    "prefix-learned": dict(attn="prefix", pos="learned"),
    "bidirectional-post-norm": dict(attn="bidirectional", pos="learned", norm_first=False, n_token_types=2),
    "causal-none-attn-only": dict(pos="none", attn_only=True),
}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def lm(**kw) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(**{**SMALL, **kw}).eval()


def encdec(**kw) -> EncoderDecoder:
    torch.manual_seed(0)
    return EncoderDecoder(vocab_size=V, d_model=32, n_heads=4, n_enc=2, n_dec=2, d_ff=64, max_len=32, **kw).eval()


def ids(B: int = 2, T: int = 9, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def lm_kwargs(model: TransformerLM) -> dict:
    return {"prefix_len": 4} if model.config.attn == "prefix" else {}


def no_taps(model) -> bool:
    return all(m.fn is None for m in model.modules() if isinstance(m, Tap))


# ---------------------------------------------------------------------------------------------- names
def test_hook_names_are_transformer_lens_names():
    names = list(hook_points(lm(pos="learned")))
    assert names[:3] == ["hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre"]
    assert names[-3:] == ["ln_final.hook_scale", "ln_final.hook_normalized", "ln_final.hook_out"]
    block1 = [n.removeprefix("blocks.1.") for n in names if n.startswith("blocks.1.")]
    norm = ["hook_scale", "hook_normalized", "hook_out"]
    assert block1 == ["hook_resid_pre", *(f"ln1.{n}" for n in norm), "hook_attn_in", "hook_q_input", "hook_k_input",
                      "hook_v_input", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_attn_scores",
                      "attn.hook_pattern", "attn.hook_z", "attn.hook_result", "hook_attn_out", "hook_resid_mid",
                      "hook_mlp_in", *(f"ln2.{n}" for n in norm), "mlp.hook_pre", "mlp.hook_post", "hook_mlp_out",
                      "hook_resid_post"]
    rope_gated = hook_points(lm(pos="rope", activation="swiglu"))
    assert {"blocks.0.attn.hook_rot_q", "blocks.0.attn.hook_rot_k", "blocks.0.mlp.hook_pre_linear"} <= set(rope_gated)
    assert "hook_pos_embed" not in rope_gated
    assert not any(".mlp." in n for n in hook_points(lm(attn_only=True)))
    dec = [n.removeprefix("decoder_blocks.0.") for n in hook_points(encdec()) if n.startswith("decoder_blocks.0.")]
    assert dec[:16] == ["hook_resid_pre", *(f"ln1.{n}" for n in norm), "hook_attn_in", "hook_q_input", "hook_k_input",
                        "hook_v_input", "self_attn.hook_q", "self_attn.hook_k", "self_attn.hook_v",
                        "self_attn.hook_attn_scores", "self_attn.hook_pattern", "self_attn.hook_z",
                        "self_attn.hook_result", "hook_attn_out"]
    assert dec[16:22] == ["hook_resid_mid", *(f"ln2.{n}" for n in norm), "cross_attn.hook_q", "cross_attn.hook_k"]
    assert dec[-11:] == ["cross_attn.hook_result", "hook_cross_attn_out", "hook_resid_mid2", "hook_mlp_in",
                         *(f"ln3.{n}" for n in norm), "mlp.hook_pre", "mlp.hook_post", "hook_mlp_out",
                         "hook_resid_post"]
    assert act_name("pattern", 1) == "blocks.1.attn.hook_pattern"
    assert act_name("cross_z", 0, "decoder") == "decoder_blocks.0.cross_attn.hook_z"


def test_cache_keys_short_names_and_filters():
    model = lm()
    _, cache = run_with_cache(model, ids(), names=["pattern", "blocks.1.hook_resid_post"])
    assert list(cache) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern", "blocks.1.hook_resid_post"]
    assert cache["pattern", 1] is cache["blocks.1.attn.hook_pattern"]
    assert cache.stack("pattern").shape == (2, 2, 4, 9, 9)
    _, cache = run_with_cache(model, ids(), names=lambda name: name.endswith("hook_z"))
    assert list(cache) == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]
    with pytest.raises(KeyError, match="not cached"):
        cache["resid_pre", 0]
    _, cache = run_with_cache(encdec(), ids(), ids(T=5), names="pattern")
    assert cache["pattern", 0, "decoder"].shape == (2, 4, 5, 5)
    with pytest.raises(ValueError, match="add the stack"):
        cache["pattern", 0]


# ---------------------------------------------------------------------------------------------- idle
def test_idle_hooks_change_nothing_and_leave_nothing_behind():
    model = lm(pos="rope")
    x = ids()
    plain = model(x)
    logits, cache = run_with_cache(model, x, names=["resid_post", "z", "q", "mlp_out"])  # no weights asked
    assert torch.equal(logits, plain)  # the same kernels: fused attention stayed
    assert no_taps(model)
    with pytest.raises(RuntimeError, match="boom"), hooks(model, [("z", lambda z, hook: None)]):
        raise RuntimeError("boom")
    assert no_taps(model)
    with hooks(model, [("pattern", lambda p, hook: None)]) as outer:
        with hooks(model, [("blocks.0.attn.hook_pattern", lambda p, hook: p * 1)]):
            assert len(model.blocks[0].self_attn.hook_pattern.fn.fns) == 2
        assert len(model.blocks[0].self_attn.hook_pattern.fn.fns) == 1
        outer.remove()
        outer.remove()
    assert no_taps(model)


# ---------------------------------------------------------------------------------------------- the cache is exact
def _check_block(block, c, prefix: str, attn: str, cross: bool, x_in: torch.Tensor | None) -> None:
    """Rebuild every cached tensor of one block from the cache itself and the block's weights."""
    def at(name):
        return c[f"{prefix}.{name}"]

    eq = dict(rtol=0, atol=2e-5)
    pre_norm = block.norm_first
    resid_pre, attn_out, resid_mid = at("hook_resid_pre"), at("hook_attn_out"), at("hook_resid_mid")
    if x_in is not None:
        torch.testing.assert_close(resid_pre, x_in, **eq)
    # attention: pattern = softmax(scores); z = pattern @ v per head; z through o_proj = attn_out
    pattern, scores = at(f"{attn}.hook_pattern"), at(f"{attn}.hook_attn_scores")
    torch.testing.assert_close(pattern, torch.nan_to_num(scores.softmax(-1)), **eq)
    v = at(f"{attn}.hook_v")  # (B, S, kv, hd)
    v = v.repeat_interleave(pattern.shape[1] // v.shape[2], dim=2)
    z = at(f"{attn}.hook_z")  # (B, T, h, hd)
    torch.testing.assert_close(z, torch.einsum("bhts,bshe->bthe", pattern, v), **eq)
    module = block.cross_attn if attn == "cross_attn" else block.self_attn
    torch.testing.assert_close(module.o_proj(z.flatten(2)), attn_out if attn != "cross_attn"
                               else at("hook_cross_attn_out"), **eq)
    if attn != "cross_attn":
        norm_in = at("ln1.hook_out")
        q = at(f"{attn}.hook_q")
        torch.testing.assert_close(q.flatten(2), module.qkv(norm_in if pre_norm else resid_pre)[..., :q[0, 0].numel()],
                                   **eq)
        if pre_norm:
            torch.testing.assert_close(norm_in, block.attn_norm(resid_pre), **eq)
            torch.testing.assert_close(resid_mid, resid_pre + attn_out, **eq)
        else:
            torch.testing.assert_close(resid_mid, block.attn_norm(resid_pre + attn_out), **eq)
            torch.testing.assert_close(norm_in, resid_mid, **eq)
    after_attn = resid_mid
    if cross:
        after_attn = at("hook_resid_mid2")
        torch.testing.assert_close(after_attn, resid_mid + at("hook_cross_attn_out"), **eq)
    if block.ffn is None:
        torch.testing.assert_close(at("hook_resid_post"), after_attn, rtol=0, atol=0)
        return
    mlp_out, resid_post = at("hook_mlp_out"), at("hook_resid_post")
    pre, post = at("mlp.hook_pre"), at("mlp.hook_post")
    expected = activate(block.ffn.activation, pre)
    if block.ffn.gated:
        expected = expected * at("mlp.hook_pre_linear")
    torch.testing.assert_close(post, expected, **eq)
    torch.testing.assert_close(block.ffn.down(post), mlp_out, **eq)
    if pre_norm:
        torch.testing.assert_close(resid_post, after_attn + mlp_out, **eq)
    else:
        torch.testing.assert_close(resid_post, block.ffn_norm(after_attn + mlp_out), **eq)


@pytest.mark.parametrize("case", sorted(LM_CASES))
@torch.no_grad()
def test_cache_decomposes_exactly(case):
    model = lm(**LM_CASES[case])
    x, kw = ids(), lm_kwargs(model)
    if model.config.n_token_types:
        kw["token_type_ids"] = (torch.arange(9) >= 5).long().expand(2, 9)
    logits, cache = run_with_cache(model, x, **kw)
    _, attn = model(x, return_attn=True, **kw)
    for i, block in enumerate(model.blocks):
        torch.testing.assert_close(cache["pattern", i], attn[i], rtol=0, atol=1e-6)  # == return_attn's weights
        _check_block(block, cache, f"blocks.{i}", "attn", False, None if i == 0 else cache["resid_post", i - 1])
    embedded = cache["hook_embed"] + cache.get("hook_pos_embed", 0) + cache.get("hook_token_type_embed", 0)
    if model.embeddings.norm is None:
        torch.testing.assert_close(cache["resid_pre", 0], embedded, rtol=0, atol=1e-6)
    final = cache["ln_final.hook_out"]  # hooks that only read leave the norm's numbers bit-identical
    torch.testing.assert_close(final, model.norm_f(cache["resid_post", 1]), rtol=0, atol=0)
    assert torch.equal(logits, model.logits(final))


@torch.no_grad()
def test_encoder_decoder_cache_decomposes_exactly():
    model = encdec(pos="learned")
    src, tgt = ids(T=7), ids(T=5, seed=2)
    src_pad = torch.zeros(2, 7, dtype=torch.bool)
    src_pad[1, 5:] = True
    logits, cache = run_with_cache(model, src, tgt, src_pad=src_pad)
    _, log = model(src, tgt, src_pad=src_pad, return_attn=True)
    for i, block in enumerate(model.enc):
        torch.testing.assert_close(cache["pattern", i, "encoder"], log["enc"][i], rtol=0, atol=1e-6)
        _check_block(block, cache, f"encoder_blocks.{i}", "attn", False, None)
    memory = cache["encoder_ln_final.hook_out"]
    for i, block in enumerate(model.dec):
        torch.testing.assert_close(cache["cross_pattern", i], log["cross"][i], rtol=0, atol=1e-6)
        assert cache["cross_pattern", i][1, :, :, 5:].max() == 0  # padded source keys are masked
        torch.testing.assert_close(cache[f"decoder_blocks.{i}.cross_attn.hook_k"].flatten(2),
                                   block.cross_attn.project_kv(memory)[0].transpose(1, 2).flatten(2), rtol=0,
                                   atol=1e-6)
        _check_block(block, cache, f"decoder_blocks.{i}", "self_attn", True, None)
        _check_block(block, cache, f"decoder_blocks.{i}", "cross_attn", True, None)
    assert torch.equal(logits, model.logits(cache["decoder_ln_final.hook_out"]))


# ---------------------------------------------------------------------------------------------- patching
@pytest.mark.parametrize("case", ["causal-rope-gqa", "prefix-learned", "bidirectional-post-norm", "llama-style"])
@torch.no_grad()
def test_patching_with_own_values_changes_nothing(case):
    model = lm(**LM_CASES[case])
    x, kw = ids(), lm_kwargs(model)
    logits, cache = run_with_cache(model, x, **kw)
    patched = run_with_patch(model, x, cache=cache, names=None, **kw)  # every point, its own value
    torch.testing.assert_close(patched, logits, rtol=0, atol=0)
    torch.testing.assert_close(run_with_patch(model, x, cache=cache, names="z", heads=[1], positions=[0, 3], **kw),
                               model(x, **kw), rtol=0, atol=1e-5)


@torch.no_grad()
def test_patching_moves_the_clean_run_into_the_corrupted_one():
    model = lm()
    clean, corrupted = ids(seed=1), ids(seed=2)
    clean_logits, cache = run_with_cache(model, clean)
    # the whole stream entering block 0 determines everything after it
    torch.testing.assert_close(run_with_patch(model, corrupted, cache=cache, names="blocks.0.hook_resid_pre"),
                               clean_logits, rtol=0, atol=1e-5)
    # one position: a causal model's earlier positions do not see it
    out = run_with_patch(model, corrupted, cache=cache, names="blocks.0.hook_resid_pre", positions=5)
    torch.testing.assert_close(out[:, :5], model(corrupted)[:, :5], rtol=0, atol=1e-5)
    assert not torch.allclose(out[:, 5:], model(corrupted)[:, 5:])

    def metric(logits):  # read at position 0, which sees nothing but itself
        return logits[:, 0].logsumexp(-1).mean()

    effects = patching_effects(model, clean, corrupted, metric, what="resid_pre")  # patched - corrupted
    assert effects.shape == (2, 9)
    moved = float(metric(clean_logits)) - float(metric(model(corrupted)))
    assert abs(moved) > 1e-3
    torch.testing.assert_close(effects[:, 0], torch.full((2,), moved), rtol=0, atol=1e-5)
    torch.testing.assert_close(effects[:, 1:], torch.zeros(2, 8), rtol=0, atol=1e-5)
    assert patching_effects(model, clean, corrupted, metric, what="z", per="head").shape == (2, 4)


# ---------------------------------------------------------------------------------------------- ablation
def _zero_head_weights(attention, head: int) -> None:
    hd = attention.head_dim
    with torch.no_grad():
        attention.o_proj.weight[:, head * hd:(head + 1) * hd] = 0


@pytest.mark.parametrize("case", ["causal-sinusoidal", "causal-rope-gqa", "llama-style", "bidirectional-post-norm"])
@torch.no_grad()
def test_ablating_a_head_equals_zeroing_its_output_weights(case):
    model = lm(**LM_CASES[case])
    x, kw = ids(), lm_kwargs(model)
    zeroed = copy.deepcopy(model)
    _zero_head_weights(zeroed.blocks[1].self_attn, 2)
    _zero_head_weights(zeroed.blocks[0].self_attn, 0)
    ablated = ablate_heads(model, x, heads=[(1, 2), (0, 0)], **kw)
    torch.testing.assert_close(ablated, zeroed(x, **kw), rtol=0, atol=1e-5)
    assert not torch.allclose(ablated, model(x, **kw), atol=1e-3)


@torch.no_grad()
def test_ablating_cross_attention_heads_and_mean_ablation():
    model = encdec()
    src, tgt = ids(T=7), ids(T=5, seed=2)
    zeroed = copy.deepcopy(model)
    _zero_head_weights(zeroed.dec[1].cross_attn, 3)
    ablated = ablate_heads(model, src, tgt, heads=[("decoder_blocks.1.cross_attn", 3)])
    torch.testing.assert_close(ablated, zeroed(src, tgt), rtol=0, atol=1e-5)
    # mean ablation: the head's output is its mean over the batch and positions, a constant vector
    model = lm()
    x = ids(B=3)
    _, cache = run_with_cache(model, x, names="blocks.1.attn.hook_z")
    mean = cache["blocks.1.attn.hook_z"].mean(dim=(0, 1))[2]  # (hd,)
    with hooks(model, ablation_hooks(model, [(1, 2)], mode="mean", cache=cache)):
        _, ablated_cache = run_with_cache(model, x, names="blocks.1.attn.hook_z")
    torch.testing.assert_close(ablated_cache["z", 1][:, :, 2], mean.expand(3, 9, -1), rtol=0, atol=1e-6)
    effects = head_ablation_effects(model, x)
    assert effects.shape == (2, 4) and effects.abs().sum() > 0


@torch.no_grad()
def test_chosen_layers_alone_leave_the_fused_kernel(monkeypatch):
    model = lm(n_layers=3)
    x = ids()
    fused = []
    original = F.scaled_dot_product_attention
    monkeypatch.setattr("glassformer.nn.attention.F.scaled_dot_product_attention",
                        lambda *a, **k: fused.append(1) or original(*a, **k))
    _, weights = attention_weights(model, x, layers=[1], heads=[0, 3])
    assert len(fused) == 2  # layers 0 and 2 stayed on the fused kernel
    _, attn = model(x, return_attn=True)
    torch.testing.assert_close(weights[1], attn[1][:, [0, 3]], rtol=0, atol=1e-6)


PER_HEAD_POINTS = ["result", "attn_in", "q_input", "k_input", "v_input", "mlp_in"]


def test_per_head_points_cost_nothing_until_hooked(monkeypatch):
    from glassformer.nn.attention import MultiHeadAttention

    model, x = lm(pos="rope", n_kv_heads=2), ids()
    calls = []
    for name in ("per_head_output", "project_per_head"):
        original = getattr(MultiHeadAttention, name)
        monkeypatch.setattr(MultiHeadAttention, name,
                            lambda self, *a, _o=original, _n=name: calls.append((_n, self)) or _o(self, *a))
    plain = model(x)
    _, cache = run_with_cache(model, x)  # names=None: every point but the per-head forms
    assert calls == [] and not any(name.endswith(("hook_result", "_input", "hook_attn_in")) for name in cache)
    hooked, cache = run_with_cache(model, x, names=["blocks.1.attn.hook_result", "blocks.1.hook_q_input"])
    assert calls == [("project_per_head", model.blocks[1].self_attn), ("per_head_output", model.blocks[1].self_attn)]
    torch.testing.assert_close(hooked, plain, rtol=0, atol=1e-5)


@pytest.mark.parametrize("case", ["causal-rope-gqa", "llama-style", "bidirectional-post-norm", "causal-alibi-mqa"])
def test_per_head_points_decompose_exactly(case):
    model = lm(**LM_CASES[case])
    x = ids()
    with torch.no_grad():
        plain = model(x, **lm_kwargs(model))
        out, cache = run_with_cache(model, x, names=PER_HEAD_POINTS + ["resid_pre", "resid_mid", "attn_out"],
                                    **lm_kwargs(model))
    torch.testing.assert_close(out, plain, rtol=0, atol=1e-5)
    for layer, block in enumerate(model.blocks):
        attn = block.self_attn
        bias = attn.o_proj.bias if attn.o_proj.bias is not None else 0.0
        torch.testing.assert_close(cache["result", layer].sum(2) + bias, cache["attn_out", layer], rtol=0, atol=1e-5)
        stream = cache["resid_pre", layer][:, :, None]
        assert cache["q_input", layer].shape == (2, 9, attn.n_heads, 32)
        assert cache["k_input", layer].shape == (2, 9, attn.n_kv_heads, 32)
        for name in ("attn_in", "q_input", "k_input", "v_input"):
            assert torch.equal(cache[name, layer], stream.expand_as(cache[name, layer]))
        assert torch.equal(cache["mlp_in", layer], cache["resid_mid", layer])


def test_one_heads_input_moves_that_head_alone():
    model, x = lm(pos="rope"), ids()

    def shift_head_2(t, hook):
        t[:, :, 2] += torch.linspace(-1.0, 1.0, t.shape[-1])  # not constant: a LayerNorm would remove that

    with torch.no_grad():
        _, plain = run_with_cache(model, x, names="blocks.1.attn.hook_z")
        with hooks(model, [("blocks.1.hook_q_input", shift_head_2)]):
            _, moved = run_with_cache(model, x, names="blocks.1.attn.hook_z")
    change = (moved["z", 1] - plain["z", 1]).abs().amax((0, 1, 3))  # per head
    assert change[2] > 1e-2 and change[[0, 1, 3]].max() < 1e-5  # the others: per-head matmuls' rounding only


def test_encoder_decoder_and_generation_with_per_head_points():
    model = encdec()
    src, tgt = ids(), ids(T=5, seed=2)
    with torch.no_grad():
        plain = model(src, tgt)
        out, cache = run_with_cache(model, src, tgt, names=["result", "cross_result", "q_input"])
    torch.testing.assert_close(out, plain, rtol=0, atol=1e-5)
    assert cache["decoder_blocks.0.cross_attn.hook_result"].shape == (2, 5, 4, 32)
    assert cache["decoder_blocks.1.hook_q_input"].shape == (2, 5, 4, 32)
    lm_model, prompt = lm(pos="rope", n_kv_heads=2), ids(T=5)
    with torch.no_grad():
        expected = generate(lm_model, prompt, 6)
        with hooks(lm_model, [(["q_input", "k_input", "result"], lambda t, hook: None)]):
            assert torch.equal(generate(lm_model, prompt, 6), expected)  # per head, step by step, same tokens


def test_backward_hooks_and_gradients():
    model, x = lm(), ids()

    def loss(logits):
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten())

    _, cache = run_with_cache(model, x, names=["resid_pre", "ln_final"], incl_bwd=True, metric=loss)
    resid = []
    with hooks(model, [("blocks.1.hook_resid_pre", lambda t, hook: resid.append(t) or t.retain_grad())]):
        logits = model(x)
    loss(logits).backward()
    torch.testing.assert_close(cache["blocks.1.hook_resid_pre_grad"], resid[0].grad, rtol=0, atol=1e-7)
    assert cache["ln_final.hook_normalized_grad"].shape == (2, 9, 32)
    model.zero_grad()
    seen = []
    run_with_hooks(model, x, bwd_hooks=[("resid_pre", lambda g, hook: seen.append(hook.layer()) or g * 0)],
                   metric=loss)
    assert seen == [1, 0]  # backward order; zeroed at block 1's input, nothing reaches block 0
    assert model.blocks[0].self_attn.qkv.weight.grad.abs().max() == 0
    assert model.blocks[1].self_attn.qkv.weight.grad.abs().max() > 0
    assert no_taps(model)
    with pytest.raises(ValueError, match="needs a scalar: pass metric="):
        run_with_cache(model, x, incl_bwd=True)
    with torch.no_grad(), pytest.raises(ValueError, match="does not require grad"):
        run_with_hooks(model, x, bwd_hooks=[("resid_pre", lambda g, hook: None)], metric=loss)
    with pytest.raises(ValueError, match="returned"):
        run_with_hooks(model, x, bwd_hooks=[("resid_pre", lambda g, hook: g[0])], metric=loss)
    with pytest.raises(TypeError, match="not both"):
        run_with_cache(model, x, names="z", names_filter="z")
    assert no_taps(model)


def test_cache_algebra_adds_up_and_knows_its_limits():
    model, x = lm(pos="learned"), ids()
    with torch.no_grad():
        logits, cache = run_with_cache(model, x)
    parts, labels = cache.decompose_resid(layer=1, mlp_input=True, return_labels=True)
    assert labels == ["embed", "pos_embed", "0_attn_out", "0_mlp_out", "1_attn_out"]
    torch.testing.assert_close(parts.sum(0), cache["resid_mid", 1], rtol=0, atol=1e-5)
    lens = cache.accumulated_resid(apply_ln=True)  # at the end: ln_final itself, so the last row gives the logits
    torch.testing.assert_close(model.logits(lens[-1]), logits, rtol=0, atol=1e-5)
    post_norm = lm(**LM_CASES["bidirectional-post-norm"])
    with torch.no_grad():
        _, post_cache = run_with_cache(post_norm, x)
    stack = post_cache.decompose_resid()
    assert torch.equal(post_cache.apply_ln_to_stack(stack), stack)  # no norm reads the final stream there
    with torch.no_grad():
        _, ed_cache = run_with_cache(encdec(), x, ids(T=5))
    with pytest.raises(ValueError, match="needs the TransformerLM"):
        ed_cache.decompose_resid()


def test_hook_layer_is_an_int_and_a_method():
    point = hook_points(lm())["blocks.1.attn.hook_z"]
    assert point.layer == 1 and point.layer() == 1 and isinstance(point.layer, int)
    assert hook_points(lm())["hook_embed"].layer is None


# ---------------------------------------------------------------------------------------------- generation
@pytest.mark.parametrize("case", ["causal-rope-gqa", "causal-learned-gelu_tanh", "prefix-learned"])
@torch.no_grad()
def test_hooks_fire_at_every_cached_step_and_equal_a_full_forward(case):
    model = lm(**LM_CASES[case])
    prompt = ids(T=5)
    kw = {"prefix_len": 3} if model.config.attn == "prefix" else {}
    names = ["blocks.1.hook_resid_post", "blocks.0.attn.hook_pattern", "blocks.1.attn.hook_k", "mlp_out"]
    with record(model, names) as rec:
        out = generate(model, prompt, 6, **kw)
    assert [t.shape[1] for t in rec["blocks.1.hook_resid_post"]] == [5, 1, 1, 1, 1, 1]  # prompt, then one per step
    _, full = run_with_cache(model, out[:, :-1], names=names, **kw)  # the last token is never fed
    for name in rec.points:
        torch.testing.assert_close(rec.cat(name), full[name], rtol=0, atol=2e-5)
    assert no_taps(model)


def test_hooks_work_inside_a_training_step():
    model = lm().train()
    x = ids()
    scale = torch.ones(4, requires_grad=True)  # a gate on each head of layer 1, learned through the hook
    logits = run_with_hooks(model, x, hooks=[("blocks.1.attn.hook_z", lambda z, hook: z * scale[:, None])])
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten())
    loss.backward()
    assert scale.grad is not None and scale.grad.abs().sum() > 0
    assert model.blocks[0].self_attn.qkv.weight.grad is not None


# ---------------------------------------------------------------------------------------------- lenses
@pytest.mark.parametrize("case", ["causal-learned-gelu_tanh", "llama-style", "bidirectional-post-norm",
                                  "causal-none-attn-only"])
@torch.no_grad()
def test_logit_lens_last_layer_is_the_models_logits(case):
    model = lm(**LM_CASES[case])
    x = ids()
    logits, cache = run_with_cache(model, x)
    lens = logit_lens(model, cache=cache)
    assert lens.shape == (3, 2, 9, V)
    assert torch.equal(lens[-1], logits)
    assert torch.equal(logit_lens(model, x)[-1], model(x))  # its own forward: the fused path
    top = logit_lens(model, x, top_k=3)
    assert top.ids.shape == (3, 2, 9, 3) and torch.equal(top.ids[-1, ..., 0], logits.argmax(-1))
    model = encdec()
    logits, cache = run_with_cache(model, ids(T=7), ids(T=5))
    assert torch.equal(logit_lens(model, cache=cache)[-1], logits)


@pytest.mark.parametrize("case", ["causal-learned-gelu_tanh", "llama-style", "causal-none-attn-only",
                                  "causal-alibi-mqa"])
@torch.no_grad()
def test_direct_logit_attribution_adds_up_to_the_logit(case):
    model = lm(**{**LM_CASES[case], "head_bias": True})
    x = ids()
    attribution = direct_logit_attribution(model, x, token=torch.tensor([3, 7]), position=4)
    assert attribution.heads.shape == (2, 2, 4)
    assert (attribution.mlp is None) == model.config.attn_only
    torch.testing.assert_close(attribution.logit, model(x)[torch.arange(2), 4, torch.tensor([3, 7])])
    torch.testing.assert_close(attribution.total(), attribution.logit, rtol=0, atol=1e-4)
    # a head's share is what removing its output from the final stream removes (the final norm's scale held)
    zeroed = copy.deepcopy(model)
    _zero_head_weights(zeroed.blocks[1].self_attn, 2)
    _, cache = run_with_cache(model, x, names=["resid_post", "attn_out"])
    head_output = cache["attn_out", 1] - run_with_cache(zeroed, x, names="attn_out")[1]["attn_out", 1]
    stream = cache["resid_post", 1][:, 4]  # (B, d)
    without = stream - head_output[:, 4]
    norm = model.norm_f
    if isinstance(norm, torch.nn.LayerNorm):
        scale = (stream.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
        frozen = (without - without.mean(-1, keepdim=True)) / scale * norm.weight + norm.bias
    else:
        frozen = without / (stream.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt() * norm.weight
    logit_without = model.logits(frozen)[torch.arange(2), torch.tensor([3, 7])]
    torch.testing.assert_close(attribution.heads[:, 1, 2], attribution.logit - logit_without, rtol=0, atol=1e-4)
    model = encdec()
    attribution = direct_logit_attribution(model, ids(T=7), ids(T=5), token=5)
    assert attribution.cross_heads.shape == (2, 2, 4)
    torch.testing.assert_close(attribution.total(), attribution.logit, rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match="pre-norm"):
        direct_logit_attribution(lm(norm_first=False), ids(), token=1)


# ---------------------------------------------------------------------------------------------- detectors
def test_detectors_score_hand_made_patterns():
    n, T = 5, 10
    previous = torch.zeros(1, 2, T, T)
    previous[0, 0, 0, 0] = 1
    previous[0, 0, torch.arange(1, T), torch.arange(T - 1)] = 1  # head 0: always the previous token
    previous[0, 1] = torch.full((T, T), 1.0 / T)  # head 1: uniform
    assert previous_token_scores(previous).tolist() == pytest.approx([1.0, 0.1])
    induction = torch.zeros(1, 1, T, T)
    queries = torch.arange(n, T)
    induction[0, 0, queries, queries - n + 1] = 1
    assert induction_scores(induction, n).tolist() == pytest.approx([1.0])
    x = repeated_tokens(V, n, 3, seed=4, bos=0)
    assert x.shape == (3, 1 + 2 * n) and torch.equal(x[:, 1:1 + n], x[:, 1 + n:]) and (x[:, 0] == 0).all()
    scores = head_scores(lm(), length=8, batch=2)
    assert scores.induction.shape == (2, 4) and 0 <= float(scores.induction.min()) <= 1
    assert scores.loss_first == pytest.approx(scores.loss_repeat, rel=0.2)  # untrained: no induction yet


# ---------------------------------------------------------------------------------------------- errors
def test_errors_name_the_problem():
    model = lm()
    with pytest.raises(ValueError, match=r"'blocks.0.attn.hook_patern' is not a hook point.*did you mean"):
        run_with_cache(model, ids(), names="blocks.0.attn.hook_patern")
    with pytest.raises(ValueError, match=r"hook on blocks.0.hook_resid_post returned \(2, 9\)"):
        run_with_hooks(model, ids(), hooks=[("blocks.0.hook_resid_post", lambda x, hook: x[..., 0])])
    with pytest.raises(TypeError, match="must be a function"):
        hooks(model, [("z", 3)])
    with pytest.raises(TypeError, match="must be a function"):  # a good pair before a bad one: neither stays
        run_with_hooks(model, ids(), hooks=[("z", lambda z, hook: None)], fwd_hooks=[("resid_pre", 3)])
    with pytest.raises(TypeError, match="must be a function"):
        hooks(model, [("z", lambda z, hook: None), ("resid_pre", 3)])
    with pytest.raises(ValueError, match=r"head of blocks.1.attn must be an int in \[0, 3\], got 4"):
        ablate_heads(model, ids(), heads=[(1, 4)])
    with pytest.raises(ValueError, match="name the attention"):
        ablate_heads(encdec(), ids(), ids(), heads=[(0, 1)])
    _, cache = run_with_cache(model, ids(), names="z")
    with pytest.raises(ValueError, match="cache lacks"):
        logit_lens(model, cache=cache)
    with pytest.raises(ValueError, match="same shape"):
        run_with_patch(model, ids(T=4), cache=cache, names="z")
    with pytest.raises(TypeError, match="TransformerLM or EncoderDecoder"):
        run_with_cache(torch.nn.Linear(2, 2), torch.zeros(1, 2))
    assert no_taps(model)

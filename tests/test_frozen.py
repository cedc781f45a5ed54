"""Frozen mode (glassformer.nn.freezing): the forward's numbers unchanged, the gradients those of a forward
whose attention patterns and norm scales are detached constants, written out here by hand."""

import pytest
import torch
import torch.nn.functional as F

from glassformer import TransformerLM
from glassformer.config import ModelConfig
from glassformer.interpret import hooks, run_with_cache
from glassformer.nn import TransformerBlock, apply_rope, causal_mask
from glassformer.nn.feedforward import activate
from glassformer.nn.freezing import frozen

GPT2 = dict(pos="learned", norm="layernorm", activation="gelu_tanh", bias=True, tie=True)
LLAMA = dict(pos="rope", norm="rmsnorm", activation="swiglu", bias=False, tie=False, n_kv_heads=2)


def trained_looking(config: dict) -> TransformerLM:
    """A small LM whose every parameter (norm gains and biases too) is away from its initial value."""
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(vocab_size=23, d_model=16, n_heads=4, n_layers=2, d_ff=32, max_len=16,
                                      **config)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def frozen_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A LayerNorm or RMSNorm with its divisor detached."""
    if isinstance(norm, torch.nn.LayerNorm):
        x = x - x.mean(-1, keepdim=True)
    y = x / (x.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt().detach()
    y = y * norm.weight
    return y + norm.bias if getattr(norm, "bias", None) is not None else y


def reference_logits(model: TransformerLM, ids: torch.Tensor) -> torch.Tensor:
    """A pre-norm decoder's forward written out, with detached attention patterns and norm scales."""
    B, T = ids.shape
    positions = torch.arange(T)
    x = model.embeddings(ids, positions, T)  # no norm in here for these configs
    rope, _ = model.embeddings.attention_inputs(positions, n_queries=T, n_keys=T, end=T)
    for block in model.blocks:
        attn = block.self_attn
        h, kv, hd = attn.n_heads, attn.n_kv_heads, attn.head_dim
        q, k, v = attn.qkv(frozen_norm(block.attn_norm, x)).split([h * hd, kv * hd, kv * hd], dim=-1)
        q, k, v = (t.view(B, T, -1, hd).transpose(1, 2) for t in (q, k, v))  # (B, heads, T, hd)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        k, v = k.repeat_interleave(h // kv, dim=1), v.repeat_interleave(h // kv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / hd ** 0.5
        pattern = torch.softmax(scores.masked_fill(~causal_mask(T), float("-inf")), dim=-1).detach()
        x = x + attn.o_proj((pattern @ v).transpose(1, 2).reshape(B, T, -1))
        ffn, normed = block.ffn, frozen_norm(block.ffn_norm, x)
        if ffn.gate is not None:
            hidden = activate(ffn.activation, ffn.gate(normed)) * ffn.up(normed)
        else:
            hidden = activate(ffn.activation, ffn.up(normed))
        x = x + ffn.down(hidden)
    return model.logits(frozen_norm(model.norm_f, x))


def grads(model: torch.nn.Module, logits: torch.Tensor, weights: torch.Tensor) -> list[torch.Tensor]:
    """d(sum(logits * weights))/d(every parameter), zeros where none flows."""
    params = list(model.parameters())
    found = torch.autograd.grad((logits * weights).sum(), params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, found, strict=True)]


@pytest.mark.parametrize("config", [GPT2, LLAMA], ids=["gpt2", "llama"])
def test_frozen_values_unchanged_and_gradients_equal_detached_reference(config):
    model = trained_looking(config)
    ids = torch.randint(0, 23, (2, 7))
    weights = torch.randn(2, 7, 23)
    for return_attn in (False, True):  # the fused kernel and the explicit softmax
        plain = model(ids, return_attn=return_attn)
        with model.frozen():
            held = model(ids, return_attn=return_attn)
        plain, held = (out.logits if return_attn else out for out in (plain, held))
        assert torch.equal(held, plain)  # bit for bit
        got = grads(model, held, weights)
        expected = grads(model, reference_logits(model, ids), weights)
        for (name, _), g, e in zip(model.named_parameters(), got, expected, strict=True):
            torch.testing.assert_close(g, e, atol=2e-5, rtol=1e-4, msg=f"gradient of {name}")
        unfrozen = grads(model, plain, weights)
        assert not all(torch.allclose(g, u) for g, u in zip(got, unfrozen, strict=True))  # frozen changed something
    qkv = got[[name for name, _ in model.named_parameters()].index("blocks.0.self_attn.qkv.weight")]
    assert torch.count_nonzero(qkv[:model.config.d_model]) == 0  # the pattern is constant: nothing reaches W_Q


def test_frozen_mode_is_restored_and_nests():
    model = trained_looking(GPT2)
    parts = [m for m in model.modules() if hasattr(type(m), "frozen_mode")]
    assert len(parts) == 2 * 3 + 1  # per block: attention and two norms; the final norm
    with model.frozen():
        with model.blocks[0].frozen():
            assert all(m.frozen_mode for m in parts)
        assert all(m.frozen_mode for m in parts)  # the inner exit restored the state it found
    assert not any(m.frozen_mode for m in parts)
    with pytest.raises(RuntimeError), frozen(model):
        raise RuntimeError("left early")
    assert not any(m.frozen_mode for m in parts)


def test_frozen_under_hooks_matches_reference():
    """Hooks on the norm's scale and on the pattern (the written-out norm, the explicit path) keep frozen mode."""
    model = trained_looking(GPT2)
    ids = torch.randint(0, 23, (1, 6))
    weights = torch.randn(1, 6, 23)
    plain, cache = run_with_cache(model, ids, names=["blocks.0.ln1.hook_scale", "blocks.1.attn.hook_pattern"])
    with model.frozen():
        held, frozen_cache = run_with_cache(model, ids, names=["blocks.0.ln1.hook_scale", "blocks.1.attn.hook_pattern"])
    assert torch.equal(held, plain)
    for name in cache:
        assert torch.equal(frozen_cache[name], cache[name])
    with model.frozen(), hooks(model, [("blocks.0.ln1.hook_scale", lambda x, hook: None)]):
        got = grads(model, model(ids), weights)
    expected = grads(model, reference_logits(model, ids), weights)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("norm_first", [True, False])
def test_frozen_block_alone(norm_first):
    """A post-norm block too: its values unchanged; gradient reaches x only through the linear paths."""
    torch.manual_seed(1)
    block = TransformerBlock(8, 2, 16, norm_first=norm_first).eval()
    x = torch.randn(1, 5, 8, requires_grad=True)
    out, _ = block(x)
    with block.frozen():
        held, _ = block(x)
    assert torch.equal(held, out)
    (g,) = torch.autograd.grad(held.sum(), x)
    attn, ffn = block.self_attn, block.ffn

    def by_hand(x: torch.Tensor) -> torch.Tensor:
        def sub(norm, f, x):
            return x + f(frozen_norm(norm, x)) if norm_first else frozen_norm(norm, x + f(x))

        def attend(y):
            q, k, v = (t.view(1, 5, 2, 4).transpose(1, 2) for t in attn.qkv(y).split(8, dim=-1))
            pattern = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1).detach()
            return attn.o_proj((pattern @ v).transpose(1, 2).reshape(1, 5, 8))

        return sub(block.ffn_norm, lambda y: ffn.down(F.gelu(ffn.up(y))), sub(block.attn_norm, attend, x))

    (expected,) = torch.autograd.grad(by_hand(x).sum(), x)
    torch.testing.assert_close(g, expected, atol=1e-5, rtol=1e-4)

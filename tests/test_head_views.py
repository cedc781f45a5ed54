"""Attention's per-head views (TransformerLens's layout) give the numbers the forward computes: W_Q/W_K/W_V
rebuild hook_q/k/v, W_O and per_head_output rebuild hook_result, and they are views (gradients reach qkv)."""

import torch

from glassformer import TransformerLM
from glassformer.interpret import run_with_cache


def test_head_views_rebuild_the_forwards_tensors():
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=30, d_model=24, n_heads=4, n_layers=1, d_ff=48, n_kv_heads=2).eval()
    ids = torch.randint(0, 30, (2, 5))
    _, cache = run_with_cache(model, ids, names=["ln1", "ln1_out", "q", "k", "v", "z", "result"])
    attn, x = model.blocks[0].self_attn, cache["blocks.0.ln1.hook_out"]  # (B, T, d): what qkv reads
    assert attn.W_Q.shape == (4, 24, 6) and attn.W_K.shape == attn.W_V.shape == (2, 24, 6)
    assert attn.W_O.shape == (4, 6, 24) and attn.head_bias("k").shape == (2, 6) and attn.head_bias("o").shape == (24,)
    for kind, short in (("q", "W_Q"), ("k", "W_K"), ("v", "W_V")):
        rebuilt = torch.einsum("btd,hde->bthe", x, getattr(attn, short)) + attn.head_bias(kind)
        torch.testing.assert_close(rebuilt, cache[kind, 0], rtol=1e-5, atol=1e-5)
    z = cache["z", 0]  # (B, T, h, hd)
    torch.testing.assert_close(torch.einsum("bthe,hed->bthd", z, attn.W_O), cache["result", 0], rtol=1e-5, atol=1e-5)
    assert torch.equal(attn.per_head_output(z), cache["result", 0])
    attn.W_Q.sum().backward()  # a view of the parameter: its gradient lands on the query rows of qkv
    grad = attn.qkv.weight.grad
    assert torch.equal(grad[:24], torch.ones(24, 24)) and torch.count_nonzero(grad[24:]) == 0

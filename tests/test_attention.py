"""Attention: equal to torch.nn, fused == explicit, GQA, masks, no NaN."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from glassformer import MultiHeadAttention, causal_mask, padding_mask, scaled_dot_product_attention
from glassformer.nn import AttentionInputs, alibi_bias, alibi_slopes


def copy_from_torch(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        ours.qkv.weight.copy_(ref.in_proj_weight)
        ours.qkv.bias.copy_(ref.in_proj_bias)
        ours.o_proj.weight.copy_(ref.out_proj.weight)
        ours.o_proj.bias.copy_(ref.out_proj.bias)


@pytest.mark.parametrize("need_weights", [True, False])
def test_self_attention_equals_torch_multihead_attention(need_weights):
    ours, ref = MultiHeadAttention(32, 4).eval(), nn.MultiheadAttention(32, 4, batch_first=True).eval()
    copy_from_torch(ours, ref)
    x = torch.randn(3, 9, 32)
    pad = torch.zeros(3, 9, dtype=torch.bool)
    pad[1, 6:] = True
    mask = causal_mask(9) & padding_mask(pad)  # (3, 1, 9, 9); True = may attend
    out, w = ours(x, inputs=AttentionInputs(mask=mask, need_weights=need_weights))
    # torch.nn: True = blocked, so the mask is inverted at this boundary only.
    ref_out, ref_w = ref(x, x, x, attn_mask=~causal_mask(9), key_padding_mask=pad, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=0)
    else:
        assert w is None


def test_cross_attention_equals_torch_multihead_attention():
    ours, ref = MultiHeadAttention(32, 4).eval(), nn.MultiheadAttention(32, 4, batch_first=True).eval()
    copy_from_torch(ours, ref)
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    src_pad = torch.zeros(2, 7, dtype=torch.bool)
    src_pad[0, 4:] = True
    out, w = ours(x, kv=memory, mask=padding_mask(src_pad))
    ref_out, ref_w = ref(x, memory, memory, key_padding_mask=src_pad, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=0)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 3), h=st.sampled_from([1, 2, 4]), Tq=st.integers(1, 9), extra=st.integers(0, 4),
       causal=st.booleans(), use_mask=st.booleans(), use_bias=st.booleans())
def test_fused_path_equals_explicit_path(B, h, Tq, extra, causal, use_mask, use_bias):
    Tk = Tq + extra
    q, k, v = torch.randn(B, h, Tq, 8), torch.randn(B, h, Tk, 8), torch.randn(B, h, Tk, 8)
    mask = torch.rand(B, 1, Tq, Tk) > 0.3 if use_mask else None
    score_bias = alibi_bias(alibi_slopes(h), torch.arange(extra, Tk), torch.arange(Tk)) if use_bias else None
    explicit, weights = scaled_dot_product_attention(q, k, v, mask, is_causal=causal, score_bias=score_bias)
    fused, none = scaled_dot_product_attention(q, k, v, mask, is_causal=causal, score_bias=score_bias,
                                               need_weights=False)
    assert none is None
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    assert not torch.isnan(fused).any() and not torch.isnan(weights).any()


def test_explicit_path_matches_the_formula():
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 7)
    out, weights = scaled_dot_product_attention(q, k, v)
    expected_w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(4), dim=-1)
    torch.testing.assert_close(weights, expected_w)
    torch.testing.assert_close(out, expected_w @ v)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))


def test_causal_with_fewer_queries_is_bottom_right_aligned():
    q, k, v = torch.randn(1, 2, 2, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    _, weights = scaled_dot_product_attention(q, k, v, is_causal=True)
    # The 2 queries are positions 3 and 4: position 3 must not see key 4.
    assert weights[0, :, 0, 4].abs().max() == 0 and weights[0, :, 1, 4].abs().min() > 0


@pytest.mark.parametrize("need_weights", [True, False])
def test_row_with_nothing_visible_gives_zeros_not_nan(need_weights):
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    mask[0, 0, 1] = False  # query 1 may see nothing
    out, _ = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    assert not torch.isnan(out).any()
    assert torch.equal(out[0, :, 1], torch.zeros(2, 4))


def test_gqa_with_as_many_kv_heads_as_heads_is_mha():
    torch.manual_seed(1)
    gqa = MultiHeadAttention(32, 4, n_kv_heads=4)
    torch.manual_seed(1)
    mha = MultiHeadAttention(32, 4)
    x = torch.randn(2, 6, 32)
    torch.testing.assert_close(gqa(x, mask=causal_mask(6))[0], mha(x, mask=causal_mask(6))[0], atol=0, rtol=0)


def test_gqa_equals_mha_with_repeated_kv_heads():
    gqa = MultiHeadAttention(32, 4, n_kv_heads=2).eval()
    mha = MultiHeadAttention(32, 4).eval()
    hd = 8
    with torch.no_grad():
        wq, wk, wv = gqa.qkv.weight.split([32, 16, 16])
        bq, bk, bv = gqa.qkv.bias.split([32, 16, 16])
        expand = lambda w: w.view(2, hd, -1).repeat_interleave(2, dim=0).reshape(32, *w.shape[1:])  # noqa: E731
        mha.qkv.weight.copy_(torch.cat([wq, expand(wk), expand(wv)]))
        mha.qkv.bias.copy_(torch.cat([bq, expand(bk), expand(bv)]))
        mha.o_proj.load_state_dict(gqa.o_proj.state_dict())
    x = torch.randn(2, 5, 32)
    for need in (True, False):
        inputs = AttentionInputs(need_weights=need)
        torch.testing.assert_close(gqa(x, inputs=inputs)[0], mha(x, inputs=inputs)[0], atol=1e-6, rtol=0)
    assert gqa.qkv.weight.shape == (32 + 2 * 16, 32)  # fewer key/value parameters


def test_sdpa_reference_equality():
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6, rtol=0)


def test_cross_attention_without_memory_is_an_error():
    from glassformer import TransformerBlock

    block = TransformerBlock(16, 2, 32, cross=True)
    with pytest.raises(ValueError, match="pass the encoder output as memory"):
        block(torch.randn(1, 3, 16))


def test_attention_inputs_come_as_one_object_or_as_the_lessons_masks():
    """The lessons' call (a mask, weights returned) and the models' call (one AttentionInputs) agree;
    giving a mask both ways at once is an error naming the choice."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x, mask = torch.randn(2, 5, 16), causal_mask(5)
    out, weights = mha(x, mask=mask)
    same, none = mha(x, inputs=AttentionInputs(is_causal=True, need_weights=False))
    torch.testing.assert_close(out, same, atol=1e-6, rtol=0)
    assert weights.shape == (2, 4, 5, 5) and none is None
    with pytest.raises(TypeError, match="either as mask/memory_mask or inside inputs"):
        mha(x, mask=mask, inputs=AttentionInputs())

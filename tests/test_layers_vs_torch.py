"""TransformerBlock equals torch.nn.TransformerEncoderLayer / TransformerDecoderLayer, both norm placements."""

import pytest
import torch
from torch import nn

from glassformer import TransformerBlock, causal_mask, padding_mask
from glassformer.nn import AttentionInputs


def copy_attention(ours, ref: nn.MultiheadAttention) -> None:
    ours.qkv.weight.copy_(ref.in_proj_weight)
    ours.qkv.bias.copy_(ref.in_proj_bias)
    ours.o_proj.weight.copy_(ref.out_proj.weight)
    ours.o_proj.bias.copy_(ref.out_proj.bias)


def copy_common(block: TransformerBlock, ref) -> None:
    block.ffn.up.load_state_dict(ref.linear1.state_dict())
    block.ffn.down.load_state_dict(ref.linear2.state_dict())


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_equals_torch(norm_first, activation):
    ref = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation=activation, batch_first=True,
                                     norm_first=norm_first).eval()
    ours = TransformerBlock(32, 4, 64, norm_first=norm_first, activation=activation).eval()
    with torch.no_grad():
        copy_attention(ours.self_attn, ref.self_attn)
        copy_common(ours, ref)
        ours.attn_norm.load_state_dict(ref.norm1.state_dict())
        ours.ffn_norm.load_state_dict(ref.norm2.state_dict())
    x = torch.randn(3, 7, 32)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[2, 5:] = True
    for need_weights in (True, False):
        out, _ = ours(x, inputs=AttentionInputs(mask=padding_mask(pad), need_weights=need_weights))
        expected = ref(x, src_key_padding_mask=pad)
        real = ~pad  # torch's fast path may return zeros at padded positions; compare real ones
        torch.testing.assert_close(out[real], expected[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_layer_equals_torch(norm_first):
    ref = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    ours = TransformerBlock(32, 4, 64, cross=True, norm_first=norm_first, activation="relu").eval()
    with torch.no_grad():
        copy_attention(ours.self_attn, ref.self_attn)
        copy_attention(ours.cross_attn, ref.multihead_attn)
        copy_common(ours, ref)
        ours.attn_norm.load_state_dict(ref.norm1.state_dict())
        ours.cross_norm.load_state_dict(ref.norm2.state_dict())
        ours.ffn_norm.load_state_dict(ref.norm3.state_dict())
    x, memory = torch.randn(2, 6, 32), torch.randn(2, 8, 32)
    src_pad = torch.zeros(2, 8, dtype=torch.bool)
    src_pad[1, 5:] = True
    for need_weights in (True, False):
        out, _ = ours(x, memory=memory, inputs=AttentionInputs(
            is_causal=True, memory_mask=padding_mask(src_pad), need_weights=need_weights))
        expected = ref(x, memory, tgt_mask=~causal_mask(6), memory_key_padding_mask=src_pad)
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)

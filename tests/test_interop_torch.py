"""from_torch: glassformer modules equal their torch.nn sources within 1e-5 (masks inverted, batch first)."""

import pytest
import torch
from torch import nn

from glassformer import MultiHeadAttention, TransformerBlock, causal_mask, padding_mask
from glassformer.interop import BlockStack, EncoderDecoderStack, from_torch
from glassformer.nn import AttentionInputs

D, H, FF = 16, 4, 32


def _perturb(module: nn.Module) -> nn.Module:
    """Random biases and norm gains, so that every copied tensor matters."""
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() == 1:
                p.add_(0.2 * torch.randn_like(p))
    return module.eval()


def _pad(B: int = 2, T: int = 7) -> torch.Tensor:
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, T - 2:] = True
    return pad


def test_multihead_attention_with_masks_and_weights():
    torch_mha = _perturb(nn.MultiheadAttention(D, H, batch_first=True))
    ours = from_torch(torch_mha)
    assert isinstance(ours, MultiHeadAttention)
    x, kv, pad = torch.randn(2, 5, D), torch.randn(2, 7, D), _pad()
    ref, ref_w = torch_mha(x, kv, kv, key_padding_mask=pad, average_attn_weights=False)
    out, w = ours(x, kv, mask=padding_mask(pad))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=0)
    hidden = ~causal_mask(5)  # torch: True = hidden
    ref, _ = torch_mha(x, x, x, attn_mask=hidden)
    out, _ = ours(x, inputs=AttentionInputs(is_causal=True, need_weights=False))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first, activation, bias", [(False, "relu", True), (True, "gelu", True),
                                                          (True, nn.GELU(approximate="tanh"), False)])
def test_encoder_layer(norm_first, activation, bias):
    layer = _perturb(nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, activation=activation, batch_first=True,
                                                norm_first=norm_first, bias=bias, layer_norm_eps=1e-6))
    ours = from_torch(layer)
    assert isinstance(ours, TransformerBlock) and ours.attn_norm.eps == 1e-6
    x, pad = torch.randn(2, 7, D), _pad()
    ref = layer(x, src_key_padding_mask=pad)
    out, _ = ours(x, mask=padding_mask(pad))
    real = ~pad  # torch's fast path writes zeros at padded positions
    torch.testing.assert_close(out[real], ref[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer(norm_first):
    layer = _perturb(nn.TransformerDecoderLayer(D, H, FF, batch_first=True, norm_first=norm_first))
    ours = from_torch(layer)
    assert ours.cross_attn is not None
    tgt, memory, pad = torch.randn(2, 5, D), torch.randn(2, 7, D), _pad()
    ref = layer(tgt, memory, tgt_mask=~causal_mask(5), memory_key_padding_mask=pad)
    out, _ = ours(tgt, memory=memory, inputs=AttentionInputs(memory_mask=padding_mask(pad), is_causal=True))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)


def test_encoder_and_decoder_stacks():
    encoder = _perturb(nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, FF, batch_first=True), 2,
                                             norm=nn.LayerNorm(D), enable_nested_tensor=False))
    decoder = _perturb(nn.TransformerDecoder(nn.TransformerDecoderLayer(D, H, FF, batch_first=True), 2))
    ours_enc, ours_dec = from_torch(encoder), from_torch(decoder)
    assert isinstance(ours_enc, BlockStack) and len(ours_enc.blocks) == 2
    x, tgt = torch.randn(2, 7, D), torch.randn(2, 5, D)
    memory = encoder(x)
    torch.testing.assert_close(ours_enc(x), memory, atol=1e-5, rtol=0)
    ref = decoder(tgt, memory, tgt_mask=~causal_mask(5))
    torch.testing.assert_close(ours_dec(tgt, memory=memory, is_causal=True), ref, atol=1e-5, rtol=0)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_transformer_sequence_first():
    """nn.Transformer (batch_first=False): glassformer takes the same tensors transposed to batch first."""
    torch_model = _perturb(nn.Transformer(D, H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FF))
    ours = from_torch(torch_model)
    assert isinstance(ours, EncoderDecoderStack)
    src, tgt, pad = torch.randn(7, 2, D), torch.randn(5, 2, D), _pad()
    ref = torch_model(src, tgt, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5),
                      src_key_padding_mask=pad, memory_key_padding_mask=pad, tgt_is_causal=True)
    out = ours(src.transpose(0, 1), tgt.transpose(0, 1), src_mask=padding_mask(pad), memory_mask=padding_mask(pad),
               tgt_is_causal=True)
    torch.testing.assert_close(out, ref.transpose(0, 1), atol=1e-5, rtol=0)


def test_training_mode_is_kept():
    assert from_torch(nn.TransformerEncoderLayer(D, H, FF).train()).training
    assert not from_torch(nn.TransformerEncoderLayer(D, H, FF).eval()).training


def test_unsupported_modules_and_options_are_named():
    with pytest.raises(TypeError, match="from_torch converts nn.MultiheadAttention.*got Linear"):
        from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="kdim=8, vdim=8 != embed_dim=16"):
        from_torch(nn.MultiheadAttention(D, H, kdim=8, vdim=8))
    with pytest.raises(ValueError, match="add_bias_kv=True or add_zero_attn=True"):
        from_torch(nn.MultiheadAttention(D, H, add_bias_kv=True))
    with pytest.raises(ValueError, match="activation .*Tanh.* has no glassformer equivalent"):
        from_torch(nn.TransformerEncoderLayer(D, H, FF, activation=nn.Tanh()))

"""torch.nn's Transformer modules -> glassformer modules with the same weights: ``from_torch``.

Weights copy unchanged (MultiheadAttention's ``in_proj_weight`` is glassformer's fused ``qkv``). At the
boundary: torch's boolean masks mean True = *hidden*, glassformer's True = *may attend* (pass ``~mask``), and
glassformer is always batch first, (B, T, d).
"""

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError
from ..nn.attention import AttentionInputs, MultiHeadAttention
from ..nn.block import TransformerBlock
from .mapping import Rule, import_state, linear_rules, rule

TorchLayer = nn.TransformerEncoderLayer | nn.TransformerDecoderLayer


class BlockStack(nn.Module):
    """Blocks applied in order, then an optional final ``norm``: glassformer's nn.TransformerEncoder/Decoder."""

    def __init__(self, blocks: list[TransformerBlock], norm: nn.Module | None = None):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm if norm is not None else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, memory: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, *, is_causal: bool = False, need_weights: bool = False,
                ) -> torch.Tensor | tuple[torch.Tensor, list[dict[str, torch.Tensor | None]]]:
        """x (B, T, d) -> (B, T, d); with ``need_weights`` also each block's weights dict.

        Masks: True = may attend, ``mask`` to (B, h, T, T), ``memory_mask`` to (B, h, T, S); ``memory`` (B, S, d).
        """
        inputs = AttentionInputs(mask=mask, memory_mask=memory_mask, is_causal=is_causal, need_weights=need_weights)
        weights = []
        for block in self.blocks:
            x, w = block(x, memory=memory, inputs=inputs)
            weights.append(w)
        x = self.norm(x)
        return (x, weights) if need_weights else x


class EncoderDecoderStack(nn.Module):
    """An encoder stack and a decoder stack: glassformer's nn.Transformer (no embeddings, no output layer)."""

    def __init__(self, encoder: BlockStack, decoder: BlockStack):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor | None = None,
                tgt_mask: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None, *,
                tgt_is_causal: bool = False) -> torch.Tensor:
        """src (B, S, d), tgt (B, T, d) -> (B, T, d). Masks: True = may attend (see :class:`BlockStack`)."""
        memory = self.encoder(src, src_mask)
        return self.decoder(tgt, tgt_mask, memory, memory_mask, is_causal=tgt_is_causal)


def _activation(layer: TorchLayer) -> str:
    act = layer.activation
    if isinstance(act, nn.GELU) and act.approximate == "tanh":
        return "gelu_tanh"
    for name, function, module in (("relu", F.relu, nn.ReLU), ("gelu", F.gelu, nn.GELU), ("silu", F.silu, nn.SiLU)):
        if act is function or isinstance(act, module):
            return name
    raise GlassformerError(f"activation {act!r} of {type(layer).__name__} has no glassformer equivalent "
                           "(supported: relu, gelu, GELU(approximate='tanh'), silu)")


def _check_mha(mha: nn.MultiheadAttention) -> None:
    if not mha._qkv_same_embed_dim:
        raise GlassformerError(f"MultiheadAttention with kdim={mha.kdim}, vdim={mha.vdim} != embed_dim={mha.embed_dim} "
                               "has no glassformer equivalent (its q, k, v projections are not one matrix)")
    if mha.bias_k is not None or mha.add_zero_attn:
        raise GlassformerError("MultiheadAttention with add_bias_kv=True or add_zero_attn=True has no glassformer "
                               "equivalent")


def _mha_rules(ours: str, theirs: str, bias: bool) -> list[Rule]:
    out = [rule(f"{ours}qkv.weight", f"{theirs}in_proj_weight"),
           rule(f"{ours}o_proj.weight", f"{theirs}out_proj.weight")]
    return out + [rule(f"{ours}qkv.bias", f"{theirs}in_proj_bias"),
                  rule(f"{ours}o_proj.bias", f"{theirs}out_proj.bias")] if bias else out


def _layer_rules(layer: TorchLayer, ours: str, theirs: str) -> list[Rule]:
    cross, bias = isinstance(layer, nn.TransformerDecoderLayer), layer.linear1.bias is not None
    out = _mha_rules(f"{ours}self_attn.", f"{theirs}self_attn.", bias)
    pairs = [("attn_norm", "norm1"), ("ffn.up", "linear1"), ("ffn.down", "linear2")]
    if cross:
        out += _mha_rules(f"{ours}cross_attn.", f"{theirs}multihead_attn.", bias)
        pairs += [("cross_norm", "norm2"), ("ffn_norm", "norm3")]
    else:
        pairs.append(("ffn_norm", "norm2"))
    for o, t in pairs:
        out += linear_rules(f"{ours}{o}", f"{theirs}{t}", bias)
    return out


def _block(layer: TorchLayer) -> TransformerBlock:
    """An empty TransformerBlock shaped like a torch layer."""
    _check_mha(layer.self_attn)
    return TransformerBlock(layer.self_attn.embed_dim, layer.self_attn.num_heads, layer.linear1.out_features,
                            cross=isinstance(layer, nn.TransformerDecoderLayer), norm_first=layer.norm_first,
                            activation=_activation(layer), bias=layer.linear1.bias is not None,
                            dropout=layer.dropout.p, norm_eps=layer.norm1.eps)


def _stack(stack: nn.TransformerEncoder | nn.TransformerDecoder, prefix: str = "") -> tuple[BlockStack, list[Rule]]:
    """The BlockStack and its rules, each name under ``prefix`` (both sides)."""
    blocks, rules = [], []
    for i, layer in enumerate(stack.layers):
        blocks.append(_block(layer))
        rules += _layer_rules(layer, f"{prefix}blocks.{i}.", f"{prefix}layers.{i}.")
    norm = None
    if stack.norm is not None:
        norm = nn.LayerNorm(stack.norm.normalized_shape, eps=stack.norm.eps, bias=stack.norm.bias is not None)
        rules += [rule(f"{prefix}norm.{n}", f"{prefix}norm.{n}") for n, _ in stack.norm.named_parameters()]
    return BlockStack(blocks, norm), rules


def from_torch(module: nn.Module) -> nn.Module:
    """The glassformer module with the weights of a torch.nn Transformer module (same training mode).

    MultiheadAttention -> :class:`MultiHeadAttention`; an encoder/decoder layer -> :class:`TransformerBlock`;
    TransformerEncoder/Decoder -> :class:`BlockStack`; Transformer -> :class:`EncoderDecoderStack`.
    TypeError for other modules, ValueError for options with no equivalent.
    """
    if isinstance(module, nn.MultiheadAttention):
        _check_mha(module)
        bias = module.in_proj_bias is not None
        ours = MultiHeadAttention(module.embed_dim, module.num_heads, bias, dropout=module.dropout)
        rules = _mha_rules("", "", bias)
    elif isinstance(module, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
        ours, rules = _block(module), _layer_rules(module, "", "")
    elif isinstance(module, (nn.TransformerEncoder, nn.TransformerDecoder)):
        ours, rules = _stack(module)
    elif isinstance(module, nn.Transformer):
        encoder, rules = _stack(module.encoder, "encoder.")
        decoder, dec_rules = _stack(module.decoder, "decoder.")
        ours, rules = EncoderDecoderStack(encoder, decoder), rules + dec_rules
    else:
        raise ArgumentTypeError(f"from_torch converts nn.MultiheadAttention, nn.Transformer and its encoder/decoder "
                                f"(layers); got {type(module).__name__}")
    expected = {name: t.shape for name, t in ours.state_dict().items()}
    state = import_state(rules, module.state_dict(), expected, source=f"torch.nn.{type(module).__name__}")
    ours.load_state_dict(state)
    return ours.train(module.training)

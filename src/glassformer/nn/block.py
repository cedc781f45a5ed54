"""The Transformer block: attention, optional cross-attention and feed-forward, with residuals."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..errors import GlassformerError
from .attention import MultiHeadAttention
from .feedforward import FeedForward
from .kv_cache import KVCache
from .norms import make_norm
from .taps import Tapped


class TransformerBlock(Tapped):
    """Self-attention -> (cross-attention) -> feed-forward, each a residual sub-layer with a norm.

    The residual ``x + f(x)`` lets each sub-layer learn a correction and gives gradients a short path.
    Where the norm goes is the classic choice:
    post-norm (2017, BERT): ``x = norm(x + f(x))``; pre-norm (GPT-2 on): ``x = x + f(norm(x))``,
    which trains more easily when deep.

    Args:
        d_model, n_heads, d_ff: width, heads and feed-forward width.
        cross: add a cross-attention sub-layer (the decoder of an encoder-decoder).
        norm_first: pre-norm (True) or post-norm (False).
        activation: feed-forward activation (see :class:`FeedForward`).
        bias: biases in linear layers (and LayerNorm).
        n_kv_heads: key/value heads for GQA/MQA.
        dropout: on attention weights and on each sub-layer's output.
        norm: "layernorm" or "rmsnorm"; norm_eps: its epsilon.
        ffn: False leaves the feed-forward sub-layer out (attention-only Transformers, Elhage et al. 2021).

    Parts: ``self_attn`` with ``attn_norm``; ``cross_attn`` with ``cross_norm`` (only when ``cross``);
    ``ffn`` with ``ffn_norm`` (None when ``ffn=False``).

    Hook points (``self.tap``, (B, T, d) each): "resid_pre", then per sub-layer its norm's output
    ("attn_norm", "cross_norm", "ffn_norm") and its output ("attn_out", "cross_attn_out", "mlp_out"),
    and the residual stream after it ("resid_mid", "resid_mid2", "resid_post").
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, cross: bool = False, norm_first: bool = True,
                 activation: str = "gelu", *, bias: bool = True, n_kv_heads: int | None = None,
                 dropout: float = 0.0, norm: str = "layernorm", norm_eps: float = 1e-5, ffn: bool = True):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, bias, n_kv_heads=n_kv_heads, dropout=dropout)
        self.attn_norm = make_norm(norm, d_model, norm_eps, bias)
        self.cross_attn = (MultiHeadAttention(d_model, n_heads, bias, n_kv_heads=n_kv_heads, dropout=dropout)
                           if cross else None)
        self.cross_norm = make_norm(norm, d_model, norm_eps, bias) if cross else None
        self.ffn = FeedForward(d_model, d_ff, activation, bias) if ffn else None
        self.ffn_norm = make_norm(norm, d_model, norm_eps, bias) if ffn else None
        # dropout on each sub-layer's output, applied once in _sublayer (GPT-2, nanoGPT); none inside the FFN
        self.dropout = nn.Dropout(dropout)

    def _sublayer(self, x: torch.Tensor, norm: nn.Module,
                  fn: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]],
                  taps: tuple[str, str]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Both norm placements in one place; ``fn`` maps a tensor (B, T, d) to (output (B, T, d), weights).

        ``taps`` names the hook points of the norm's output and of the sub-layer's output.
        Dropout is the identity in eval mode, so it is only called while training (a decoding step
        runs this twice per layer; the skipped calls are measurable there).
        """
        norm_tap, out_tap = taps
        if self.norm_first:
            y, w = fn(self.tap(norm_tap, norm(x)))
            y = self.tap(out_tap, y)
            return x + (self.dropout(y) if self.training else y), w
        y, w = fn(x)
        y = self.tap(out_tap, y)
        return self.tap(norm_tap, norm(x + (self.dropout(y) if self.training else y))), w

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
        score_bias: torch.Tensor | None = None,
        need_weights: bool = True,
        cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
        """Run the block.

        Args:
            x: (B, T, d).
            mask: self-attention mask, broadcastable to (B, h, T, T); True = may attend.
            memory: encoder output (B, S, d); required when the block has cross-attention.
            memory_mask: cross-attention mask, broadcastable to (B, h, T, S).
            is_causal, rope, score_bias, need_weights, cache: passed to self-attention
                (see :class:`MultiHeadAttention`); cross_cache to cross-attention.
        Returns:
            (x, weights): x (B, T, d); weights {"self": (B, h, T, T), "cross": (B, h, T, S) when
            the block has cross-attention}, with None values when ``need_weights`` is False.
        """
        weights: dict[str, torch.Tensor | None] = {}
        x = self.tap("resid_pre", x)
        x, weights["self"] = self._sublayer(x, self.attn_norm, lambda t: self.self_attn(
            t, mask=mask, is_causal=is_causal, rope=rope, score_bias=score_bias, need_weights=need_weights,
            cache=cache), ("attn_norm", "attn_out"))
        x = self.tap("resid_mid", x)
        if self.cross_attn is not None:
            if memory is None and (cross_cache is None or cross_cache.length == 0):
                raise GlassformerError("this block has cross-attention: pass the encoder output as memory")
            x, weights["cross"] = self._sublayer(x, self.cross_norm, lambda t: self.cross_attn(
                t, kv=memory, mask=memory_mask, need_weights=need_weights, cache=cross_cache),
                ("cross_norm", "cross_attn_out"))
            x = self.tap("resid_mid2", x)
        if self.ffn is not None:
            x, _ = self._sublayer(x, self.ffn_norm, lambda t: (self.ffn(t), None), ("ffn_norm", "mlp_out"))
        return self.tap("resid_post", x), weights

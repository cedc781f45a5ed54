"""The Transformer block: attention, optional cross-attention and feed-forward, with residuals."""

from contextlib import AbstractContextManager

import torch
from torch import nn

from ..errors import GlassformerError
from .attention import AttentionInputs, MultiHeadAttention
from .feedforward import FeedForward
from .freezing import frozen
from .kv_cache import KVCache
from .norms import make_norm
from .taps import NormTaps, Tap, Tapped


class TransformerBlock(Tapped):
    """Self-attention -> (cross-attention) -> feed-forward, each a residual sub-layer with a norm.

    The residual ``x + f(x)`` lets each sub-layer learn a correction and gives gradients a short path.
    Pre-norm (GPT-2 on, ``norm_first``): ``x = x + f(norm(x))``, easier to train deep; post-norm
    (2017, BERT): ``x = norm(x + f(x))``. ``cross`` adds cross-attention (an encoder-decoder's decoder);
    ``ffn=False`` leaves the feed-forward out (attention-only Transformers, Elhage et al. 2021); ``rope``:
    self-attention rotates queries and keys (hook points for the rotated ones); ``qk_norm``: it RMS-normalises
    them per head first.

    Hook points (:class:`~glassformer.nn.taps.Tap`) are registered in the order the forward reaches them,
    between the parts (whose order stays the parameters' order): ``hook_resid_pre``; ``ln1`` (the attention
    norm's :class:`~glassformer.nn.taps.NormTaps`, before the attention when pre-norm, after it when post-norm);
    ``hook_attn_in``, ``hook_q_input``, ``hook_k_input``, ``hook_v_input`` (self-attention's input copied per
    head, (B, T, heads, d), computed only while hooked); ``hook_attn_out``; ``hook_resid_mid``; with ``cross``:
    ``ln2``, ``hook_cross_attn_out``, ``hook_resid_mid2``; with ``ffn``: ``hook_mlp_in``, ``ln2`` (``ln3``
    with ``cross``), ``hook_mlp_out``; ``hook_resid_post``."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, cross: bool = False, norm_first: bool = True,
                 activation: str = "gelu", *, bias: bool = True, n_kv_heads: int | None = None,
                 dropout: float = 0.0, norm: str = "layernorm", norm_eps: float = 1e-5, ffn: bool = True,
                 rope: bool = False, qk_norm: bool = False):
        super().__init__()
        self.norm_first = norm_first
        self.hook_resid_pre = Tap()
        if norm_first:  # a norm's hook points sit where the forward applies it
            self.ln1 = NormTaps()
        self.hook_attn_in, self.hook_q_input, self.hook_k_input, self.hook_v_input = (
            Tap(2, on_demand=True) for _ in range(4))
        self.self_attn = MultiHeadAttention(d_model, n_heads, bias, n_kv_heads=n_kv_heads, dropout=dropout,
                                            rope=rope, qk_norm=qk_norm)
        self.attn_norm = make_norm(norm, d_model, norm_eps, bias)
        self.hook_attn_out = Tap()
        if not norm_first:
            self.ln1 = NormTaps()
        self.hook_resid_mid = Tap()
        self.cross_attn, self.cross_norm = None, None
        if cross:
            if norm_first:
                self.ln2 = NormTaps()
            self.cross_attn = MultiHeadAttention(d_model, n_heads, bias, n_kv_heads=n_kv_heads, dropout=dropout)
            self.cross_norm = make_norm(norm, d_model, norm_eps, bias)
            self.hook_cross_attn_out = Tap()
            if not norm_first:
                self.ln2 = NormTaps()
            self.hook_resid_mid2 = Tap()
        self.ffn, self.ffn_norm = None, None
        if ffn:
            self.hook_mlp_in = Tap()
            ffn_ln = "ln3" if cross else "ln2"  # TransformerLens numbers the norms in order
            if norm_first:
                setattr(self, ffn_ln, NormTaps())
            self.ffn = FeedForward(d_model, d_ff, activation, bias)
            self.ffn_norm = make_norm(norm, d_model, norm_eps, bias)
            self.hook_mlp_out = Tap()
            if not norm_first:
                setattr(self, ffn_ln, NormTaps())
        self.hook_resid_post = Tap()
        self.dropout = nn.Dropout(dropout)  # on each sub-layer's output (GPT-2, nanoGPT); none inside the FFN

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, memory: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, *, inputs: AttentionInputs | None = None,
                cache: KVCache | None = None,
                cross_cache: KVCache | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
        """x (B, T, d) -> (x (B, T, d), weights {"self": (B, h, T, T), "cross": (B, h, T, S)} or None values).

        ``mask`` (B, h, T, T) and ``memory_mask`` (B, h, T, S), True = may attend, or the model's
        :class:`AttentionInputs`; ``memory`` (B, S, d): the encoder output, for cross-attention."""
        inputs = AttentionInputs.given(inputs, mask, memory_mask)
        weights: dict[str, torch.Tensor | None] = {}
        x = self.hook_resid_pre(x)
        if self.norm_first:  # x = x + attn(norm(x))
            normed = self.ln1(self.attn_norm, x)
            out, weights["self"] = self.self_attn(normed, inputs=inputs, cache=cache, head_inputs=self._head_inputs(x))
            x = x + self._dropped(self.hook_attn_out(out))
        else:  # x = norm(x + attn(x))
            out, weights["self"] = self.self_attn(x, inputs=inputs, cache=cache, head_inputs=self._head_inputs(x))
            x = self.ln1(self.attn_norm, x + self._dropped(self.hook_attn_out(out)))
        x = self.hook_resid_mid(x)
        if self.cross_attn is not None:
            if memory is None and (cross_cache is None or cross_cache.length == 0):
                raise GlassformerError("this block has cross-attention: pass the encoder output as memory")
            if self.norm_first:  # x = x + cross_attn(norm(x), memory)
                out, weights["cross"] = self.cross_attn(self.ln2(self.cross_norm, x), memory, inputs=inputs,
                                                        cache=cross_cache)
                x = x + self._dropped(self.hook_cross_attn_out(out))
            else:  # x = norm(x + cross_attn(x, memory))
                out, weights["cross"] = self.cross_attn(x, memory, inputs=inputs, cache=cross_cache)
                x = self.ln2(self.cross_norm, x + self._dropped(self.hook_cross_attn_out(out)))
            x = self.hook_resid_mid2(x)
        if self.ffn is not None:
            ln = self.ln2 if self.cross_attn is None else self.ln3
            mlp_in = x if self.hook_mlp_in.fn is None else self.hook_mlp_in(x.clone())  # a copy only while hooked
            if self.norm_first:  # x = x + ffn(norm(x))
                x = x + self._dropped(self.hook_mlp_out(self.ffn(ln(self.ffn_norm, mlp_in))))
            else:  # x = norm(x + ffn(x))
                x = ln(self.ffn_norm, x + self._dropped(self.hook_mlp_out(self.ffn(mlp_in))))
        return self.hook_resid_post(x), weights

    def frozen(self) -> AbstractContextManager[nn.Module]:
        """``with block.frozen():`` attention patterns and norm scales are constants for autograd, values
        unchanged (attribution graphs; :mod:`glassformer.nn.freezing`)."""
        return frozen(self)

    def _head_inputs(self, x: torch.Tensor) -> torch.Tensor | None:
        """None, or while a per-head input is hooked, self-attention's input per head: x (B, T, d) copied
        per head, tapped, normed (pre-norm) -> (B, T, h + 2 kv, d)."""
        if (self.hook_attn_in.fn is None and self.hook_q_input.fn is None and self.hook_k_input.fn is None
                and self.hook_v_input.fn is None):
            return None
        h, kv = self.self_attn.n_heads, self.self_attn.n_kv_heads
        shared = self.hook_attn_in(x.unsqueeze(2).repeat(1, 1, h, 1))  # (B, T, h, d)
        q, k, v = shared.clone(), shared[:, :, :kv].clone(), shared[:, :, :kv].clone()  # kv head j: head j's copy
        heads = torch.cat([self.hook_q_input(q), self.hook_k_input(k), self.hook_v_input(v)], dim=2)
        return self.attn_norm(heads) if self.norm_first else heads

    def _dropped(self, y: torch.Tensor) -> torch.Tensor:
        """Dropout on a sub-layer's output while training; in eval mode ``y`` itself."""
        return self.dropout(y) if self.training else y

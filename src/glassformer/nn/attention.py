"""Scaled dot-product attention (one function, two paths) and multi-head attention.

``scaled_dot_product_attention`` computes softmax(q kᵀ / √d_k + score_bias) v under a boolean mask. When
nobody asks for the weights it calls the fused ``torch.nn.functional.scaled_dot_product_attention``;
when they are asked for it runs the explicit softmax, so the weights the reader sees are the ones
the model used. Both paths agree to float32 rounding (tests/test_attention.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..errors import ArgumentTypeError, GlassformerError, check_int
from ..runtime.linear import Linear, linear
from .kv_cache import KVCache
from .masks import causal_mask
from .positions import apply_rope
from .taps import Tapped


def _check_mask(mask: torch.Tensor, scores_shape: tuple[int, ...]) -> None:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ArgumentTypeError(f"mask must be a bool tensor (True = may attend), got {got}")
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != torch.Size(scores_shape):
        raise GlassformerError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the attention scores' shape "
            f"{tuple(scores_shape)} (batch..., Tq, Tk)")


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    score_bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = True,
    tap: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention as a soft dictionary lookup: softmax(q kᵀ / √d_k) v (Vaswani et al. 2017, eq. 1).

    Each query is compared with every key; the softmax of the scores weights an average of the
    values. Dividing by √d_k keeps the scores' spread near 1 whatever the width, so the softmax does
    not saturate (examples/02_why_scale.py measures it).

    Args:
        q: (..., h, Tq, d_k) queries; k: (..., kv, Tk, d_k) keys; v: (..., kv, Tk, d_v) values.
            ``kv`` may divide ``h`` (grouped-query attention): each key/value head serves h/kv
            query heads.
        mask: bool, broadcastable to (..., h, Tq, Tk); True = query i may look at key j.
        is_causal: also hide future keys. With Tq < Tk the queries are taken to be the *last* Tq
            positions (as when decoding with a KV cache).
        score_bias: optional float tensor added to the scores before the softmax, broadcastable to
            (..., h, Tq, Tk) (ALiBi's distance penalty).
        dropout_p: dropout on the attention weights (pass 0.0 in eval mode).
        scale: score scale; default 1/√d_k.
        need_weights: return the weights (explicit path) or None (fused path).
        tap: explicit path only: called as ``tap("attn_scores", scores)`` (masked, before the softmax)
            and ``tap("pattern", weights)``; what it returns is used (a hook point, see ``Tapped``).
    Returns:
        (out, weights): out (..., h, Tq, d_v); weights (..., h, Tq, Tk), rows summing to 1, or None.
        A query row with no visible key gets zeros (never NaN) on both paths.
    """
    Tq, Tk = q.shape[-2], k.shape[-2]
    n_heads, n_kv_heads = q.shape[-3], k.shape[-3]
    if n_kv_heads != n_heads:  # grouped-query attention: each kv head serves n_heads / n_kv_heads query heads
        if n_heads % n_kv_heads != 0:
            raise GlassformerError(f"query heads ({n_heads}) must be a multiple of key/value heads ({n_kv_heads})")
        k = k.repeat_interleave(n_heads // n_kv_heads, dim=-3)  # (..., h, Tk, d_k)
        v = v.repeat_interleave(n_heads // n_kv_heads, dim=-3)  # (..., h, Tk, d_v)
    scores_shape = (*q.shape[:-1], Tk)  # (..., h, Tq, Tk)
    if mask is not None:
        _check_mask(mask, scores_shape)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if not need_weights and is_causal and mask is None and score_bias is None and Tq == Tk:
        # the training case: the kernel applies causality itself, no (T, T) mask is built
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale)
        return out, None
    visible = mask
    if is_causal and Tq > 1:  # bottom-right aligned: query i is position Tk - Tq + i
        not_future = causal_mask(Tk, q.device)[Tk - Tq:]  # (Tq, Tk)
        visible = not_future if visible is None else visible & not_future

    if not need_weights:  # fused kernel; the bias and the mask travel together as one float mask
        if visible is None and score_bias is None:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale)
            return out, None
        attn_mask = visible
        if score_bias is not None:
            score_bias = score_bias.to(q.dtype)
            attn_mask = score_bias if visible is None else score_bias.masked_fill(~visible, float("-inf"))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)
        if visible is not None:  # rows with nothing visible: zeros, as on the explicit path
            out = out.masked_fill(~visible.any(dim=-1, keepdim=True), 0.0)
        return out, None

    scores = (q @ k.transpose(-1, -2)) * scale  # (..., h, Tq, Tk)
    if score_bias is not None:
        scores = scores + score_bias
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    if tap is not None:
        scores = tap("attn_scores", scores)
    weights = torch.softmax(scores, dim=-1)  # (..., h, Tq, Tk)
    if visible is not None:
        weights = torch.nan_to_num(weights, nan=0.0)  # rows with nothing visible: 0/0 -> 0
    if tap is not None:
        weights = tap("pattern", weights)
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    return dropped @ v, weights  # (..., h, Tq, d_v)


class MultiHeadAttention(Tapped):
    """Multi-head attention, for self-attention and cross-attention alike.

    The width d is split into h heads of hd = d/h; each head attends on its own and the results are
    concatenated and mixed by ``o_proj``. Queries, keys and values come from one fused projection
    ``qkv`` (one matmul instead of three); for cross-attention (``kv`` given) the same weight is
    sliced: its query rows are applied to ``x`` and its key/value rows to ``kv``. With ``n_kv_heads``
    < ``n_heads`` keys and values have fewer heads (GQA; MQA when n_kv_heads = 1).
    ``need_weights`` defaults to True (a direct call returns the weights, as in the seed); models always pass it.

    Hook points (``self.tap``, see :mod:`glassformer.interpret`): "q", "k", "v" (B, T, heads, hd) as
    projected; "rot_q", "rot_k" (B, heads, T, hd) after RoPE; "attn_scores", "pattern" (B, h, Tq, Tk);
    "z" (B, Tq, h, hd) each head's output before ``o_proj``. A function on "attn_scores" or "pattern"
    moves this layer, and only this one, to the explicit path.

    Args:
        d_model: width d; must be divisible by ``n_heads``.
        n_heads: query heads h.
        bias: biases on the projections.
        n_kv_heads: key/value heads (default ``n_heads``); must divide ``n_heads``.
        dropout: dropout on the attention weights during training.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, *, n_kv_heads: int | None = None,
                 dropout: float = 0.0):
        super().__init__()
        check_int("d_model", d_model, low=1)
        check_int("n_heads", n_heads, low=1)
        n_kv_heads = check_int("n_kv_heads", n_heads if n_kv_heads is None else n_kv_heads, low=1)
        if d_model % n_heads != 0:
            raise GlassformerError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if n_heads % n_kv_heads != 0:
            raise GlassformerError(f"n_heads={n_heads} must be divisible by n_kv_heads={n_kv_heads}")
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d_model // n_heads
        self.dropout = dropout
        # rows: [q: n_heads * hd; k: n_kv_heads * hd; v: n_kv_heads * hd]
        self.qkv = Linear(d_model, (n_heads + 2 * n_kv_heads) * self.head_dim, bias=bias)
        self.o_proj = Linear(d_model, d_model, bias=bias)

    def _heads(self, t: torch.Tensor, n: int, name: str) -> torch.Tensor:
        """(B, T, n * hd) -> (B, n, T, hd): one slice of the width per head; tapped as ``name``."""
        B, T, _ = t.shape
        t = self.tap(name, t.view(B, T, n, self.head_dim))  # (B, T, n, hd)
        return t.transpose(1, 2)  # (B, n, T, hd)

    def project_kv(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of a source sequence (cross-attention) with the key/value rows of ``qkv``.

        Args:
            source: (B, S, d), e.g. the encoder output.
        Returns:
            (k, v), each (B, n_kv_heads, S, hd).
        """
        dq = self.n_heads * self.head_dim
        kv_bias = None if self.qkv.bias is None else self.qkv.bias[dq:]
        k, v = linear(source, self.qkv.weight[dq:], kv_bias).split(self.n_kv_heads * self.head_dim, dim=-1)
        return self._heads(k, self.n_kv_heads, "k"), self._heads(v, self.n_kv_heads, "v")

    def forward(
        self,
        x: torch.Tensor,
        kv: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
        score_bias: torch.Tensor | None = None,
        need_weights: bool = True,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x`` to itself (``kv=None``) or to ``kv`` (cross-attention).

        Args:
            x: (B, Tq, d) queries' source.
            kv: (B, Tk, d) keys' and values' source, or None for self-attention.
            mask: bool, broadcastable to (B, h, Tq, Tk); True = may attend.
            is_causal: hide future keys (see :func:`scaled_dot_product_attention`).
            rope: (cos, sin) from ``rope_angles`` for the queries' positions, applied to q and to the
                new keys (self-attention only).
            score_bias: float tensor added to the scores (ALiBi), broadcastable to (B, h, Tq, Tk).
            need_weights: return the attention weights (explicit path) instead of None (fused).
            cache: a :class:`KVCache`; self-attention appends the new keys/values to it, and
                cross-attention fills it once and reuses it.
        Returns:
            (out, weights): out (B, Tq, d); weights (B, h, Tq, Tk) or None.
        """
        B, Tq, _ = x.shape
        dq, dkv = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        cross = kv is not None or (cache is not None and cache.static)
        if not cross:
            q, k, v = self.qkv(x).split([dq, dkv, dkv], dim=-1)  # (B, Tq, dq), (B, Tq, dkv), (B, Tq, dkv)
            q = self._heads(q, self.n_heads, "q")  # (B, h, Tq, hd)
            k, v = self._heads(k, self.n_kv_heads, "k"), self._heads(v, self.n_kv_heads, "v")  # (B, kv, Tq, hd)
            if rope is not None:
                q, k = self.tap("rot_q", apply_rope(q, *rope)), self.tap("rot_k", apply_rope(k, *rope))
            if cache is not None:
                k, v = cache.update(k, v)  # (B, kv, cached + Tq, hd)
        else:
            q_bias = None if self.qkv.bias is None else self.qkv.bias[:dq]
            q = self._heads(linear(x, self.qkv.weight[:dq], q_bias), self.n_heads, "q")  # (B, h, Tq, hd)
            if cache is not None and cache.length > 0:
                k, v = cache.keys(), cache.values()
            elif kv is None:
                raise GlassformerError("cross-attention needs kv (the encoder output) until its cache is filled")
            else:
                k, v = self.project_kv(kv)  # (B, kv, Tk, hd)
                if cache is not None:
                    k, v = cache.update(k, v)
        explicit = need_weights or self.tapped("attn_scores", "pattern")  # this layer alone leaves the kernel
        out, weights = scaled_dot_product_attention(
            q, k, v, mask, is_causal=is_causal, score_bias=score_bias,
            dropout_p=self.dropout if self.training else 0.0, need_weights=explicit, tap=self.tap)  # (B, h, Tq, hd)
        out = self.tap("z", out.transpose(1, 2))  # (B, Tq, h, hd)
        out = out.reshape(B, Tq, dq)  # heads side by side again: (B, Tq, d)
        return self.o_proj(out), weights if need_weights else None

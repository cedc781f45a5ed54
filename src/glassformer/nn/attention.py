"""Scaled dot-product attention, softmax(q kᵀ / √d_k + score_bias) v, written out step by step; the
same numbers from ``F.scaled_dot_product_attention`` when nobody asks for the weights; multi-head attention."""

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import ArgumentTypeError, GlassformerError
from .freezing import held
from .kv_cache import KVCache
from .linear import Linear
from .masks import causal_mask
from .positions import apply_rope
from .taps import Tap, Tapped

Kernel = Callable[..., torch.Tensor]  # fused_attention's signature: (q, k, v, mask, *, is_causal, score_bias,
# dropout_p, scale) -> out (..., h, Tq, d_v)


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                                 *, is_causal: bool = False, score_bias: torch.Tensor | None = None,
                                 dropout_p: float = 0.0, scale: float | None = None, need_weights: bool = True,
                                 tap_scores: Callable[[torch.Tensor], torch.Tensor] | None = None,
                                 tap_pattern: Callable[[torch.Tensor], torch.Tensor] | None = None,
                                 frozen: bool = False, kernel: Kernel | None = None,
                                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention as a soft dictionary lookup: softmax(q kᵀ / √d_k) v (Vaswani et al. 2017, eq. 1).

    Each query is compared with every key; the softmax of the scores weights an average of the
    values. Dividing by √d_k keeps the scores' spread near 1 whatever the width, so the softmax does
    not saturate (examples/02_why_scale.py measures it).

    Args:
        q: (..., h, Tq, d_k) queries; k: (..., kv, Tk, d_k) keys; v: (..., kv, Tk, d_v) values
            (grouped-query attention: each of kv key/value heads serves h/kv query heads).
        mask: bool, broadcastable to (..., h, Tq, Tk); True = query i may look at key j.
        is_causal: also hide future keys; with Tq < Tk the queries are the *last* Tq positions.
        score_bias: float, broadcastable to (..., h, Tq, Tk), added to the scores (ALiBi).
        need_weights: True: this explicit softmax; False: :func:`fused_attention`, no weights.
        tap_scores, tap_pattern: hook points for the scores (masked, before the softmax) and the weights.
        frozen: hold the weights constant for autograd (:mod:`glassformer.nn.freezing`): the same numbers,
            gradients reach v alone.
        kernel: computes the fused path in place of :func:`fused_attention` (same arguments and numbers within
            the dtype's rounding); None: :func:`fused_attention`.
    Returns:
        (out (..., h, Tq, d_v), weights (..., h, Tq, Tk) or None); a query with no visible key gets zeros."""
    k, v = _share_kv_heads(q, k, v)  # (..., h, Tk, d_k), (..., h, Tk, d_v)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if need_weights or (frozen and dropout_p > 0):  # frozen with dropout: one draw, so value and gradient agree
        visible = _visible_keys(mask, is_causal, n_queries=q.shape[-2], n_keys=k.shape[-2],
                                device=q.device)  # (..., Tq, Tk) or None
        scores = (q @ k.transpose(-1, -2)) * scale  # (..., h, Tq, Tk)
        if score_bias is not None:
            scores = scores + score_bias
        if visible is not None:
            scores = scores.masked_fill(~visible, float("-inf"))
        if tap_scores is not None:
            scores = tap_scores(scores)
        weights = torch.softmax(scores, dim=-1)  # (..., h, Tq, Tk)
        if visible is not None:
            weights = torch.nan_to_num(weights, nan=0.0)  # rows with nothing visible: 0/0 -> 0
        if frozen:
            weights = weights.detach()
        if tap_pattern is not None:
            weights = tap_pattern(weights)
        dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
        return dropped @ v, weights  # (..., h, Tq, d_v)
    out = (kernel or fused_attention)(q, k, v, mask, is_causal=is_causal, score_bias=score_bias, dropout_p=dropout_p,
                                      scale=scale)
    if frozen:  # the kernel's numbers, the gradient of (constant pattern) @ v
        linear, _ = scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, score_bias=score_bias,
                                                 scale=scale, frozen=True)
        out = held(out, linear)
    return out, None


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, *, is_causal: bool,
                    score_bias: torch.Tensor | None, dropout_p: float, scale: float) -> torch.Tensor:
    """The explicit path's numbers from one ``F.scaled_dot_product_attention`` call: out (..., h, Tq, d_v).

    Arguments as :func:`scaled_dot_product_attention` (k, v with h heads). Mask and score bias travel
    as one float mask; the training case (causal, nothing else, Tq = Tk) builds no (T, T) mask."""
    Tq, Tk = q.shape[-2], k.shape[-2]
    if is_causal and mask is None and score_bias is None and Tq == Tk:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale)
    visible = _visible_keys(mask, is_causal, n_queries=Tq, n_keys=Tk, device=q.device)
    if visible is None and score_bias is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale)
    attn_mask = visible
    if score_bias is not None:
        score_bias = score_bias.to(q.dtype)
        attn_mask = score_bias if visible is None else score_bias.masked_fill(~visible, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)
    if visible is not None:  # rows with nothing visible: zeros, as on the explicit path
        out = out.masked_fill(~visible.any(dim=-1, keepdim=True), 0.0)
    return out


def _share_kv_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Grouped-query attention: repeat each of the kv key/value heads for its h/kv query heads."""
    n_heads, n_kv_heads = q.shape[-3], k.shape[-3]
    if n_kv_heads == n_heads:
        return k, v
    group = n_heads // n_kv_heads
    return k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)


def _visible_keys(mask: torch.Tensor | None, is_causal: bool, *, n_queries: int, n_keys: int,
                  device: torch.device) -> torch.Tensor | None:
    """``mask`` and, when causal, "no future key" (bottom-right aligned: query i is position Tk - Tq + i)."""
    if not is_causal or n_queries <= 1:
        return mask
    not_future = causal_mask(n_keys, device)[n_keys - n_queries:]  # (Tq, Tk)
    return not_future if mask is None else mask & not_future


@dataclass(frozen=True)
class AttentionInputs:
    """What attention needs besides the vectors, built once per forward pass for every block: the self-
    and cross-attention masks (bool, True = may attend), causality (a flag: the fused kernel needs no
    mask), RoPE's (cos, sin), each (T, hd) or (B, T, hd), ALiBi's score bias (B, h, T, Tk),
    whether to return the weights (explicit softmax) or None (fused kernel), and ``slot`` (1,): a fixed-shape
    decoding step's cache slot (:meth:`KVCache.update`)."""

    mask: torch.Tensor | None = None
    memory_mask: torch.Tensor | None = None
    is_causal: bool = False
    rope: tuple[torch.Tensor, torch.Tensor] | None = None
    score_bias: torch.Tensor | None = None
    need_weights: bool = True
    slot: torch.Tensor | None = None

    @staticmethod
    def given(inputs: "AttentionInputs | None", mask: torch.Tensor | None = None,
              memory_mask: torch.Tensor | None = None) -> "AttentionInputs":
        """``inputs``, or the lessons' plain masks made into one; both at once is an error."""
        if inputs is None:
            return AttentionInputs(mask=mask, memory_mask=memory_mask)
        if mask is not None or memory_mask is not None:
            raise ArgumentTypeError("pass the masks either as mask/memory_mask or inside inputs, not both")
        return inputs


class MultiHeadAttention(Tapped):
    """Multi-head attention, for self-attention and cross-attention alike.

    The width d is split into h heads of hd = d/h; each head attends on its own, and ``o_proj`` mixes
    the concatenated results. Queries, keys and values come from one fused projection ``qkv``;
    cross-attention applies its query rows to ``x`` and its key/value rows to the memory. With
    ``n_kv_heads`` < ``n_heads`` keys and values have fewer heads (GQA; MQA when n_kv_heads = 1).

    Hook points (:class:`~glassformer.nn.taps.Tap`), in forward order: ``hook_q``, ``hook_k``, ``hook_v``
    (B, T, heads, hd); with ``rope``, ``hook_rot_q``, ``hook_rot_k`` after the rotation; ``hook_attn_scores``,
    ``hook_pattern`` (B, h, Tq, Tk) (hooking them moves this layer to the explicit path); ``hook_z``
    (B, Tq, h, hd) before ``o_proj``; ``hook_result`` (B, Tq, h, d) each head's write, without the bias.
    ``qk_norm``: queries and keys are RMS-normalised per head (no weight) after their hook points, before RoPE
    (Dehghani et al. 2023; the modded-nanogpt speedruns). ``frozen_mode``: the pattern is a constant for
    autograd (:mod:`glassformer.nn.freezing`). ``kernel``: None
    (:func:`fused_attention`) or a function with its arguments computing the same attention another way, set by
    a caller that asks for it (bfloat16 attention on the CPU's bfloat16 units, the blocked kernel of the speed policy,
    chosen by measurement and kept outside nn/)."""

    frozen_mode = False
    kernel: Kernel | None = None

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, *, n_kv_heads: int | None = None,
                 dropout: float = 0.0, rope: bool = False, qk_norm: bool = False):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d_model // n_heads
        self.dropout = dropout
        # rows: [q: n_heads * hd; k: n_kv_heads * hd; v: n_kv_heads * hd]
        self.qkv = Linear(d_model, (n_heads + 2 * n_kv_heads) * self.head_dim, bias=bias)
        self.o_proj = Linear(d_model, d_model, bias=bias)
        self.hook_q, self.hook_k, self.hook_v = Tap(2), Tap(2), Tap(2)
        self.qk_norm = qk_norm  # queries and keys RMS-normalised per head (no weight) before RoPE and the scores
        self.rope = rope  # rotated queries and keys get hook points of their own
        if rope:
            self.hook_rot_q, self.hook_rot_k = Tap(2, heads_first=True), Tap(2, heads_first=True)
        self.hook_attn_scores, self.hook_pattern = Tap(1, position_axis=2), Tap(1, position_axis=2)
        self.hook_z, self.hook_result = Tap(2), Tap(2, on_demand=True)

    def _heads(self, t: torch.Tensor, n: int, tap: Tap) -> torch.Tensor:
        """(B, T, n * hd) -> (B, n, T, hd): one slice of the width per head, through ``tap``."""
        B, T, _ = t.shape
        return tap(t.view(B, T, n, self.head_dim)).transpose(1, 2)  # (B, n, T, hd)

    def project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention's keys and values: memory (B, S, d) through the key/value rows of ``qkv``
        -> (k, v), each (B, n_kv_heads, S, hd)."""
        dq = self.n_heads * self.head_dim
        kv_bias = None if self.qkv.bias is None else self.qkv.bias[dq:]
        k, v = F.linear(memory, self.qkv.weight[dq:], kv_bias).split(self.n_kv_heads * self.head_dim, dim=-1)
        return self._heads(k, self.n_kv_heads, self.hook_k), self._heads(v, self.n_kv_heads, self.hook_v)

    def project_per_head(self, x: torch.Tensor) -> torch.Tensor:
        """``qkv`` with an input per head: x (B, T, h + 2 kv, d) (queries', keys', values' heads)
        -> (B, T, (h + 2 kv) hd)."""
        y = torch.einsum("bthd,hed->bthe", x, self.qkv.weight.view(x.shape[2], self.head_dim, -1))
        return (y if self.qkv.bias is None else y + self.qkv.bias.view(-1, self.head_dim)).flatten(2)

    def per_head_output(self, z: torch.Tensor) -> torch.Tensor:
        """``o_proj`` head by head, each head's write into the stream: z (..., h, hd) -> (..., h, d); their sum
        + ``o_proj.bias`` is the output. The one place a head's output is computed (hooks, caches, lenses and
        circuits call it); the weight is cast to z's dtype (a lens in float64)."""
        weight = self.o_proj.weight.view(-1, self.n_heads, self.head_dim).to(z.dtype)  # (d, h, hd)
        return torch.einsum("...he,dhe->...hd", z, weight)

    # Per-head views of the weights, TransformerLens's layout (views of the parameters: gradients flow).
    def head_rows(self, kind: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The rows of ``qkv`` that compute ``kind`` ("q", "k" or "v"), one block per head: weight (heads, hd, d)
        and bias (heads, hd) or None. ``F.linear(x, weight[i], bias[i])`` is head i's query (key, value)."""
        h, kv, hd = self.n_heads, self.n_kv_heads, self.head_dim
        start, n = {"q": (0, h), "k": (h, kv), "v": (h + kv, kv)}[kind]
        weight = self.qkv.weight.view(h + 2 * kv, hd, -1)[start:start + n]
        bias = None if self.qkv.bias is None else self.qkv.bias.view(h + 2 * kv, hd)[start:start + n]
        return weight, bias

    @property
    def W_Q(self) -> torch.Tensor:  # noqa: N802 (TransformerLens's names)
        """Queries per head, (h, d, hd): q_i = x W_Q[i] + b_Q[i]."""
        return self.head_rows("q")[0].transpose(-2, -1)

    @property
    def W_K(self) -> torch.Tensor:  # noqa: N802
        """Keys per key/value head, (kv, d, hd)."""
        return self.head_rows("k")[0].transpose(-2, -1)

    @property
    def W_V(self) -> torch.Tensor:  # noqa: N802
        """Values per key/value head, (kv, d, hd)."""
        return self.head_rows("v")[0].transpose(-2, -1)

    @property
    def W_O(self) -> torch.Tensor:  # noqa: N802
        """Each head's columns of ``o_proj``, (h, hd, d): head i writes z_i W_O[i]."""
        return self.o_proj.weight.view(-1, self.n_heads, self.head_dim).permute(1, 2, 0)

    def head_bias(self, kind: str) -> torch.Tensor:
        """b_Q (h, hd), b_K, b_V (kv, hd) for ``kind`` "q", "k", "v"; b_O (d,) for "o"; zeros without biases."""
        if kind == "o":
            bias = self.o_proj.bias
            return bias if bias is not None else self.o_proj.weight.new_zeros(self.o_proj.out_features)
        weight, bias = self.head_rows(kind)
        return bias if bias is not None else weight.new_zeros(weight.shape[:2])

    def _width_error(self, name: str, x: torch.Tensor, error: RuntimeError) -> Exception:
        """The error for a projection torch refused: a GlassformerError when ``x``'s width is not d_model,
        else torch's own ``error`` (a genuine bug keeps its message)."""
        if x.shape[-1] != self.qkv.in_features:
            return GlassformerError(f"{name} has width {x.shape[-1]} (shape {tuple(x.shape)}); this attention "
                                    f"expects d_model={self.qkv.in_features}")
        return error

    def forward(self, x: torch.Tensor, kv: torch.Tensor | None = None, mask: torch.Tensor | None = None, *,
                inputs: AttentionInputs | None = None, cache: KVCache | None = None,
                head_inputs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x`` (B, Tq, d) to itself (``kv=None``) or to the memory ``kv`` (B, Tk, d)
        -> (out (B, Tq, d), weights (B, h, Tq, Tk) or None).

        ``mask`` alone (weights returned) or the model's :class:`AttentionInputs`. ``cache``: self-attention
        appends the new keys/values, cross-attention fills it once. ``head_inputs``: an input per head."""
        B, Tq, _ = x.shape
        dq = self.n_heads * self.head_dim
        cross = kv is not None or (cache is not None and cache.static)
        inputs = AttentionInputs.given(inputs, memory_mask=mask) if cross else AttentionInputs.given(inputs, mask)
        if not cross:
            try:
                qkv = self.qkv(x) if head_inputs is None else self.project_per_head(head_inputs)
            except RuntimeError as error:  # checked only when torch refuses: nothing per call
                raise self._width_error("x", x, error) from None
            h, n_kv = self.n_heads, self.n_kv_heads
            q, k, v = qkv.view(B, Tq, h + 2 * n_kv, self.head_dim).split_with_sizes((h, n_kv, n_kv), dim=2)
            q = self.hook_q(q).transpose(1, 2)  # (B, h, Tq, hd)
            k = self.hook_k(k).transpose(1, 2)  # (B, kv, Tq, hd)
            v = self.hook_v(v).transpose(1, 2)  # (B, kv, Tq, hd)
            if self.qk_norm:  # every query and key of unit RMS: the scores' scale is set by 1/sqrt(hd) alone
                q, k = F.rms_norm(q, (self.head_dim,)), F.rms_norm(k, (self.head_dim,))
            if inputs.rope is not None:
                q, k = apply_rope(q, *inputs.rope), apply_rope(k, *inputs.rope)  # (B, h or kv, Tq, hd)
                if self.rope:
                    q, k = self.hook_rot_q(q), self.hook_rot_k(k)
            if cache is not None:
                k, v = cache.update(k, v, inputs.slot)  # (B, kv, cached + Tq, hd); slot: (B, kv, capacity, hd)
            mask, is_causal, score_bias = inputs.mask, inputs.is_causal, inputs.score_bias
        else:
            q_bias = None if self.qkv.bias is None else self.qkv.bias[:dq]
            try:
                q = F.linear(x, self.qkv.weight[:dq], q_bias)  # (B, Tq, h * hd)
            except RuntimeError as error:
                raise self._width_error("x", x, error) from None
            q = self._heads(q, self.n_heads, self.hook_q)  # (B, h, Tq, hd)
            if cache is not None and cache.length > 0:
                k, v = cache.keys(), cache.values()
            else:
                k, v = self.project_kv(kv)  # (B, kv, S, hd)
                if cache is not None:
                    k, v = cache.update(k, v)
            mask, is_causal, score_bias = inputs.memory_mask, False, None
        explicit = (inputs.need_weights or self.hook_attn_scores.fn is not None
                    or self.hook_pattern.fn is not None)  # hooked: this layer alone leaves the kernel
        out, weights = scaled_dot_product_attention(
            q, k, v, mask, is_causal=is_causal, score_bias=score_bias,
            dropout_p=self.dropout if self.training else 0.0, need_weights=explicit,
            tap_scores=self.hook_attn_scores, tap_pattern=self.hook_pattern, frozen=self.frozen_mode,
            kernel=self.kernel)  # (B, h, Tq, hd)
        out = self.hook_z(out.transpose(1, 2))  # (B, Tq, h, hd)
        weights = weights if inputs.need_weights else None
        if self.hook_result.fn is not None:  # o_proj head by head: each head's write, then their sum
            result = self.hook_result(self.per_head_output(out))  # (B, Tq, h, d)
            return result.sum(2) + (0.0 if self.o_proj.bias is None else self.o_proj.bias), weights
        out = out.reshape(B, Tq, dq)  # heads side by side again: (B, Tq, d)
        return self.o_proj(out), weights

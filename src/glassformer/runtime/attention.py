"""Attention whose products run on the CPU's bfloat16 units: blocked, flash-style, forward and backward.

torch's CPU flash kernel takes as long in bfloat16 as in float32 (docs/benchmarks.md), while a bfloat16 ``bmm``
runs on the CPU's bfloat16 dot-product units (avx512_bf16, AMX) at several times float32's speed.
:func:`blocked_attention` computes softmax(q kᵀ·scale) v one block of ``BLOCK_Q`` queries at a time (after Dao et
al. 2022, FlashAttention): both products are bfloat16 ``bmm``s, the softmax runs in float32 inside torch's kernel
over the block's whole visible key row (so no running maximum is needed: a block's memory is BLOCK_Q x Tk per
head), and keys after a causal block's last query are never multiplied. The backward pass reuses each block's
weights up to ``KEEP_WEIGHTS_KEYS`` keys (faster) and recomputes them beyond (no (T, T) pattern kept).
Whether it is faster is measured per machine and shape class (:func:`.kernel_choice.choose`, with autograd):
:class:`Bf16Attention` is the ``kernel`` a caller sets on :class:`glassformer.nn.attention.MultiHeadAttention`
(:func:`use_bf16_attention`); everywhere else, and on a CPU without bfloat16 units, the block's own
:func:`~glassformer.nn.attention.fused_attention` runs.
"""

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from ..nn.attention import MultiHeadAttention, fused_attention
from .kernel_choice import choose, cpu_features
from .precision import BF16_FLAGS

BLOCK_Q = 64  # queries per block: small blocks skip more of a causal pattern, larger ones call fewer products
KEEP_WEIGHTS_KEYS = 512  # up to this many keys the forward's weights are kept for backward (at most BLOCK_Q x 512
# bfloat16 numbers per query block and head, ~1.2 KB a token per head at T 256); beyond it they are recomputed


def _blocks(n_queries: int, n_keys: int, is_causal: bool, size: int) -> list[tuple[int, int, int, int | None]]:
    """[(qs, qe, keys, first)]: query block [qs, qe) of ``size`` queries sees keys [0, keys); a causal block sees no
    key after its last query, its first query sitting at key position ``first`` (bottom-right aligned: query i sits
    at Tk - Tq + i); ``first`` None: nothing hidden but by the mask."""
    blocks = []
    for qs in range(0, n_queries, size):
        qe = min(qs + size, n_queries)
        first = n_keys - n_queries + qs if is_causal and n_queries > 1 else None
        blocks.append((qs, qe, n_keys if first is None else max(0, min(n_keys, first + qe - qs)), first))
    return blocks


def _probabilities(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, qs: int, qe: int, keys: int,
                   first: int | None) -> torch.Tensor:
    """The attention weights of one block of :func:`_blocks`: softmax(q kᵀ) over its keys, q (N, Tq, d) already
    scaled, k (N, Tk, d), ``mask`` (N, Tq, Tk) bool or None -> (N, qe - qs, keys) in q's dtype. The product runs in
    q's dtype (the bfloat16 units), the softmax in float32 inside torch's kernel; a row with no visible key gets
    zeros."""
    s = torch.bmm(q[:, qs:qe], k[:, :keys].transpose(1, 2))  # (N, bq, keys)
    if first is not None and first < keys - 1:  # some key lies after the block's first query: hide key j from
        hidden = torch.ones(qe - qs, keys, dtype=torch.bool, device=q.device).triu(first + 1)  # query i, j > first + i
        s.masked_fill_(hidden, float("-inf"))
    if mask is not None:
        s.masked_fill_(~mask[:, qs:qe, :keys], float("-inf"))
    p = torch.softmax(s, dim=-1)
    return p if mask is None else p.nan_to_num_(0.0)  # rows with nothing visible: 0/0 -> 0


class _BlockedAttention(torch.autograd.Function):
    """softmax(q kᵀ·scale + hidden) v with products in the inputs' dtype; see :func:`blocked_attention`."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                is_causal: bool, scale: float) -> torch.Tensor:
        Tq, Tk = q.shape[1], k.shape[1]
        keep = any(ctx.needs_input_grad[:3]) and Tk <= KEEP_WEIGHTS_KEYS  # else backward recomputes them
        out = q.new_zeros(*q.shape[:-1], v.shape[-1])  # (N, Tq, dv): causal rows with no key stay 0
        kept = []
        with torch.autocast("cpu", enabled=False):
            q_scaled = q * scale  # (N, Tq, d); exact for a power-of-two scale (head width 4, 16, 64, 256)
            for qs, qe, keys, first in _blocks(Tq, Tk, is_causal, BLOCK_Q):
                if keys:
                    p = _probabilities(q_scaled, k, mask, qs, qe, keys, first)  # (N, bq, keys)
                    torch.bmm(p, v[:, :keys], out=out[:, qs:qe])  # (N, bq, dv)
                    kept += [p] if keep else []
        ctx.save_for_backward(q_scaled, k, v, out, mask, *kept)
        ctx.is_causal, ctx.scale, ctx.block = is_causal, scale, BLOCK_Q
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q_scaled, k, v, out, mask, *kept = ctx.saved_tensors
        Tq, Tk = q_scaled.shape[1], k.shape[1]
        grad_out = grad_out.to(q_scaled.dtype).contiguous()
        dq = torch.empty_like(q_scaled)  # (N, Tq, d): each query block's rows written once
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)  # (N, Tk, d), (N, Tk, dv): summed over query blocks
        weights = iter(kept)
        with torch.autocast("cpu", enabled=False):
            delta = (grad_out.float() * out.float()).sum(-1, keepdim=True).to(out.dtype)  # (N, Tq, 1): rowsum(dO∘O)
            for qs, qe, keys, first in _blocks(Tq, Tk, ctx.is_causal, ctx.block):
                if not keys:
                    dq[:, qs:qe] = 0
                    continue
                qb, gb = q_scaled[:, qs:qe], grad_out[:, qs:qe]  # (N, bq, d), (N, bq, dv)
                p = next(weights) if kept else _probabilities(q_scaled, k, mask, qs, qe, keys, first)
                torch.baddbmm(dv[:, :keys], p.transpose(1, 2), gb, out=dv[:, :keys])  # summed in float32 inside
                ds = torch.bmm(gb, v[:, :keys].transpose(1, 2)).sub_(delta[:, qs:qe]).mul_(p)  # softmax's backward
                torch.bmm(ds, k[:, :keys], out=dq[:, qs:qe]).mul_(ctx.scale)
                torch.baddbmm(dk[:, :keys], ds.transpose(1, 2), qb, out=dk[:, :keys])  # qb holds the scale
        return dq, dk, dv, None, None, None


def blocked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
                      is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """softmax(q kᵀ·scale) v, blocked: products in q's dtype (bfloat16: on the bfloat16 units), softmax in float32.

    Args:
        q: (B, h, Tq, d); k: (B, h, Tk, d); v: (B, h, Tk, dv), one dtype (keys and values already shared out
            to every query head).
        mask: bool, broadcastable to (B, h, Tq, Tk); True = may attend. is_causal: also hide future keys
            (bottom-right aligned, as :func:`~glassformer.nn.attention.scaled_dot_product_attention`).
        scale: 1/√d by default.
    Returns:
        (B, h, Tq, dv) in q's dtype; a query with no visible key gets zeros (and zero gradients)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    *batch, Tq, _ = q.shape
    Tk = k.shape[-2]
    if mask is not None:  # (N, Tq, Tk), N = B·h (copied where it broadcast)
        mask = mask.expand(*batch, Tq, Tk).flatten(0, -3)
    out = _BlockedAttention.apply(q.flatten(0, -3), k.flatten(0, -3), v.flatten(0, -3), mask, is_causal, scale)
    return out.view(*batch, Tq, v.shape[-1])


def bf16_units() -> bool:
    """Whether this CPU multiplies bfloat16 natively (avx512_bf16 or AMX); without them bfloat16 is emulated."""
    return any(flag in cpu_features() for flag in BF16_FLAGS)


class Bf16Attention:
    """A ``kernel`` for :class:`~glassformer.nn.attention.MultiHeadAttention`: :func:`blocked_attention` for
    bfloat16 queries on a CPU with bfloat16 units where measured faster than the block's fused kernel for that
    shape class, the fused kernel everywhere else (float32, dropout, a score bias, another device). The CPU is
    read once, and each shape's answer asked once, per object (one serves a model)."""

    def __init__(self) -> None:
        self.units = bf16_units()  # whether the CPU has bfloat16 units
        self.answers: dict[tuple, bool] = {}  # (q's shape, Tk, mask shape, causal, autograd) -> blocked or not

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, *,
                 is_causal: bool, score_bias: torch.Tensor | None, dropout_p: float, scale: float) -> torch.Tensor:
        """Arguments and result as :func:`~glassformer.nn.attention.fused_attention`: out (B, h, Tq, dv)."""
        if (q.dtype == k.dtype == v.dtype == torch.bfloat16 and q.device.type == "cpu" and score_bias is None
                and dropout_p == 0 and q.dim() == 4 and q.shape[-2] > 1 and self.pays(q, k, mask, is_causal)):
            return blocked_attention(q, k, v, mask, is_causal=is_causal, scale=scale)
        return fused_attention(q, k, v, mask, is_causal=is_causal, score_bias=score_bias, dropout_p=dropout_p,
                               scale=scale)

    def pays(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, is_causal: bool) -> bool:
        """Whether the blocked kernel takes this work: never without bfloat16 units, else :func:`blocked_pays`."""
        if not self.units:
            return False
        key = (q.shape, k.shape[-2], None if mask is None else mask.shape, is_causal,
               torch.is_grad_enabled() and q.requires_grad)
        if key not in self.answers:
            self.answers[key] = blocked_pays(q, k, mask, is_causal)
        return self.answers[key]


def _length_class(n: int) -> int:
    """A length's class for a measured choice: the next power of two (a choice holds for lengths near it)."""
    return 1 << max(0, n - 1).bit_length()


def blocked_pays(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, is_causal: bool) -> bool:
    """Whether :func:`blocked_attention` beats the fused kernel here for this shape class (on a CPU with bfloat16
    units): measured once per (training or not, causal or masked, B·h, lengths, head width), with autograd."""
    B, h, _, d = q.shape
    rows, tq, tk = B * h, _length_class(q.shape[-2]), _length_class(k.shape[-2])  # the shape class
    grad = torch.is_grad_enabled() and q.requires_grad
    kind = "causal" if is_causal and mask is None else "masked" if mask is not None else "full"
    case = f"attention bfloat16 blocked: {'train' if grad else 'infer'} {kind} {rows} rows Tq~{tq} Tk~{tk} d{d}"

    def ways() -> tuple:
        g = torch.Generator().manual_seed(0)
        shapes = [(rows, 1, tq, d), (rows, 1, tk, d), (rows, 1, tk, d)]
        q_, k_, v_ = (torch.randn(s, generator=g).to(torch.bfloat16).requires_grad_(grad) for s in shapes)
        # a prefix-like pattern: the mask's cost, whatever its values
        m_ = None if mask is None else torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq)

        def timed(attention: Callable[..., torch.Tensor]) -> Callable[[], None]:
            def call() -> None:
                out = attention(q_, k_, v_, m_, is_causal=is_causal, scale=1.0 / math.sqrt(d))
                if grad:
                    out.backward(torch.ones_like(out))
            return call

        return timed(partial(fused_attention, score_bias=None, dropout_p=0.0)), timed(blocked_attention)

    return choose(case, ways, grad=grad)


def use_bf16_attention(model: nn.Module, enabled: bool = True) -> int:
    """Set (``enabled``) or remove the :class:`Bf16Attention` kernel on every attention of ``model``; returns how
    many attentions were changed. Float32 work is untouched: the kernel passes it to the fused kernel."""
    kernel = Bf16Attention() if enabled else None
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    for layer in layers:
        layer.kernel = kernel
    return len(layers)

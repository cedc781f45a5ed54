"""The Transformer block: attention, optional cross-attention and feed-forward, with residuals."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import GlassformerError
from .attention import AttentionInputs, MultiHeadAttention
from .feedforward import FeedForward
from .kv_cache import KVCache
from .norms import make_norm
from .taps import Tapped


class TransformerBlock(Tapped):
    """Self-attention -> (cross-attention) -> feed-forward, each a residual sub-layer with a norm.

    The residual ``x + f(x)`` lets each sub-layer learn a correction and gives gradients a short path.
    Where the norm goes is the classic choice, written out in :meth:`forward`:
    pre-norm (GPT-2 on): ``x = x + f(norm(x))``, which trains more easily when deep;
    post-norm (2017, BERT): ``x = norm(x + f(x))``.

    Args:
        d_model, n_heads, d_ff: width, heads and feed-forward width.
        cross: add a cross-attention sub-layer (the decoder of an encoder-decoder).
        norm_first: pre-norm (True) or post-norm (False).
        activation: feed-forward activation (see :class:`FeedForward`).
        bias: biases in linear layers (and LayerNorm).
        n_kv_heads: key/value heads for GQA/MQA.
        dropout: on attention weights and on each sub-layer's output (while training).
        norm: "layernorm" or "rmsnorm"; norm_eps: its epsilon.
        ffn: False leaves the feed-forward sub-layer out (attention-only Transformers, Elhage et al. 2021).

    Parts: ``self_attn`` with ``attn_norm``; ``cross_attn`` with ``cross_norm`` (only when ``cross``);
    ``ffn`` with ``ffn_norm`` (None when ``ffn=False``).

    Hook points (``self.tap``, (B, T, d) each): "resid_pre", then per sub-layer its norm's output
    ("attn_norm", "cross_norm", "ffn_norm") and its output ("attn_out", "cross_attn_out", "mlp_out"),
    and the residual stream after it ("resid_mid", "resid_mid2", "resid_post"); "mlp_in", a copy of what
    the feed-forward reads. While hooked only, per head (B, T, heads, d): "attn_in", then "q_input",
    "k_input", "v_input", the stream copied per head for self-attention to read (see :meth:`_head_inputs`).
    """

    HEAD_INPUT_TAPS = ("attn_in", "q_input", "k_input", "v_input")  # self-attention's inputs per head

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
        self.dropout = nn.Dropout(dropout)  # on each sub-layer's output (GPT-2, nanoGPT); none inside the FFN

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        *,
        inputs: AttentionInputs | None = None,
        cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
        """Run the block.

        Args:
            x: (B, T, d).
            mask: self-attention mask, broadcastable to (B, h, T, T); True = may attend.
            memory: encoder output (B, S, d); required when the block has cross-attention.
            memory_mask: cross-attention mask, broadcastable to (B, h, T, S).
            inputs: instead of the two masks, the model's :class:`AttentionInputs` (masks, causality,
                RoPE, score bias, whether to return weights).
            cache: self-attention's :class:`KVCache`; cross_cache: cross-attention's.
        Returns:
            (x, weights): x (B, T, d); weights {"self": (B, h, T, T), "cross": (B, h, T, S) when
            the block has cross-attention}, with None values when weights are not asked for.
        """
        inputs = AttentionInputs.given(inputs, mask, memory_mask)
        weights: dict[str, torch.Tensor | None] = {}
        x = self.tap("resid_pre", x)

        if self.norm_first:  # x = x + attn(norm(x))
            normed = self.tap("attn_norm", self.attn_norm(x))
            out, weights["self"] = self.self_attn(normed, inputs=inputs, cache=cache, head_inputs=self._head_inputs(x))
            x = x + self._dropped(self.tap("attn_out", out))
        else:  # x = norm(x + attn(x))
            out, weights["self"] = self.self_attn(x, inputs=inputs, cache=cache, head_inputs=self._head_inputs(x))
            x = self.tap("attn_norm", self.attn_norm(x + self._dropped(self.tap("attn_out", out))))
        x = self.tap("resid_mid", x)

        if self.cross_attn is not None:
            if memory is None and (cross_cache is None or cross_cache.length == 0):
                raise GlassformerError("this block has cross-attention: pass the encoder output as memory")
            if self.norm_first:  # x = x + cross_attn(norm(x), memory)
                out, weights["cross"] = self.cross_attn(self.tap("cross_norm", self.cross_norm(x)), memory,
                                                        inputs=inputs, cache=cross_cache)
                x = x + self._dropped(self.tap("cross_attn_out", out))
            else:  # x = norm(x + cross_attn(x, memory))
                out, weights["cross"] = self.cross_attn(x, memory, inputs=inputs, cache=cross_cache)
                x = self.tap("cross_norm", self.cross_norm(x + self._dropped(self.tap("cross_attn_out", out))))
            x = self.tap("resid_mid2", x)

        if self.ffn is not None:
            mlp_in = self.tap("mlp_in", x.clone()) if self.tapped("mlp_in") else x  # a copy only while hooked
            if self.norm_first:  # x = x + ffn(norm(x))
                x = x + self._dropped(self.tap("mlp_out", self.ffn(self.tap("ffn_norm", self.ffn_norm(mlp_in)))))
            else:  # x = norm(x + ffn(x))
                x = self.tap("ffn_norm", self.ffn_norm(x + self._dropped(self.tap("mlp_out", self.ffn(mlp_in)))))
        return self.tap("resid_post", x), weights

    def hook_points(self, rope: bool) -> list[tuple[str, nn.Module, str, nn.Module | None]]:
        """This block's taps in the order :meth:`forward` reaches them, under TransformerLens's short names.

        Args:
            rope: whether self-attention rotates q and k (then it has "rot_q", "rot_k").
        Returns:
            (short name, the module that taps, its tap, the norm whose output the tap is or None) each;
            a norm row stands for the norm's own points too (``interpret.points`` names them).
        """
        def attention(module: MultiHeadAttention, cross: bool) -> list:
            return [(("cross_" if cross else "") + t, module, t, None) for t in module.TAPS
                    if (rope and not cross) or t not in ("rot_q", "rot_k")]  # cross-attention keys are not rotated

        ln1 = [("ln1", self, "attn_norm", self.attn_norm)]
        points = [("resid_pre", self, "resid_pre", None), *(ln1 if self.norm_first else [])]
        points += [(t, self, t, None) for t in self.HEAD_INPUT_TAPS] + attention(self.self_attn, cross=False)
        points += [("attn_out", self, "attn_out", None), *([] if self.norm_first else ln1)]
        points.append(("resid_mid", self, "resid_mid", None))
        if self.cross_attn is not None:
            ln2 = [("ln2", self, "cross_norm", self.cross_norm)]
            points += [*(ln2 if self.norm_first else []), *attention(self.cross_attn, cross=True),
                       ("cross_attn_out", self, "cross_attn_out", None), *([] if self.norm_first else ln2),
                       ("resid_mid2", self, "resid_mid2", None)]
        if self.ffn is not None:
            ln = [("ln3" if self.cross_attn is not None else "ln2", self, "ffn_norm", self.ffn_norm)]
            points += [("mlp_in", self, "mlp_in", None), *(ln if self.norm_first else [])]
            points += [(t, self.ffn, t, None) for t in self.ffn.TAPS if t != "pre_linear" or self.ffn.gated]
            points += [("mlp_out", self, "mlp_out", None), *([] if self.norm_first else ln)]
        return points + [("resid_post", self, "resid_post", None)]

    def _head_inputs(self, x: torch.Tensor) -> torch.Tensor | None:
        """None, or while a per-head input is hooked, self-attention's input per head (so a hook can change
        one head's): x (B, T, d) copied per head, tapped, normed (pre-norm) -> (B, T, h + 2 kv, d)."""
        if not self.tapped(*self.HEAD_INPUT_TAPS):
            return None
        h, kv = self.self_attn.n_heads, self.self_attn.n_kv_heads
        shared = self.tap("attn_in", x.unsqueeze(2).repeat(1, 1, h, 1))  # (B, T, h, d)
        q, k, v = shared.clone(), shared[:, :, :kv].clone(), shared[:, :, :kv].clone()  # kv head j: head j's copy
        heads = torch.cat([self.tap("q_input", q), self.tap("k_input", k), self.tap("v_input", v)], dim=2)
        return self.attn_norm.plain(heads) if self.norm_first else heads

    def _dropped(self, y: torch.Tensor) -> torch.Tensor:
        """Dropout on a sub-layer's output while training; in eval mode ``y`` itself, without a module call."""
        return self.dropout(y) if self.training else y

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
from .taps import Tapped


class TransformerBlock(Tapped):
    """Self-attention -> (cross-attention) -> feed-forward, each a residual sub-layer with a norm.

    The residual ``x + f(x)`` lets each sub-layer learn a correction and gives gradients a short path.
    Pre-norm (GPT-2 on, ``norm_first``): ``x = x + f(norm(x))``, easier to train deep; post-norm
    (2017, BERT): ``x = norm(x + f(x))``. ``cross`` adds cross-attention (an encoder-decoder's decoder);
    ``ffn=False`` leaves the feed-forward out (attention-only Transformers, Elhage et al. 2021).
    Hook points: :meth:`hook_points` lists them in order."""

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

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, memory: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, *, inputs: AttentionInputs | None = None,
                cache: KVCache | None = None,
                cross_cache: KVCache | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
        """x (B, T, d) -> (x (B, T, d), weights {"self": (B, h, T, T), "cross": (B, h, T, S)} or None values).

        ``mask`` (B, h, T, T) and ``memory_mask`` (B, h, T, S), True = may attend, or the model's
        :class:`AttentionInputs`; ``memory`` (B, S, d): the encoder output, for cross-attention."""
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

    def frozen(self) -> AbstractContextManager[nn.Module]:
        """``with block.frozen():`` attention patterns and norm scales are constants for autograd, values
        unchanged (attribution graphs; :mod:`glassformer.nn.freezing`)."""
        return frozen(self)

    def hook_points(self, rope: bool) -> list[tuple[str, nn.Module, str, nn.Module | None]]:
        """This block's taps in the order :meth:`forward` reaches them, under TransformerLens's short names:
        (short name, the module that taps, its tap, the norm whose output the tap is or None) each.
        ``rope``: self-attention rotates q and k (then it has "rot_q", "rot_k")."""
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
        """None, or while a per-head input is hooked, self-attention's input per head: x (B, T, d) copied
        per head, tapped, normed (pre-norm) -> (B, T, h + 2 kv, d)."""
        if not self.tapped(*self.HEAD_INPUT_TAPS):
            return None
        h, kv = self.self_attn.n_heads, self.self_attn.n_kv_heads
        shared = self.tap("attn_in", x.unsqueeze(2).repeat(1, 1, h, 1))  # (B, T, h, d)
        q, k, v = shared.clone(), shared[:, :, :kv].clone(), shared[:, :, :kv].clone()  # kv head j: head j's copy
        heads = torch.cat([self.tap("q_input", q), self.tap("k_input", k), self.tap("v_input", v)], dim=2)
        return self.attn_norm.plain(heads) if self.norm_first else heads

    def _dropped(self, y: torch.Tensor) -> torch.Tensor:
        """Dropout on a sub-layer's output while training; in eval mode ``y`` itself."""
        return self.dropout(y) if self.training else y

"""TransformerLM: one stack of blocks for the three single-stack architectures; only the mask differs.

    attn="causal"         decoder-only (GPT): each position sees itself and the past -> next-token prediction
    attn="bidirectional"  encoder-only (BERT): each position sees the whole sequence -> masked-LM
    attn="prefix"         prefix-LM: the first prefix_len positions see each other both ways, the rest is causal"""

from typing import Any, NamedTuple

import torch

from ..config import ModelConfig, config_from_args
from ..errors import GlassformerError
from ..io.checks import check_int
from ..nn.attention import AttentionInputs
from ..nn.kv_cache import KVCache
from ..nn.masks import causal_mask, padding_mask, prefix_mask
from ..nn.taps import NormTaps
from .common import Embeddings, ModelBase, final_norm, init_weights, make_blocks
from .families import output_head
from .inputs import check_pad, check_prefix_len, check_token_ids

# The lesson's positional order: TransformerLM(vocab_size, d_model, n_heads, n_layers, d_ff, max_len, ...)
LESSON_ARGS = ("d_model", "n_heads", "n_layers", "d_ff", "max_len", "attn", "pos", "tie", "norm_first", "activation")


class LMOutput(NamedTuple):
    """What ``TransformerLM(ids, return_attn=True)`` returns: logits (B, T, V) and attn, one (B, h, T, Tk)
    weight tensor per layer (Tk = cached + T)."""

    logits: torch.Tensor
    attn: list[torch.Tensor]


class HiddenStates(NamedTuple):
    """What ``TransformerLM.hidden_states(ids, return_attn=True)`` returns: :class:`LMOutput` with
    ``hidden`` (B, T, d), the last layer's normalised states, in place of the logits."""

    hidden: torch.Tensor
    attn: list[torch.Tensor]


class TransformerLM(ModelBase):
    """A stack of Transformer blocks over token embeddings, with an output layer to the vocabulary.

    Build it from a config, ``TransformerLM(ModelConfig.preset("gpt2-small"))``, or from keyword
    arguments: ``TransformerLM(vocab_size=100, d_model=64, n_heads=4, n_layers=2, d_ff=256)``.
    Parts: ``embeddings``, ``blocks``, ``norm_f`` (its hook points: ``ln_final``), ``head``."""

    def __init__(self, vocab_size: int | ModelConfig, *args: Any, **kwargs: Any):
        super().__init__()
        self.config = config = config_from_args(vocab_size, args, kwargs, LESSON_ARGS, arch="lm")
        self.embeddings = Embeddings(config)
        self.blocks = make_blocks(config, config.n_layers)
        self.norm_f = final_norm(config)
        self.ln_final = NormTaps(statistics=config.norm_first)  # post-norm: norm_f is the identity
        self.head = output_head(config)
        init_weights(self, config, config.n_layers)

    def make_mask(self, T: int, pad: torch.Tensor | None = None, prefix_len: int | torch.Tensor | None = None,
                  device: torch.device | str | None = None) -> torch.Tensor | None:
        """The full boolean self-attention mask this model uses, True = may attend: (T, T), (B, 1, T, T)
        or (B, 1, 1, T), broadcasting; None means "everything visible"."""
        mask, is_causal = self._attention_mask(T, pad, prefix_len, device)
        if is_causal:
            mask = causal_mask(T, device) if mask is None else mask & causal_mask(T, device)
        return mask

    def _attention_mask(self, T: int, pad: torch.Tensor | None, prefix_len: int | torch.Tensor | None,
                        device: torch.device | str | None, start: int = 0,
                        batch: int | None = None) -> tuple[torch.Tensor | None, bool]:
        """(mask, is_causal) for T new positions after ``start`` cached ones, in a batch of ``batch`` rows.
        Causality is a flag, so the fused kernel can skip the mask; a prefix-LM's prefix is processed in
        the first call, later (cached) steps are causal."""
        kind = self.config.attn
        mask, is_causal = None, kind == "causal"
        if kind == "prefix":
            if prefix_len is None:
                raise GlassformerError("attn='prefix' needs prefix_len (an int or a (B,) tensor of prefix lengths)")
            prefix_len = check_prefix_len(prefix_len, start + T, batch)
            if start == 0:
                mask = prefix_mask(T, prefix_len, device)  # (T, T) or (B, 1, T, T)
            else:
                is_causal = True
        elif prefix_len is not None:
            raise GlassformerError(f"prefix_len is only meaningful with attn='prefix' (this model has attn={kind!r})")
        if pad is not None:
            pad_keys = padding_mask(pad)  # (B, 1, 1, Tk)
            mask = pad_keys if mask is None else mask & pad_keys
        return mask, is_causal

    def hidden_states(self, ids: torch.Tensor, pad: torch.Tensor | None = None,
                      prefix_len: int | torch.Tensor | None = None, return_attn: bool = False, *,
                      positions: torch.Tensor | None = None, token_type_ids: torch.Tensor | None = None,
                      cache: list[KVCache] | None = None, check_ids: bool = True,
                      slot: torch.Tensor | None = None) -> torch.Tensor | HiddenStates:
        """The last layer's (normalised) hidden states (B, T, d) of ids (B, T): contextual embeddings.

        Args:
            pad: (B, T) bool, True = padding (with a cache: (B, cached + T), covering every key).
            prefix_len: for attn="prefix": an int or a (B,) tensor.
            return_attn: return a :class:`HiddenStates` with each layer's attention weights too.
            positions: (T,) or (B, T) position of each token; default ``cached .. cached + T - 1``.
            cache: one :class:`KVCache` per layer (see :meth:`new_cache`), filled as a side effect.
            check_ids: check ids are in [0, vocab_size) (on a GPU it waits); False for ids checked before.
            slot: fixed shapes (CUDA graphs): a (1,) tensor, the cache slot of this one-token step; every slot
                of the preallocated ``cache`` is read, those after ``slot`` masked (no host sync, no new shape)."""
        if check_ids:
            check_token_ids(ids, self.config.vocab_size)
        B, T = ids.shape
        if slot is not None:
            x, inputs = self._fixed_shape_inputs(ids, cache, slot, return_attn)
        else:
            start = cache[0].length if cache else 0  # positions already in the cache
            check_pad(pad, B, start + T)
            if positions is None:
                positions = torch.arange(start, start + T, device=ids.device)  # (T,)
                end = start + T
            else:
                end = int(positions.max()) + 1 if positions.numel() else 0
            x = self.embeddings(ids, positions, end, token_type_ids)  # (B, T, d)
            rope, score_bias = self.embeddings.attention_inputs(positions, n_queries=T, n_keys=start + T, end=end)
            mask, is_causal = self._attention_mask(T, pad, prefix_len, ids.device, start=start, batch=B)
            inputs = AttentionInputs(mask=mask, is_causal=is_causal, rope=rope, score_bias=score_bias,
                                     need_weights=return_attn)
        patterns = []  # each layer's attention weights (B, h, T, Tk), or None
        for i, block in enumerate(self.blocks):
            x, weights = block(x, inputs=inputs, cache=cache[i] if cache else None)  # (B, T, d)
            patterns.append(weights["self"])
        x = self.ln_final(self.norm_f, x)
        return HiddenStates(x, patterns) if return_attn else x

    def _fixed_shape_inputs(self, ids: torch.Tensor, cache: list[KVCache], slot: torch.Tensor,
                            return_attn: bool) -> tuple[torch.Tensor, AttentionInputs]:
        """(x (B, 1, d), inputs) of one token per row ids (B, 1) at cache slot ``slot`` (1,), reading every slot."""
        capacity = cache[0].capacity
        x = self.embeddings(ids, slot, capacity)  # (B, 1, d)
        rope, score_bias = self.embeddings.attention_inputs(slot, n_queries=1, n_keys=capacity, end=capacity)
        visible = (torch.arange(capacity, device=ids.device) <= slot).view(1, 1, 1, capacity)  # filled slots
        return x, AttentionInputs(mask=visible, rope=rope, score_bias=score_bias, need_weights=return_attn, slot=slot)

    def forward(self, ids: torch.Tensor, pad: torch.Tensor | None = None, prefix_len: int | torch.Tensor | None = None,
                return_attn: bool = False, **kwargs: Any) -> torch.Tensor | LMOutput:
        """ids (B, T) -> logits (B, T, V); with ``return_attn`` an :class:`LMOutput`. Keyword arguments
        (positions, token_type_ids, cache, check_ids) as :meth:`hidden_states`."""
        if return_attn:
            hidden, attn = self.hidden_states(ids, pad, prefix_len, True, **kwargs)
            return LMOutput(self.logits(hidden), attn)
        return self.logits(self.hidden_states(ids, pad, prefix_len, False, **kwargs))

    # TransformerLens's stacked per-head weights (views of the parameters: gradients flow; interpret.weights
    # folds norms and adds the rest)
    @property
    def W_Q(self) -> torch.Tensor:  # noqa: N802 (TransformerLens's names)
        """Every layer's queries per head, (L, h, d, hd)."""
        return torch.stack([block.self_attn.W_Q for block in self.blocks])

    @property
    def W_K(self) -> torch.Tensor:  # noqa: N802
        """Every layer's keys per key/value head, (L, kv, d, hd)."""
        return torch.stack([block.self_attn.W_K for block in self.blocks])

    @property
    def W_V(self) -> torch.Tensor:  # noqa: N802
        """Every layer's values per key/value head, (L, kv, d, hd)."""
        return torch.stack([block.self_attn.W_V for block in self.blocks])

    @property
    def W_O(self) -> torch.Tensor:  # noqa: N802
        """Every layer's output columns per head, (L, h, hd, d)."""
        return torch.stack([block.self_attn.W_O for block in self.blocks])

    def new_cache(self, batch: int, max_len: int | None = None, *, preallocate: bool = False) -> list[KVCache]:
        """Empty KV caches, one per layer, for ``batch`` rows and up to ``max_len`` positions (default
        ``config.max_len``), growing as positions arrive or allocated at once with ``preallocate``."""
        c, param = self.config, self.emb.weight
        check_int("batch", batch, low=1)
        max_len = check_int("max_len", max_len, low=0, allow_none=True) or c.max_len
        return [KVCache(batch, c.kv_heads, max_len, c.head_dim, dtype=param.dtype, device=param.device,
                        reserve=max_len if preallocate else None) for _ in self.blocks]

"""TransformerLM: one stack of blocks for the three single-stack architectures.

    attn="causal"         decoder-only (GPT): each position sees itself and the past -> next-token prediction
    attn="bidirectional"  encoder-only (BERT): each position sees the whole sequence -> masked-LM
    attn="prefix"         prefix-LM: the first prefix_len positions see each other both ways, the rest is causal

Only the mask differs; the blocks, embeddings and output layer are the same code.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..config import ModelConfig
from ..nn.kv_cache import KVCache
from ..nn.linear import Linear, linear
from ..nn.masks import causal_mask, padding_mask, prefix_mask
from .common import (
    Embedder,
    HeadTransform,
    check_ids,
    check_pad,
    config_from_args,
    final_norm,
    init_weights,
    make_blocks,
)

# The lesson's positional order: TransformerLM(vocab_size, d_model, n_heads, n_layers, d_ff, max_len, ...)
SEED_ARGS = ("d_model", "n_heads", "n_layers", "d_ff", "max_len", "attn", "pos", "tie", "norm_first", "activation")


class TransformerLM(nn.Module):
    """A stack of Transformer blocks over token embeddings, with an output layer to the vocabulary.

    Build it from a config or, as in the lessons, from keyword arguments::

        TransformerLM(ModelConfig.preset("gpt2-small"))
        TransformerLM(vocab_size=100, d_model=64, n_heads=4, n_layers=2, d_ff=256, attn="causal")

    Every :class:`ModelConfig` field is accepted as a keyword; ``model.config`` gives it back.
    Attention runs the fused kernel unless ``return_attn=True`` asks for the weights.
    """

    def __init__(self, vocab_size: int | ModelConfig, *args: Any, **kwargs: Any):
        super().__init__()
        self.config = config = config_from_args(vocab_size, args, kwargs, SEED_ARGS, arch="lm")
        self.attn_type, self.pos_type, self.d = config.attn, config.pos, config.d_model
        self.embeddings = Embedder(config)
        self.blocks = make_blocks(config, config.n_layers)
        self.norm_f = final_norm(config)
        self.head = None if config.tie else Linear(config.d_model, config.vocab_size, bias=config.head_bias)
        self.logits_bias = nn.Parameter(torch.zeros(config.vocab_size)) if config.tie and config.head_bias else None
        self.head_transform = HeadTransform(config) if config.head_transform else None
        init_weights(self, config, config.n_layers)

    @property
    def emb(self) -> nn.Embedding:
        """The token embedding matrix (V, d), shared with the output layer when ``tie``."""
        return self.embeddings.tok

    # ------------------------------------------------------------------ inputs
    def embed(self, ids: torch.Tensor, positions: torch.Tensor | None = None,
              token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings (x √d when configured) + absolute positions. ids (B, T) -> (B, T, d)."""
        check_ids(ids, self.config.vocab_size)
        T = ids.shape[1]
        if positions is None:
            positions = torch.arange(T, device=ids.device)
        return self.embeddings(ids, positions, T, token_type_ids)

    def make_mask(self, T: int, pad: torch.Tensor | None = None, prefix_len: int | torch.Tensor | None = None,
                  device: torch.device | str | None = None) -> torch.Tensor | None:
        """The full boolean self-attention mask this model uses; None means "everything visible".

        Returns (T, T), (B, 1, T, T) or (B, 1, 1, T)-broadcast shapes; True = may attend.
        """
        mask, is_causal = self._attention_mask(T, pad, prefix_len, device)
        if is_causal:
            mask = causal_mask(T, device) if mask is None else mask & causal_mask(T, device)
        return mask

    def _attention_mask(self, T: int, pad: torch.Tensor | None, prefix_len: int | torch.Tensor | None,
                        device: torch.device | str | None, start: int = 0) -> tuple[torch.Tensor | None, bool]:
        """(mask, is_causal) for T new positions after ``start`` cached ones.

        Causality is passed as a flag rather than a tensor so the fused kernel can skip the mask.
        A prefix-LM's prefix is processed in the first call; later (cached) steps are causal.
        """
        mask, is_causal = None, self.attn_type == "causal"
        if self.attn_type == "prefix":
            if prefix_len is None:
                raise ValueError("attn='prefix' needs prefix_len (an int or a (B,) tensor of prefix lengths)")
            low, high = ((prefix_len, prefix_len) if isinstance(prefix_len, int)
                         else (int(prefix_len.min()), int(prefix_len.max())) if isinstance(prefix_len, torch.Tensor)
                         else (None, None))
            if low is None or isinstance(prefix_len, bool):
                raise TypeError(f"prefix_len must be an int or a (B,) integer tensor, got {type(prefix_len).__name__}")
            if low < 0 or high > start + T:
                raise ValueError(f"prefix_len={prefix_len if isinstance(prefix_len, int) else prefix_len.tolist()} "
                                 f"is out of range: expected 0 <= prefix_len <= sequence length {start + T}")
            if start == 0:
                mask = prefix_mask(T, prefix_len, device)
            else:
                is_causal = True
        elif prefix_len is not None:
            raise ValueError(
                f"prefix_len is only meaningful with attn='prefix' (this model has attn={self.attn_type!r})")
        if pad is not None:
            pad_keys = padding_mask(pad)  # (B, 1, 1, Tk)
            mask = pad_keys if mask is None else mask & pad_keys
        return mask, is_causal

    # ------------------------------------------------------------------ forward
    def hidden_states(
        self,
        ids: torch.Tensor,
        pad: torch.Tensor | None = None,
        prefix_len: int | torch.Tensor | None = None,
        return_attn: bool = False,
        *,
        positions: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        cache: list[KVCache] | None = None,
    ):
        """The last layer's (normalised) hidden states: contextual embeddings of each position.

        Args:
            ids: (B, T) token ids.
            pad: (B, T) bool, True = padding (with a cache: (B, cached + T), covering every key).
            prefix_len: for attn="prefix": an int or a (B,) tensor.
            return_attn: also return each layer's attention weights.
            positions: (T,) or (B, T) position of each token; default ``cached .. cached + T - 1``.
            token_type_ids: (B, T) segment ids (models with ``n_token_types``).
            cache: one :class:`KVCache` per layer (see :meth:`new_cache`), filled as a side effect.
        Returns:
            (B, T, d), or ((B, T, d), [(B, h, T, Tk) per layer]) with ``return_attn``.
        """
        check_ids(ids, self.config.vocab_size)
        B, T = ids.shape
        start = cache[0].length if cache else 0
        check_pad(pad, B, start + T)
        if positions is None:
            positions = torch.arange(start, start + T, device=ids.device)
            end = start + T
        else:
            end = int(positions.max()) + 1 if positions.numel() else 0
        x = self.embeddings(ids, positions, end, token_type_ids)  # (B, T, d)
        rope, bias = self.embeddings.attention_inputs(positions, T, start + T, end)
        mask, is_causal = self._attention_mask(T, pad, prefix_len, ids.device, start)
        attn = []
        for i, block in enumerate(self.blocks):
            x, weights = block(x, mask=mask, is_causal=is_causal, rope=rope, bias=bias, need_weights=return_attn,
                               cache=cache[i] if cache else None)
            attn.append(weights["self"])
        x = self.norm_f(x)
        return (x, attn) if return_attn else x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Project hidden states (B, T, d) to vocabulary scores (B, T, V)."""
        if self.head_transform is not None:
            hidden = self.head_transform(hidden)
        if self.head is None:
            return linear(hidden, self.emb.weight, self.logits_bias)
        return self.head(hidden)

    def forward(self, ids: torch.Tensor, pad: torch.Tensor | None = None,
                prefix_len: int | torch.Tensor | None = None, return_attn: bool = False, **kwargs: Any):
        """ids (B, T) -> logits (B, T, V); with ``return_attn`` also [(B, h, T, T)] per layer.

        Keyword arguments (positions, token_type_ids, cache) are those of :meth:`hidden_states`.
        """
        out = self.hidden_states(ids, pad, prefix_len, return_attn, **kwargs)
        x, attn = out if return_attn else (out, None)
        logits = self.logits(x)
        return (logits, attn) if return_attn else logits

    def new_cache(self, batch: int, max_len: int | None = None) -> list[KVCache]:
        """Empty KV caches, one per layer, for ``batch`` rows and up to ``max_len`` positions."""
        c = self.config
        param = self.emb.weight
        return [KVCache(batch, c.kv_heads, max_len or c.max_len, c.head_dim, dtype=param.dtype, device=param.device)
                for _ in self.blocks]

    # ------------------------------------------------------------------ generation (glassformer.generation)
    def generate(self, ids: Any, max_new_tokens: int = 20, **options: Any) -> torch.Tensor:
        """Continue prompts; returns (B * num_return_sequences, T + n) ids, prompt included.

        Greedy by default; sampling, beam search and every option of
        :func:`glassformer.generation.generate` apply (see docs/generation.md).
        """
        from ..generation import generate

        return generate(self, ids, max_new_tokens, **options)

    def fill_mask(self, ids: Any, mask_token_id: int | None = None, top_k: int = 5,
                  **options: Any) -> list[dict]:
        """Encoder-only models: the top-k candidates for each mask position
        (:func:`glassformer.generation.fill_mask`)."""
        from ..generation import fill_mask

        return fill_mask(self, ids, mask_token_id, top_k, **options)

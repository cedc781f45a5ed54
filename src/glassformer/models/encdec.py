"""EncoderDecoder: the original Transformer (Vaswani et al. 2017) and T5's structure.

The encoder is a stack of bidirectional blocks that turns the source into ``memory`` (B, S, d). Each
decoder block adds cross-attention between its causal self-attention and its feed-forward: queries
from the target, keys and values from ``memory``, so every generated token can look back at every
source position (the descendant of Bahdanau attention, without the RNN's one-vector bottleneck).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..config import ModelConfig
from ..nn.kv_cache import KVCache
from ..nn.linear import Linear, linear
from ..nn.masks import padding_mask
from .common import Embedder, check_ids, check_pad, config_from_args, final_norm, init_weights, make_blocks

# The lesson's positional order: EncoderDecoder(vocab_size, d_model, n_heads, n_enc, n_dec, d_ff, activation)
SEED_ARGS = ("d_model", "n_heads", "n_enc", "n_dec", "d_ff", "activation")


class EncoderDecoder(nn.Module):
    """An encoder-decoder Transformer with one vocabulary and one embedding shared by both sides.

    Build it from a config (``arch="encoder-decoder"``) or, as in the lessons, from keyword
    arguments: ``EncoderDecoder(vocab_size=100, d_model=64, n_heads=4, n_enc=2, n_dec=2, d_ff=256)``.
    """

    def __init__(self, vocab_size: int | ModelConfig, *args: Any, **kwargs: Any):
        super().__init__()
        self.config = config = config_from_args(vocab_size, args, kwargs, SEED_ARGS, arch="encoder-decoder")
        self.d = config.d_model
        self.embeddings = Embedder(config)
        self.enc = make_blocks(config, config.n_enc)
        self.dec = make_blocks(config, config.n_dec, cross=True)
        self.enc_norm = final_norm(config)
        self.dec_norm = final_norm(config)
        self.head = None if config.tie else Linear(config.d_model, config.vocab_size, bias=config.head_bias)
        self.logits_bias = nn.Parameter(torch.zeros(config.vocab_size)) if config.tie and config.head_bias else None
        init_weights(self, config, config.n_enc + config.n_dec)

    @property
    def emb(self) -> nn.Embedding:
        """The shared token embedding matrix (V, d)."""
        return self.embeddings.tok

    def _embed(self, ids: torch.Tensor, start: int = 0, decoder: bool = False):
        """ids (B, T) -> (vectors (B, T, d), rope, bias) for positions start .. start + T - 1."""
        T = ids.shape[1]
        positions = torch.arange(start, start + T, device=ids.device)
        x = self.embeddings(ids, positions, start + T, decoder=decoder)
        rope, bias = self.embeddings.attention_inputs(positions, T, start + T, start + T)
        return x, rope, bias

    def encode(self, src: torch.Tensor, src_pad: torch.Tensor | None = None,
               attn_log: dict[str, list] | None = None) -> torch.Tensor:
        """Encode the source bidirectionally.

        Args:
            src: (B, S) token ids; src_pad: (B, S) bool, True = padding.
            attn_log: when given, each layer's weights are appended to ``attn_log["enc"]``.
        Returns:
            memory (B, S, d).
        """
        check_ids(src, self.config.vocab_size, "src")
        check_pad(src_pad, *src.shape, name="src_pad")
        x, rope, bias = self._embed(src)
        mask = padding_mask(src_pad) if src_pad is not None else None
        for block in self.enc:
            x, weights = block(x, mask=mask, rope=rope, bias=bias, need_weights=attn_log is not None)
            if attn_log is not None:
                attn_log["enc"].append(weights["self"])
        return self.enc_norm(x)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor | None, src_pad: torch.Tensor | None = None,
               tgt_pad: torch.Tensor | None = None, attn_log: dict[str, list] | None = None, *,
               cache: list[tuple[KVCache, KVCache]] | None = None) -> torch.Tensor:
        """Decode target tokens (teacher forcing) against the encoder's memory.

        Args:
            tgt_in: (B, T) target ids, shifted right (they start with the start token).
            memory: (B, S, d) from :meth:`encode` (may be None once ``cache``'s cross part is filled).
            src_pad: (B, S) bool, True = padded source position; tgt_pad: (B, T) (with a cache:
                (B, cached + T)).
            attn_log: when given, receives "self" and "cross" weights per layer.
            cache: per decoder layer a (self, cross) pair of :class:`KVCache` (see :meth:`new_cache`).
        Returns:
            logits (B, T, V).
        """
        check_ids(tgt_in, self.config.vocab_size, "tgt_in")
        B, T = tgt_in.shape
        start = cache[0][0].length if cache else 0
        check_pad(tgt_pad, B, start + T, name="tgt_pad")
        if memory is not None and (memory.dim() != 3 or memory.shape[0] != B or memory.shape[2] != self.d):
            raise ValueError(f"memory must have shape (B={B}, S, d={self.d}), got {tuple(memory.shape)}")
        if src_pad is not None and memory is not None:
            check_pad(src_pad, B, memory.shape[1], name="src_pad")
        x, rope, bias = self._embed(tgt_in, start, decoder=True)
        mask = padding_mask(tgt_pad) if tgt_pad is not None else None
        memory_mask = padding_mask(src_pad) if src_pad is not None else None
        for i, block in enumerate(self.dec):
            self_cache, cross_cache = cache[i] if cache else (None, None)
            x, weights = block(x, mask=mask, memory=memory, memory_mask=memory_mask, is_causal=True, rope=rope,
                               bias=bias, need_weights=attn_log is not None, cache=self_cache, cross_cache=cross_cache)
            if attn_log is not None:
                attn_log["self"].append(weights["self"])
                attn_log["cross"].append(weights["cross"])
        return self.logits(self.dec_norm(x))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Project decoder states (B, T, d) to vocabulary scores (B, T, V)."""
        if self.head is None:
            return linear(hidden, self.emb.weight, self.logits_bias)
        return self.head(hidden)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, src_pad: torch.Tensor | None = None,
                tgt_pad: torch.Tensor | None = None, return_attn: bool = False):
        """src (B, S), tgt_in (B, T) -> logits (B, T, V).

        With ``return_attn`` also {"enc": [(B, h, S, S)], "self": [(B, h, T, T)], "cross": [(B, h, T, S)]}.
        """
        log: dict[str, list] | None = {"enc": [], "self": [], "cross": []} if return_attn else None
        memory = self.encode(src, src_pad, log)
        logits = self.decode(tgt_in, memory, src_pad, tgt_pad, log)
        return (logits, log) if return_attn else logits

    def new_cache(self, batch: int, max_len: int | None = None, src_len: int | None = None):
        """Empty (self, cross) KV caches per decoder layer for ``batch`` rows."""
        c = self.config
        param = self.emb.weight
        kw = dict(dtype=param.dtype, device=param.device)
        return [(KVCache(batch, c.kv_heads, max_len or c.max_len, c.head_dim, **kw),
                 KVCache(batch, c.kv_heads, src_len or c.max_len, c.head_dim, static=True, **kw))
                for _ in self.dec]

    def generate(self, src: Any, max_new_tokens: int = 20, *, decoder_start_token_id: int, **options: Any):
        """Translate sources: (B * num_return_sequences, 1 + n) decoder ids, starting with
        ``decoder_start_token_id``. Greedy by default; options as :func:`glassformer.generation.generate`.
        """
        from ..generation import generate

        return generate(self, src, max_new_tokens, decoder_start_token_id=decoder_start_token_id, **options)

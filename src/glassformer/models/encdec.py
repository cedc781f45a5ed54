"""EncoderDecoder: the original Transformer (Vaswani et al. 2017) and T5's structure.

Bidirectional encoder blocks turn the source into ``memory`` (B, S, d); each decoder block adds
cross-attention (queries from the target, keys and values from ``memory``) between its causal
self-attention and its feed-forward, so every generated token can look back at every source position."""

from typing import Any, NamedTuple

import torch

from ..config import ModelConfig, config_from_args
from ..io.checks import check_int
from ..nn.attention import AttentionInputs
from ..nn.kv_cache import KVCache, LayerCache
from ..nn.masks import padding_mask
from ..nn.taps import NormTaps
from .common import Embeddings, ModelBase, final_norm, init_weights, make_blocks
from .families import BartDecoderEmbedding, output_head
from .inputs import check_memory, check_pad, check_token_ids

# The lesson's positional order: EncoderDecoder(vocab_size, d_model, n_heads, n_enc, n_dec, d_ff, activation)
LESSON_ARGS = ("d_model", "n_heads", "n_enc", "n_dec", "d_ff", "activation")


class EncoderDecoderOutput(NamedTuple):
    """What ``EncoderDecoder(src, tgt_in, return_attn=True)`` returns: logits (B, T, V) and attn
    {"enc": [(B, h, S, S)], "self": [(B, h, T, T)], "cross": [(B, h, T, S)]}, one tensor per layer."""

    logits: torch.Tensor
    attn: dict[str, list[torch.Tensor]]


class EncoderDecoder(ModelBase):
    """An encoder-decoder Transformer with one vocabulary and one embedding shared by both sides, built from
    a config or keywords: ``EncoderDecoder(vocab_size=100, d_model=64, n_heads=4, n_enc=2, n_dec=2, d_ff=256)``.
    Parts: ``embeddings``, ``dec_embedding`` (BART's, or None), ``enc``, ``dec``, ``enc_norm`` and ``dec_norm``
    (their hook points: ``encoder_ln_final``, ``decoder_ln_final``), ``head``."""

    def __init__(self, vocab_size: int | ModelConfig, *args: Any, **kwargs: Any):
        super().__init__()
        self.config = config = config_from_args(vocab_size, args, kwargs, LESSON_ARGS, arch="encoder-decoder")
        self.embeddings = Embeddings(config)
        self.dec_embedding = BartDecoderEmbedding(config) if config.split_positions else None
        self.enc = make_blocks(config, config.n_enc)
        self.encoder_ln_final = NormTaps(statistics=config.norm_first)  # enc_norm's hook points, in forward order
        self.dec = make_blocks(config, config.n_dec, cross=True)
        self.enc_norm = final_norm(config)  # post-norm: the final norms are identities
        self.dec_norm = final_norm(config)
        self.decoder_ln_final = NormTaps(statistics=config.norm_first)
        self.head = output_head(config)
        init_weights(self, config, config.n_enc + config.n_dec)

    def _embed(self, ids: torch.Tensor, start: int = 0, decoder: bool = False,
               ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None, torch.Tensor | None]:
        """ids (B, T) -> (vectors (B, T, d), rope, score_bias) for positions start .. start + T - 1."""
        T = ids.shape[1]
        positions = torch.arange(start, start + T, device=ids.device)  # (T,)
        if decoder and self.dec_embedding is not None:  # BART: the decoder's own positions and norm
            x = self.dec_embedding(ids, positions, start + T, self.embeddings)  # (B, T, d)
        else:
            x = self.embeddings(ids, positions, start + T)  # (B, T, d)
        rope, score_bias = self.embeddings.attention_inputs(positions, n_queries=T, n_keys=start + T, end=start + T)
        return x, rope, score_bias

    def encode(self, src: torch.Tensor, src_pad: torch.Tensor | None = None,
               attn_log: dict[str, list] | None = None, *, check_ids: bool = True) -> torch.Tensor:
        """Encode the source src (B, S) bidirectionally -> memory (B, S, d).

        ``src_pad`` (B, S) bool, True = padding; ``attn_log["enc"]`` receives each layer's weights;
        ``check_ids`` as in :meth:`TransformerLM.hidden_states`."""
        if check_ids:
            check_token_ids(src, self.config.vocab_size, "src")
        check_pad(src_pad, *src.shape, name="src_pad")
        x, rope, score_bias = self._embed(src)  # (B, S, d)
        inputs = AttentionInputs(mask=padding_mask(src_pad) if src_pad is not None else None,  # (B, 1, 1, S)
                                 rope=rope, score_bias=score_bias, need_weights=attn_log is not None)
        for block in self.enc:
            x, weights = block(x, inputs=inputs)
            if attn_log is not None:
                attn_log["enc"].append(weights["self"])
        return self.encoder_ln_final(self.enc_norm, x)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor | None, src_pad: torch.Tensor | None = None,
               tgt_pad: torch.Tensor | None = None, attn_log: dict[str, list] | None = None, *,
               cache: list[LayerCache] | None = None, check_ids: bool = True) -> torch.Tensor:
        """Decode target ids tgt_in (B, T), shifted right, against ``memory`` (B, S, d) -> logits (B, T, V).

        ``memory`` may be None once ``cache``'s (a :class:`LayerCache` per layer) cross part is filled;
        ``tgt_pad`` (B, cached + T); ``attn_log`` receives "self" and "cross" weights per layer."""
        if check_ids:
            check_token_ids(tgt_in, self.config.vocab_size, "tgt_in")
        B, T = tgt_in.shape
        start = cache[0].length if cache else 0  # target positions already in the cache
        check_pad(tgt_pad, B, start + T, name="tgt_pad")
        check_memory(memory, src_pad, B, self.config.d_model)
        x, rope, score_bias = self._embed(tgt_in, start, decoder=True)  # (B, T, d)
        inputs = AttentionInputs(
            mask=padding_mask(tgt_pad) if tgt_pad is not None else None,  # (B, 1, 1, cached + T); causal: flag
            memory_mask=padding_mask(src_pad) if src_pad is not None else None,  # (B, 1, 1, S)
            is_causal=True, rope=rope, score_bias=score_bias, need_weights=attn_log is not None)
        for i, block in enumerate(self.dec):
            layer = cache[i] if cache else None
            x, weights = block(x, memory=memory, inputs=inputs, cache=layer and layer.self_attn,
                               cross_cache=layer and layer.cross_attn)  # (B, T, d)
            if attn_log is not None:
                attn_log["self"].append(weights["self"])
                attn_log["cross"].append(weights["cross"])
        return self.logits(self.decoder_ln_final(self.dec_norm, x))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, src_pad: torch.Tensor | None = None,
                tgt_pad: torch.Tensor | None = None, return_attn: bool = False, *,
                check_ids: bool = True) -> torch.Tensor | EncoderDecoderOutput:
        """src (B, S), tgt_in (B, T) -> logits (B, T, V); with ``return_attn`` an :class:`EncoderDecoderOutput`.
        ``check_ids=False`` skips the id range checks (ids the caller made itself)."""
        log: dict[str, list] | None = {"enc": [], "self": [], "cross": []} if return_attn else None
        memory = self.encode(src, src_pad, log, check_ids=check_ids)  # (B, S, d)
        logits = self.decode(tgt_in, memory, src_pad, tgt_pad, log, check_ids=check_ids)  # (B, T, V)
        return EncoderDecoderOutput(logits, log) if return_attn else logits

    def new_cache(self, batch: int, max_len: int | None = None, src_len: int | None = None, *,
                  preallocate: bool = False) -> list[LayerCache]:
        """A :class:`LayerCache` per decoder layer for ``batch`` rows: ``max_len`` target and ``src_len``
        source positions (default ``config.max_len``), all allocated at once with ``preallocate``."""
        c, param = self.config, self.emb.weight
        check_int("batch", batch, low=1)
        max_len = check_int("max_len", max_len, low=0, allow_none=True) or c.max_len
        src_len = check_int("src_len", src_len, low=0, allow_none=True) or c.max_len
        kw = dict(dtype=param.dtype, device=param.device)
        reserve = max_len if preallocate else None
        return [LayerCache(KVCache(batch, c.kv_heads, max_len, c.head_dim, reserve=reserve, **kw),
                           KVCache(batch, c.kv_heads, src_len, c.head_dim, static=True, **kw))
                for _ in self.dec]

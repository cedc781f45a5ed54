"""What TransformerLM and EncoderDecoder share: embeddings, blocks, the final norm and initialisation."""

import math
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from ..config import ModelConfig
from ..nn.block import TransformerBlock
from ..nn.freezing import frozen
from ..nn.norms import make_norm
from ..nn.positions import LearnedPositions, alibi_bias, alibi_slopes, rope_angles, sinusoidal_positions
from ..nn.taps import NormTaps, Tap, Tapped
from .families import learned_positions
from .head import OutputHead


def make_blocks(config: ModelConfig, n: int, cross: bool = False) -> nn.ModuleList:
    """``n`` TransformerBlocks configured by ``config`` (with cross-attention when ``cross``)."""
    return nn.ModuleList([
        TransformerBlock(config.d_model, config.n_heads, config.d_ff, cross=cross, norm_first=config.norm_first,
                         activation=config.activation, bias=config.bias, n_kv_heads=config.n_kv_heads,
                         dropout=config.dropout, norm=config.norm, norm_eps=config.norm_eps,
                         ffn=not config.attn_only, rope=config.pos == "rope", qk_norm=config.qk_norm)
        for _ in range(n)])


def final_norm(config: ModelConfig) -> nn.Module:
    """Pre-norm blocks leave their output un-normalised, so a final norm follows (GPT-2's ln_f);
    after post-norm blocks this is the identity."""
    return make_norm(config.norm, config.d_model, config.norm_eps, config.bias) if config.norm_first else nn.Identity()


class ModelBase(Tapped):
    """What TransformerLM and EncoderDecoder share besides their parts: the token table ``emb``, the output
    layer ``logits``, ``frozen`` mode, and TransformerLens's two verbs as methods,
    ``model.run_with_hooks(ids, fwd_hooks=[...])`` and ``model.run_with_cache(ids)``, which call
    :func:`glassformer.interpret.run_with_hooks` / ``run_with_cache`` (their arguments and returns; imported when
    called: the model's own code needs no interpretability tool)."""

    @property
    def emb(self) -> nn.Embedding:
        """The token embedding (V, d), shared with the output layer when ``tie`` (and by both stacks of an
        EncoderDecoder)."""
        return self.embeddings.tok

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Project the last layer's hidden states (B, T, d) to vocabulary scores (B, T, V) (see :class:`OutputHead`)."""
        return self.head(hidden, self.emb.weight)

    def frozen(self) -> AbstractContextManager[nn.Module]:
        """``with model.frozen():`` attention patterns and norm scales are constants for autograd, values
        unchanged (attribution graphs; :mod:`glassformer.nn.freezing`)."""
        return frozen(self)

    def run_with_hooks(self, *inputs: Any, **kwargs: Any) -> Any:
        """:func:`glassformer.interpret.run_with_hooks` on this model."""
        from ..interpret.hooks import run_with_hooks  # deferred: models/ is below interpret/ (test_import_layers)

        return run_with_hooks(self, *inputs, **kwargs)

    def run_with_cache(self, *inputs: Any, **kwargs: Any) -> tuple[Any, Any]:
        """:func:`glassformer.interpret.run_with_cache` on this model: (output, ActivationCache)."""
        from ..interpret.hooks import run_with_cache  # deferred, as above

        return run_with_cache(self, *inputs, **kwargs)


class Embeddings(Tapped):
    """Token ids -> vectors (:meth:`forward`), and the position inputs attention needs (:meth:`attention_inputs`).

    Parts: ``tok`` (V, d) token table; ``pos`` learned positions; ``types`` segment table; ``norm``
    embedding norm. Hook points ((B, T, d) each): ``hook_embed`` (scaled token vectors), ``hook_pos_embed``
    (sinusoidal or learned positions), ``hook_token_type_embed``, ``embed_ln`` (the norm's)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.scheme, self.max_len = c.pos, c.max_len  # position scheme: see ModelConfig.pos
        self.scale = math.sqrt(c.d_model) if c.scale_embeddings else 1.0
        self.tok = nn.Embedding(c.vocab_size, c.d_model)
        self.hook_embed = Tap()
        self.pos = learned_positions(c) if c.pos == "learned" else None
        if c.pos in ("sinusoidal", "learned"):
            self.hook_pos_embed = Tap()
        self.types = nn.Embedding(c.n_token_types, c.d_model) if c.n_token_types else None
        if c.n_token_types:
            self.hook_token_type_embed = Tap()
        self.norm = make_norm(c.norm, c.d_model, c.norm_eps, c.bias) if c.embed_norm else None
        if c.embed_norm:
            self.embed_ln = NormTaps()
        self.dropout = nn.Dropout(c.dropout)
        self.head_dim, self.rope_theta = c.head_dim, c.rope_theta
        if c.pos == "sinusoidal":  # (max_len, d), computed once
            self.register_buffer("sinusoid", sinusoidal_positions(c.max_len, c.d_model), persistent=False)
        if c.pos == "rope":  # (max_len, hd) each, computed once
            cos, sin = rope_angles(torch.arange(c.max_len), c.head_dim, c.rope_theta)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        if c.pos == "alibi":  # (h,)
            self.register_buffer("alibi", alibi_slopes(c.n_heads), persistent=False)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, end: int, token_type_ids: torch.Tensor | None = None,
                *, pos: nn.Module | None = None, norm: nn.Module | None = None) -> torch.Tensor:
        """The input vectors (B, T, d) of a block stack for ids (B, T) at ``positions`` (T,) or (B, T).

        ``end``: the largest position + 1. ``token_type_ids`` (B, T) default to 0. ``pos`` and ``norm``
        replace ``self.pos`` and ``self.norm`` (BART's decoder passes its own)."""
        pos = self.pos if pos is None else pos
        norm = self.norm if norm is None else norm
        x = self.tok(ids)  # (B, T, d)
        x = self.hook_embed(x * self.scale if self.scale != 1.0 else x)  # "embed": the token vectors (x √d)
        if self.scheme == "sinusoidal":
            sinusoid = self.sinusoid if end <= self.max_len else sinusoidal_positions(end, x.shape[-1]).to(x.device)
            x = x + self._tap_positions(sinusoid[positions].to(x.dtype), x)  # + (T, d) or (B, T, d)
        elif self.scheme == "learned":
            pos.check_length(end)
            x = x + self._tap_positions(pos(positions), x)  # + (T, d) or (B, T, d)
        if self.types is not None:
            types = self.types(torch.zeros_like(ids) if token_type_ids is None else token_type_ids)  # (B, T, d)
            x = x + self.hook_token_type_embed(types)
        if norm is not None:
            x = self.embed_ln(norm, x)
        return self.dropout(x) if self.training else x

    def _tap_positions(self, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The "pos_embed" hook point: hooks see (B, T, d), as in TransformerLens (untapped, the (T, d)
        rows are added by broadcasting)."""
        return self.hook_pos_embed(pos.expand_as(x).contiguous()) if self.hook_pos_embed.hooked else pos

    def attention_inputs(self, positions: torch.Tensor, *, n_queries: int, n_keys: int,
                         end: int) -> tuple[tuple[torch.Tensor, torch.Tensor] | None, torch.Tensor | None]:
        """(rope, score_bias) for the last ``n_queries`` of ``n_keys`` slots; either may be None.

        RoPE rotates by each token's ``positions``: (cos, sin), each (T, hd) or (B, T, hd). ALiBi needs
        only the distance between slots, so left padding does not move it: score_bias (h, Tq, Tk)."""
        if self.scheme == "rope":
            if end <= self.max_len:
                return (self.rope_cos[positions], self.rope_sin[positions]), None
            return rope_angles(positions, self.head_dim, self.rope_theta), None
        if self.scheme == "alibi":
            keys = torch.arange(n_keys, device=positions.device)
            return None, alibi_bias(self.alibi, keys[n_keys - n_queries:], keys)  # (h, Tq, Tk)
        return None, None


def init_weights(model: nn.Module, config: ModelConfig, n_residual_layers: int) -> None:
    """Initialise ``model``'s parameters in place.

    ``init_std=None`` (the lessons): token embeddings N(0, 1/d) when scaled by √d or tied to the
    output layer (so vectors, or the first logits, come out near unit size), else N(0, 1); learned
    positions N(0, 0.02²·d) when scaled else N(0, 1); linear layers keep torch's default.
    ``init_std=s`` (GPT-2): every linear weight and embedding N(0, s²), biases 0, and the projections
    writing into the residual stream N(0, s²/(2L)), L = ``n_residual_layers``."""
    d = config.d_model
    if config.init_std is None:
        for module in model.modules():
            if isinstance(module, Embeddings):
                small = config.scale_embeddings or config.tie  # tied: N(0, 1) would start with logits √d too large
                nn.init.normal_(module.tok.weight, std=d ** -0.5 if small else 1.0)
            elif isinstance(module, LearnedPositions):
                nn.init.normal_(module.weight, std=0.02 * d ** 0.5 if config.scale_embeddings else 1.0)
        return
    std = config.init_std
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            residual = name.endswith("o_proj") or name.endswith("ffn.down")
            nn.init.normal_(module.weight, std=std / math.sqrt(2 * n_residual_layers) if residual else std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (nn.Embedding, LearnedPositions)):
            nn.init.normal_(module.weight, std=std)
        elif isinstance(module, OutputHead) and module.weight is not None:  # an untied output layer
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def count_params(model: nn.Module) -> int:
    """Number of trainable parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

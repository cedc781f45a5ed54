"""Parts only one family uses, named after it: BERT's MLM head, BART's position tables. The shared parts
know nothing of them; :func:`output_head` and :func:`learned_positions` pick them from the config."""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..nn.feedforward import activate
from ..nn.norms import make_norm
from ..nn.positions import LearnedPositions
from .head import OutputHead


class BertHeadTransform(nn.Module):
    """BERT's MLM head transform: norm(act(dense(h))), (..., d) -> (..., d)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.activation = config.activation
        self.norm = make_norm(config.norm, config.d_model, config.norm_eps, config.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., d) -> (..., d)."""
        return self.norm(activate(self.activation, self.dense(hidden)))


class BertOutputHead(OutputHead):
    """BERT's MLM output layer: :class:`BertHeadTransform` (``transform``), then the shared head."""

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.transform = BertHeadTransform(config)

    def forward(self, hidden: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        """hidden (..., d), embedding (V, d) -> logits (..., V)."""
        return super().forward(self.transform(hidden), embedding)


class BartPositions(LearnedPositions):
    """BART's learned positions: position p reads row p + ``offset`` of a (max_len + offset, d) table
    (fairseq keeps two reserved rows at the top)."""

    def __init__(self, max_len: int, d_model: int, offset: int):
        super().__init__(max_len + offset, d_model)
        self.max_len, self.offset = max_len, offset

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """positions: (T,) or (B, T) -> (T, d) or (B, T, d)."""
        return self.weight[positions + self.offset]


class BartDecoderEmbedding(nn.Module):
    """BART's decoder embeds with the shared token table but its own position table ``pos`` and ``norm``."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.pos = learned_positions(config)
        self.norm = make_norm(config.norm, config.d_model, config.norm_eps, config.bias) if config.embed_norm else None

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, end: int, shared: nn.Module) -> torch.Tensor:
        """ids (B, T), positions (T,) -> (B, T, d) through ``shared`` (the model's ``Embeddings``, models/common.py,
        which imports this module: not imported back) with this position table and norm."""
        return shared(ids, positions, end, pos=self.pos, norm=self.norm)


def learned_positions(config: ModelConfig) -> LearnedPositions:
    """The learned position table: BART's (with reserved rows) when ``config.pos_offset``, else the plain one."""
    if config.pos_offset:
        return BartPositions(config.max_len, config.d_model, config.pos_offset)
    return LearnedPositions(config.max_len, config.d_model)


def output_head(config: ModelConfig) -> OutputHead:
    """The output layer: BERT's (with its transform) when ``config.head_transform``, else the shared one."""
    return BertOutputHead(config) if config.head_transform else OutputHead(config)

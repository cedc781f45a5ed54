"""The four training objectives: causal LM, masked LM, prefix LM and sequence-to-sequence.

Each is cross-entropy on the positions whose label is not -100; they differ only in what the model
sees (the batch keys) and how it is called. Losses are returned as sums with their token count, so
gradient accumulation and several processes can normalise by the count of the whole global batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..data.mlm import IGNORE
from ..errors import GlassformerError, check_number

OBJECTIVE_ATTN = {"clm": "causal", "mlm": "bidirectional", "prefix": "prefix"}  # seq2seq: an EncoderDecoder


@dataclass
class LossParts:
    """Summed loss over counted positions, their number, and how many the argmax got right (tensors;
    ``correct`` is None when not asked for)."""

    loss_sum: torch.Tensor
    count: torch.Tensor
    correct: torch.Tensor | None


def token_loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0,
               count_correct: bool = True) -> LossParts:
    """Cross-entropy over the positions with a label (labels == -100 take no part).

    With label smoothing ε (Szegedy et al. 2016; the 2017 Transformer used 0.1) each position's loss
    is (1 - ε)·(-log p[label]) + ε·mean over the vocabulary of (-log p), as in ``F.cross_entropy``.

    Args:
        logits: (..., V) scores; labels: (...) ids or -100.
        count_correct: also count argmax hits (an argmax over the vocabulary: training skips it).
    Returns:
        LossParts with the summed loss (float32 scalar), the count and the number correct.
    """
    if check_number("label_smoothing", label_smoothing, 0.0) >= 1.0:
        raise GlassformerError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
    flat_logits = logits.reshape(-1, logits.shape[-1]).float()
    flat_labels = labels.reshape(-1)
    loss_sum = F.cross_entropy(flat_logits, flat_labels, ignore_index=IGNORE, reduction="sum",
                               label_smoothing=label_smoothing)
    counted = flat_labels != IGNORE
    correct = ((flat_logits.argmax(-1) == flat_labels) & counted).sum() if count_correct else None
    return LossParts(loss_sum, counted.sum(), correct)


def forward_logits(model: nn.Module, batch: dict[str, torch.Tensor], check_ids: bool = True) -> torch.Tensor:
    """Run ``model`` on a batch of any objective; (B, T, V) logits aligned with ``batch["labels"]``.

    clm/mlm: ``model(ids)``; prefix: ``model(ids, prefix_len=...)``; seq2seq:
    ``model(src, tgt_in, src_pad=..., tgt_pad=...)`` (teacher forcing). ``check_ids=False`` skips the
    model's id range check (a host synchronisation on a GPU): the trainer's own batches, whose ids its
    tokenizer made.
    """
    if "src" in batch:
        return model(batch["src"], batch["tgt_in"], src_pad=batch["src_pad"], tgt_pad=batch["tgt_pad"],
                     check_ids=check_ids)
    if "prefix_len" in batch:
        return model(batch["ids"], prefix_len=batch["prefix_len"], check_ids=check_ids)
    return model(batch["ids"], check_ids=check_ids)


def batch_loss(model: nn.Module, batch: dict[str, torch.Tensor], label_smoothing: float = 0.0,
               count_correct: bool = True, check_ids: bool = True) -> LossParts:
    """:func:`token_loss` of the model's logits on ``batch`` against its labels (``check_ids``: see
    :func:`forward_logits`)."""
    return token_loss(forward_logits(model, batch, check_ids), batch["labels"], label_smoothing, count_correct)


def check_model_for(objective: str, model: nn.Module) -> None:
    """A ValueError when the model's architecture cannot be trained with ``objective``; else None."""
    config = model.config
    if objective == "seq2seq":
        if config.arch != "encoder-decoder":
            raise GlassformerError(f"objective 'seq2seq' needs model arch='encoder-decoder', got arch={config.arch!r}")
        return
    if objective not in OBJECTIVE_ATTN:
        raise GlassformerError(f"objective must be one of {[*OBJECTIVE_ATTN, 'seq2seq']}, got {objective!r}")
    if config.arch != "lm" or config.attn != OBJECTIVE_ATTN[objective]:
        raise GlassformerError(f"objective {objective!r} needs an lm with attn={OBJECTIVE_ATTN[objective]!r}, got "
                               f"arch={config.arch!r}, attn={config.attn!r}")

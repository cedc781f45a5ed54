"""The four training objectives (clm, mlm, prefix, seq2seq): cross-entropy on the labels that are not -100,
as sums with their token count (so the global batch's count can normalise them)."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..data.mlm import IGNORE
from ..errors import GlassformerError
from ..io.checks import check_number
from ..validate import check_choice

OBJECTIVE_ATTN = {"clm": "causal", "mlm": "bidirectional", "prefix": "prefix"}  # seq2seq: an EncoderDecoder


@dataclass
class LossParts:
    """Summed loss over counted positions, their number, and the argmax hits (None when not asked for)."""

    loss_sum: torch.Tensor
    count: torch.Tensor
    correct: torch.Tensor | None


def token_loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0,
               count_correct: bool = True) -> LossParts:
    """Cross-entropy of (..., V) ``logits`` against (...) ``labels`` (-100: no part), as ``F.cross_entropy``
    with ``label_smoothing``; ``count_correct``: also count argmax hits (training skips it).
    Returns LossParts (the summed loss a float32 scalar)."""
    check_number("label_smoothing", label_smoothing, 0.0, 1.0, high_open=True)
    flat_logits = logits.reshape(-1, logits.shape[-1]).float()
    flat_labels = labels.reshape(-1)
    loss_sum = F.cross_entropy(flat_logits, flat_labels, ignore_index=IGNORE, reduction="sum",
                               label_smoothing=label_smoothing)
    counted = flat_labels != IGNORE
    correct = ((flat_logits.argmax(-1) == flat_labels) & counted).sum() if count_correct else None
    return LossParts(loss_sum, counted.sum(), correct)


def forward_logits(model: nn.Module, batch: dict[str, torch.Tensor], check_ids: bool = True) -> torch.Tensor:
    """(B, T, V) logits of ``model`` on a batch of any objective (``check_ids=False``: no id check, no sync)."""
    if "src" in batch:
        return model(batch["src"], batch["tgt_in"], src_pad=batch["src_pad"], tgt_pad=batch["tgt_pad"],
                     check_ids=check_ids)
    if "prefix_len" in batch:
        return model(batch["ids"], prefix_len=batch["prefix_len"], check_ids=check_ids)
    return model(batch["ids"], check_ids=check_ids)


def batch_loss(model: nn.Module, batch: dict[str, torch.Tensor], label_smoothing: float = 0.0,
               count_correct: bool = True, check_ids: bool = True) -> LossParts:
    """:func:`token_loss` of the model's logits on ``batch`` (:func:`forward_logits`) against its labels."""
    return token_loss(forward_logits(model, batch, check_ids), batch["labels"], label_smoothing, count_correct)


def check_model_for(objective: str, model: nn.Module) -> None:
    """A ValueError when the model's architecture cannot be trained with ``objective``; else None."""
    config = model.config
    if objective == "seq2seq":
        if config.arch != "encoder-decoder":
            raise GlassformerError(f"objective 'seq2seq' needs model arch='encoder-decoder', got arch={config.arch!r}")
        return
    check_choice("objective", objective, [*OBJECTIVE_ATTN, "seq2seq"])
    if config.arch != "lm" or config.attn != OBJECTIVE_ATTN[objective]:
        raise GlassformerError(f"objective {objective!r} needs an lm with attn={OBJECTIVE_ATTN[objective]!r}, got "
                               f"arch={config.arch!r}, attn={config.attn!r}")

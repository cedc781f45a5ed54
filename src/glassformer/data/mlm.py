"""Masked-LM inputs (BERT, Devlin et al. 2019): hide 15% of the tokens and predict them."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..errors import GlassformerError

IGNORE = -100  # the label of a position that takes no part in the loss (F.cross_entropy's ignore_index)


def mask_tokens(
    ids: torch.Tensor,
    *,
    mask_id: int,
    vocab_size: int,
    generator: torch.Generator,
    prob: float = 0.15,
    special_ids: Sequence[int] = (),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose each non-special position with probability ``prob``; of the chosen, 80% become [MASK],
    10% a random (non-special) token and 10% stay as they are. Only chosen positions get a label.

    Keeping and randomising some chosen tokens stops the model from learning that only [MASK]
    positions matter, since fine-tuning inputs never contain [MASK].

    Args:
        ids: (B, T) token ids.
        mask_id: the [MASK] token id; special_ids: ids never chosen nor drawn as random tokens.
        generator: the source of randomness (the same generator state gives the same masks).
    Returns:
        inputs (B, T) and labels (B, T): the original id at chosen positions, -100 elsewhere.
    """
    if not 0.0 < prob <= 1.0:
        raise GlassformerError(f"mask probability must be in (0, 1], got {prob}")
    specials = torch.tensor(sorted({*special_ids, mask_id}), dtype=ids.dtype)
    chosen = (torch.rand(ids.shape, generator=generator) < prob) & ~torch.isin(ids, specials)
    action = torch.rand(ids.shape, generator=generator)  # < 0.8: mask, < 0.9: random, else keep
    allowed = torch.ones(vocab_size, dtype=torch.bool)
    allowed[specials] = False
    candidates = allowed.nonzero().squeeze(1)
    random_ids = candidates[torch.randint(len(candidates), ids.shape, generator=generator)]
    inputs = torch.where(chosen & (action < 0.8), torch.full_like(ids, mask_id), ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
    return inputs, labels

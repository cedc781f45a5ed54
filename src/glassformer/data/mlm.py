"""Masked-LM inputs (BERT, Devlin et al. 2019): hide 15% of the tokens and predict them."""

from collections.abc import Sequence

import torch

from ..errors import GlassformerError

IGNORE = -100  # the label of a position that takes no part in the loss (F.cross_entropy's ignore_index)


def mask_tokens(ids: torch.Tensor, *, mask_id: int, vocab_size: int, generator: torch.Generator,
                prob: float = 0.15, special_ids: Sequence[int] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose each non-special position of ids (B, T) with probability ``prob``; of the chosen, 80% become
    [MASK], 10% a random non-special token and 10% stay (so the model cannot learn that only [MASK]
    positions matter: fine-tuning inputs have none). ``special_ids`` are never chosen nor drawn.

    Returns inputs (B, T) and labels (B, T): the original id at chosen positions, -100 elsewhere."""
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

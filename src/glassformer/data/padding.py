"""The one padder: id lists of different lengths -> a (B, L) id tensor and a (B, L) padding mask."""

from collections.abc import Sequence

import torch

from ..errors import GlassformerError
from ..validate import check_choice

SIDES = ("left", "right")


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int, side: str = "right",
             device: torch.device | str | None = None, length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad B id lists (a row may be empty) with ``pad_id`` to the longest one, or to ``length`` columns.

    Right padding suits an encoder's input and training batches; left padding suits prompts to be
    continued (every row's last token then sits in the last column).
    Returns (ids (B, L) long, pad (B, L) bool, True = padding)."""
    check_choice("side", side, SIDES)
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    L = int(lengths.max()) if len(rows) else 0
    if length is not None:
        if length < L:
            raise GlassformerError(f"length={length} is shorter than the longest row ({L} tokens)")
        L = length
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):  # (an empty row: an empty span)
        span = slice(L - len(row), L) if side == "left" else slice(0, len(row))
        ids[i, span] = torch.tensor(row, dtype=torch.long)
    column = torch.arange(L)[None, :]  # (1, L)
    pad = column < (L - lengths)[:, None] if side == "left" else column >= lengths[:, None]  # (B, L)
    return ids.to(device), pad.to(device)

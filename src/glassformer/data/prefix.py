"""Prefix-LM examples (T5's prefix-LM, UniLM): a random prefix read both ways, the rest predicted."""

import torch

from ..errors import GlassformerError
from .mlm import IGNORE


def prefix_lm_labels(y: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw a prefix length per row, uniform in [1, T - 1], and hide the targets the prefix sees.

    With a prefix of P tokens, positions < P attend to the whole prefix, so the targets y[:, :P - 1]
    (prefix tokens) would leak; the loss keeps y[:, P - 1:]. ``y`` (B, T): next-token targets.
    Returns prefix_len (B,) int64 and labels (B, T) with -100 on the hidden targets."""
    B, T = y.shape
    if T < 2:
        raise GlassformerError(f"a prefix-LM window needs at least 2 tokens (block_size >= 2), got {T}")
    prefix_len = torch.randint(1, T, (B,), generator=generator)  # (B,)
    hidden = torch.arange(T)[None, :] < (prefix_len - 1)[:, None]  # (B, T)
    return prefix_len, y.masked_fill(hidden, IGNORE)

"""Prefix-LM examples (T5's prefix-LM, UniLM): a random prefix read both ways, the rest predicted."""

import torch

from ..errors import GlassformerError
from .mlm import IGNORE


def prefix_lm_labels(y: torch.Tensor, generator: torch.Generator,
                     min_prefix: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw a prefix length per row, uniform in [min_prefix, T - 1], and hide the targets the prefix sees.

    With a prefix of P tokens, positions < P attend to the whole prefix, so the targets y[:, :P - 1]
    (prefix tokens) would leak; the loss keeps y[:, P - 1:]. ``y`` (B, T): next-token targets.
    Returns prefix_len (B,) int64 and labels (B, T) with -100 on the hidden targets."""
    B, T = y.shape
    if not 1 <= min_prefix <= T - 1:
        raise GlassformerError(f"min_prefix must be in [1, block_size - 1 = {T - 1}], got {min_prefix}")
    prefix_len = torch.randint(min_prefix, T, (B,), generator=generator)  # (B,)
    hidden = torch.arange(T)[None, :] < (prefix_len - 1)[:, None]  # (B, T)
    return prefix_len, y.masked_fill(hidden, IGNORE)

"""Attention masks: who may look at whom. Boolean, **True = "may attend"**, broadcasting to (B, h, Tq, Tk),
as in ``F.scaled_dot_product_attention`` (``torch.nn.MultiheadAttention`` uses the opposite convention)."""

import torch


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(T, T) lower-triangular mask, ``mask[i, j] = j <= i``: position i sees positions 0..i, so one
    forward pass trains T next-token predictions at once without any position seeing its answer."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def prefix_mask(T: int, prefix_len: int | torch.Tensor, device: torch.device | str | None = None) -> torch.Tensor:
    """Prefix-LM mask: causal OR (key j is inside the prefix), so the prefix sees itself both ways.

    ``prefix_len``: an int, giving (T, T), or a (B,) integer tensor, giving (B, 1, T, T). 0 gives the
    causal mask, >= T a fully bidirectional one."""
    if device is None and isinstance(prefix_len, torch.Tensor):
        device = prefix_len.device
    causal = causal_mask(T, device)
    key = torch.arange(T, device=device)
    if isinstance(prefix_len, int):
        return causal | (key[None, :] < prefix_len)
    in_prefix = key[None, None, :] < prefix_len.to(device)[:, None, None]  # (B, 1, T): key j in prefix
    return (causal[None] | in_prefix)[:, None]  # (B, 1, T, T)


def padding_mask(pad: torch.Tensor) -> torch.Tensor:
    """(B, 1, 1, T) key-side mask from padding flags pad (B, T), True = padding: no query may look at a
    padded key (a padded query computes garbage the loss ignores). Combine with ``&``."""
    return (~pad)[:, None, None, :]

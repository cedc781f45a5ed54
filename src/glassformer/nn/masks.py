"""Attention masks: who may look at whom.

Convention (the same as ``torch.nn.functional.scaled_dot_product_attention``): masks are boolean and
**True means "may attend"**. They broadcast to (B, h, Tq, Tk). ``torch.nn.MultiheadAttention`` uses
the opposite convention; convert only at that boundary (see ``glassformer.interop``).
"""

from __future__ import annotations

import torch

from ..errors import GlassformerError, check_int, check_prefix_len


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Lower-triangular mask: position i may look at positions 0..i.

    This is what lets one forward pass over a length-T sequence train T next-token predictions at
    once (teacher forcing) without any position seeing its answer.

    Args:
        T: sequence length.
        device: where to create the mask.
    Returns:
        (T, T) bool tensor with ``mask[i, j] = j <= i``.
    """
    check_int("T", T, low=0)
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def prefix_mask(T: int, prefix_len: int | torch.Tensor, device: torch.device | str | None = None) -> torch.Tensor:
    """Prefix-LM mask: the prefix sees itself in both directions, the rest stays causal.

    ``mask = causal OR (key j is inside the prefix)``. ``prefix_len=0`` gives the causal mask and
    ``prefix_len >= T`` a fully bidirectional one.

    Args:
        T: sequence length.
        prefix_len: an int, or a (B,) integer tensor with one prefix length per row.
        device: where to create the mask (defaults to ``prefix_len``'s device for tensors).
    Returns:
        (T, T) for an int ``prefix_len``; (B, 1, T, T) for a tensor (the 1 broadcasts over heads).
    """
    prefix_len = check_prefix_len(prefix_len)
    if device is None and isinstance(prefix_len, torch.Tensor):
        device = prefix_len.device
    causal = causal_mask(T, device)
    key = torch.arange(T, device=device)
    if isinstance(prefix_len, int):
        return causal | (key[None, :] < prefix_len)
    in_prefix = key[None, None, :] < prefix_len.to(device)[:, None, None]  # (B, 1, T): key j in prefix
    return (causal[None] | in_prefix)[:, None]  # (B, 1, T, T)


def padding_mask(pad: torch.Tensor) -> torch.Tensor:
    """Key-side mask from padding flags: no query may look at a padded key.

    Only keys are masked: a padded *query* computes garbage that the loss ignores, but a real query
    must never read a padded key, or the amount of padding would change real outputs.

    Args:
        pad: (B, T) bool tensor, True where the position is padding.
    Returns:
        (B, 1, 1, T) bool tensor, True = may attend; combine with ``&``.
    """
    if not isinstance(pad, torch.Tensor) or pad.dtype != torch.bool or pad.dim() != 2:
        got = f"{pad.dtype} tensor of shape {tuple(pad.shape)}" if isinstance(pad, torch.Tensor) else type(pad).__name__
        raise GlassformerError(f"pad must be a (B, T) bool tensor (True = padding), got {got}")
    return (~pad)[:, None, None, :]

"""Hooks that put an SAE into the model: replace an activation by its reconstruction, or clamp a feature;
each a ``(hook name, function)`` pair for ``run_with_hooks`` or ``hooks``.
"""

from collections.abc import Callable

import torch

from ...io.checks import check_int, check_number
from ..points import HookPoint
from .model import SparseAutoencoder

HookPair = tuple[str, Callable[[torch.Tensor, HookPoint], torch.Tensor]]


def _flat(x: torch.Tensor, sae: SparseAutoencoder) -> torch.Tensor:
    """The hook's tensor (B, T, ...) as (B, T, d_in) floats for the SAE."""
    return x.reshape(*x.shape[:2], -1).to(sae.W_dec.dtype)


def reconstruction_hook(sae: SparseAutoencoder, *, error_term: bool = False) -> HookPair:
    """Replace the activation at ``sae.hook`` by the SAE's reconstruction. ``error_term``: add back what
    the SAE misses (nothing changes, but gradients flow through the features; SAELens's ``use_error_term``)."""
    def replace(x: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        flat = _flat(x, sae)
        out = sae(flat)
        if error_term:
            out = out + (flat - out).detach()
        return out.reshape(x.shape).to(x.dtype)

    return sae.hook, replace


def clamp_hook(sae: SparseAutoencoder, feature: int, value: float) -> HookPair:
    """Set one feature to ``value`` at every position, the rest of the activation as it was:
    x + (value − fᵢ)·W_dec[i] / s (0 ablates it; a large value steers towards it)."""
    check_int("feature", feature, 0, sae.config.d_sae - 1)
    value = check_number("value", value)

    def clamp(x: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        flat = _flat(x, sae)
        current = sae.encode(flat)[..., feature : feature + 1]  # (B, T, 1)
        out = flat + (value - current) * sae.W_dec[feature] / sae.config.input_scale
        return out.reshape(x.shape).to(x.dtype)

    return sae.hook, clamp

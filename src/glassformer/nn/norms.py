"""Normalisation layers: torch's LayerNorm and RMSNorm (Zhang & Sennrich 2019, used by Llama)."""

from __future__ import annotations

import torch
from torch import nn

from ..config import NORMS, check_choice
from ..errors import check_int


class RMSNorm(nn.Module):
    """Scale each vector to unit root-mean-square, then by a learned gain; no mean, no bias.

    ``y = x / sqrt(mean(x^2) + eps) * weight``, computed in float32 as Llama does.

    Args:
        d_model: width.
        eps: added inside the square root.
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        check_int("d_model", d_model, low=1)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def make_norm(kind: str, d_model: int, eps: float, bias: bool = True) -> nn.Module:
    """The normalisation named by ``kind``: "layernorm" (``torch.nn.LayerNorm``) or "rmsnorm" (:class:`RMSNorm`).

    Args:
        kind: "layernorm" or "rmsnorm".
        d_model: width d of the vectors it normalises, (..., d) -> (..., d).
        eps: added to the variance (or mean square).
        bias: LayerNorm's additive bias (RMSNorm has none).
    """
    if check_choice("norm", kind, NORMS) == "layernorm":
        return nn.LayerNorm(d_model, eps=eps, bias=bias)
    return RMSNorm(d_model, eps=eps)

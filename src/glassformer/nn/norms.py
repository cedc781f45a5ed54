"""Normalisation layers: LayerNorm and RMSNorm (Zhang & Sennrich 2019, used by Llama).

Both have TransformerLens's two hook points: "scale" (..., 1), the divisor (σ, or the root mean square),
and "normalized" (..., d), the vector divided by it *before* the learned gain and bias. With nothing
attached they run as before (torch's fused ``layer_norm``); with a hook attached, written out.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import NORMS
from ..validate import check_choice
from .taps import Tapped


def _written_out(norm: LayerNorm | RMSNorm, x: torch.Tensor, centre: bool) -> torch.Tensor:
    """The norm through its "scale" and "normalized" taps: (..., d) -> (..., d).

    When the hooks only read (they return the tensors they were given, unchanged in place), the output
    is the untapped norm's own, bit for bit, so caching changes no number; when one replaces or edits a
    tensor, the rest is computed from the edited one: ``normalized * weight + bias``. Under
    ``torch.inference_mode`` in-place edits cannot be seen, so the rest is always computed that way
    (equal to the plain norm up to float rounding).
    """
    x32 = x.float()
    if centre:
        x32 = x32 - x32.mean(-1, keepdim=True)
    scale = (x32.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()  # (..., 1)
    version = _version(scale)
    hooked_scale = norm.tap("scale", scale)
    kept = hooked_scale is scale and version is not None and scale._version == version
    normalized = x32 / hooked_scale  # (..., d): before the affine part
    version = _version(normalized)
    hooked = norm.tap("normalized", normalized)
    if (kept and hooked is normalized and version is not None and normalized._version == version
            and not norm.tapped_backward("scale", "normalized")):  # a gradient asked for: stay on their path
        return norm.plain(x)
    y = hooked * norm.weight.float() if norm.weight is not None else hooked
    if getattr(norm, "bias", None) is not None:
        y = y + norm.bias.float()
    return y.to(x.dtype)


def _version(t: torch.Tensor) -> int | None:
    """The tensor's in-place edit counter (None for an inference tensor, which has none)."""
    return None if t.is_inference() else t._version


class LayerNorm(nn.LayerNorm, Tapped):
    """torch's ``nn.LayerNorm`` (same parameters, same numbers) with the hook points "scale" and "normalized"."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        return self.plain(x) if self.taps is None else _written_out(self, x, centre=True)

    def plain(self, x: torch.Tensor) -> torch.Tensor:
        """The norm without hook points (torch's fused kernel)."""
        return super().forward(x)


class RMSNorm(Tapped):
    """Scale each vector to unit root-mean-square, then by a learned gain; no mean, no bias.

    ``y = x / sqrt(mean(x^2) + eps) * weight``, computed in float32 as Llama does.
    Hook points: "scale" (..., 1) the root mean square; "normalized" (..., d) before the gain.

    Args:
        d_model: width.
        eps: added inside the square root.
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        return self.plain(x) if self.taps is None else _written_out(self, x, centre=False)

    def plain(self, x: torch.Tensor) -> torch.Tensor:
        """The norm without hook points."""
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def make_norm(kind: str, d_model: int, eps: float, bias: bool = True) -> nn.Module:
    """The normalisation named by ``kind``: "layernorm" (:class:`LayerNorm`) or "rmsnorm" (:class:`RMSNorm`).

    Args:
        kind: "layernorm" or "rmsnorm".
        d_model: width d of the vectors it normalises, (..., d) -> (..., d).
        eps: added to the variance (or mean square).
        bias: LayerNorm's additive bias (RMSNorm has none).
    """
    if check_choice("norm", kind, NORMS) == "layernorm":
        return LayerNorm(d_model, eps=eps, bias=bias)
    return RMSNorm(d_model, eps=eps)

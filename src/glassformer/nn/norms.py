"""Normalisation layers: LayerNorm and RMSNorm (Zhang & Sennrich 2019, used by Llama).

Their hook points belong to the place that applies them (:class:`~glassformer.nn.taps.NormTaps`, TransformerLens's
``ln1.hook_scale``...): "scale" (..., 1), the divisor, and "normalized" (..., d), the vector divided by it
before the learned gain and bias; only while hooked is the norm written out (:meth:`LayerNorm.written_out`)."""

import torch
from torch import nn

from .freezing import held
from .taps import Tap


def _written_out(norm: "LayerNorm | RMSNorm", x: torch.Tensor, centre: bool, scale_tap: Tap,
                 normalized_tap: Tap) -> torch.Tensor:
    """The norm written out through its "scale" and "normalized" taps: (..., d) -> (..., d).

    Hooks that only read leave the output the untapped norm's, bit for bit; after a replaced or edited
    tensor it is ``normalized * weight + bias`` from the edited one (always so under inference mode,
    where in-place edits cannot be seen)."""
    x32 = x.float()
    if centre:
        x32 = x32 - x32.mean(-1, keepdim=True)
    scale = (x32.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()  # (..., 1)
    if norm.frozen_mode:
        scale = scale.detach()
    version = _version(scale)
    hooked_scale = scale_tap(scale)
    kept = hooked_scale is scale and version is not None and scale._version == version
    normalized = x32 / hooked_scale  # (..., d): before the affine part
    version = _version(normalized)
    hooked = normalized_tap(normalized)
    if (kept and hooked is normalized and version is not None and normalized._version == version
            and not scale_tap.wants_grad and not normalized_tap.wants_grad):  # a gradient asked for: stay on their path
        return norm(x)
    y = hooked * norm.weight.float() if norm.weight is not None else hooked
    if getattr(norm, "bias", None) is not None:
        y = y + norm.bias.float()
    return y.to(x.dtype)


def _version(t: torch.Tensor) -> int | None:
    """The tensor's in-place edit counter (None for an inference tensor)."""
    return None if t.is_inference() else t._version


class LayerNorm(nn.LayerNorm):
    """torch's ``nn.LayerNorm`` (same parameters, same numbers), and :meth:`written_out` for its hook points.
    ``frozen_mode``: the divisor sqrt(var + eps) is a constant for autograd (:mod:`glassformer.nn.freezing`)."""

    frozen_mode = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d), torch's fused kernel."""
        y = nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        if not self.frozen_mode:
            return y
        x32 = x.float()
        centred = x32 - x32.mean(-1, keepdim=True)
        linear = centred / (centred.pow(2).mean(-1, keepdim=True) + self.eps).sqrt().detach()  # (..., d)
        if self.weight is not None:
            linear = linear * self.weight.float()
        if self.bias is not None:
            linear = linear + self.bias.float()
        return held(y, linear.to(x.dtype))

    def written_out(self, x: torch.Tensor, scale_tap: Tap, normalized_tap: Tap) -> torch.Tensor:
        """The same norm step by step, through the taps "scale" (..., 1) and "normalized" (..., d)."""
        return _written_out(self, x, True, scale_tap, normalized_tap)


class RMSNorm(nn.Module):
    """Scale each vector to unit root-mean-square, then by a learned gain; no mean, no bias:
    ``y = x / sqrt(mean(x^2) + eps) * weight``, computed in float32 as Llama does. ``frozen_mode``: the
    divisor is a constant for autograd (:mod:`glassformer.nn.freezing`)."""

    frozen_mode = False

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps  # > 0, finite: ModelConfig.norm_eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        x32 = x.float()
        inverse_rms = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., 1)
        normed = x32 * (inverse_rms.detach() if self.frozen_mode else inverse_rms)
        return self.weight * normed.to(x.dtype)

    def written_out(self, x: torch.Tensor, scale_tap: Tap, normalized_tap: Tap) -> torch.Tensor:
        """The same norm step by step, through the taps "scale" (..., 1) and "normalized" (..., d)."""
        return _written_out(self, x, False, scale_tap, normalized_tap)


def make_norm(kind: str, d_model: int, eps: float, bias: bool = True) -> nn.Module:
    """The norm ``kind`` names, (..., d) -> (..., d): "layernorm" (:class:`LayerNorm`, with ``bias``) or
    "rmsnorm" (:class:`RMSNorm`, no bias); ``eps`` is added to the variance (or mean square)."""
    return LayerNorm(d_model, eps=eps, bias=bias) if kind == "layernorm" else RMSNorm(d_model, eps=eps)

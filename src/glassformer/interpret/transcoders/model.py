"""Transcoders: sparse features that read each MLP's input and predict its output, so that a model's MLPs
can be replaced by something readable (Dunefsky et al. 2024; Ameisen et al. 2025, "Circuit tracing").

    f_l = act(W_enc[l] · (x_l s_in[l]) + b_enc[l])                 (F,) features of layer l, mostly zero
    ŷ_j = (Σ_{i ≤ j} W_dec[i][:, j − i]ᵀ f_i + b_dec[j] + W_skip[j] x_j s_in[j]) / s_out[j]

A per-layer set ("plt") lets layer i's features write to layer i alone (``W_dec[i]``: (F, 1, d)); a
cross-layer transcoder ("clt") lets them write to every later MLP output too (``W_dec[i]``: (F, L − i, d)).
act: ReLU, JumpReLU (``threshold``, trained with straight-through estimators, Rajamanoharan et al. 2024)
or TopK (the k largest pre-activations kept as they are, as circuit-tracer's TopK). ``s_in``/``s_out``
put activations at an average norm of √d while training; :meth:`TrainableTranscoders.fold_scales` moves them
into the weights, which then use circuit-tracer's layouts (W_enc (F, d) per layer, W_dec (F, d) or (F, L − i, d)).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...errors import GlassformerError
from ...io.checks import check_int, shown
from ...validate import check_fields, option
from ..sae.model import MAX_WIDTH
from .format import ACTIVATIONS, KINDS, LayerTranscoder, Transcoders, topk

INPUT_HOOK, OUTPUT_HOOK = "ln2.hook_normalized", "hook_mlp_out"  # in each block: what the MLP reads (before
# the norm's gain and bias, which the encoder absorbs: TransformerLens 3 names it so too) and what it writes


@dataclass
class TranscoderConfig:
    """What defines a set of transcoders: ``n_layers`` MLPs of width ``d_model``, ``d_transcoder`` features per
    layer, ``kind`` "plt" or "clt", ``activation`` "relu", "jumprelu" or "topk" (``k`` per layer and token),
    ``skip``: a learned linear skip connection W_skip (per-layer sets only; Paulo et al. 2025), and the
    block's hook points it reads and predicts (``input_hook``, ``output_hook``)."""

    n_layers: int = option(ge=1, le=1024)
    d_model: int = option(ge=1, le=MAX_WIDTH)
    d_transcoder: int = option(ge=1, le=MAX_WIDTH)
    kind: str = option("plt", choices=KINDS)
    activation: str = option("relu", choices=ACTIVATIONS)
    k: int = option(32, ge=1)
    skip: bool = False
    input_hook: str = INPUT_HOOK
    output_hook: str = OUTPUT_HOOK

    def __post_init__(self) -> None:
        check_fields(self)
        if self.activation == "topk":
            check_int("k", self.k, 1, self.d_transcoder)  # at most the features of a layer
        check_kind(self.kind, self.activation, self.skip)

    def span(self, layer: int) -> int:
        """How many MLP outputs layer ``layer``'s features write to: 1 (plt) or n_layers − layer (clt)."""
        return self.n_layers - layer if self.kind == "clt" else 1


def check_kind(kind: str, activation: str, skip: bool) -> None:
    """Refuse for a cross-layer set (kind "clt") what only a per-layer one has: TopK and a skip connection."""
    if kind == "clt" and activation == "topk":
        raise GlassformerError("activation 'topk' is for kind 'plt' (per-layer transcoders); a cross-layer "
                               "transcoder (kind 'clt') takes 'relu' or 'jumprelu' (circuit-tracer reads no other)")
    if kind == "clt" and skip:
        raise GlassformerError("skip is for kind 'plt' (per-layer transcoders): circuit-tracer's cross-layer files "
                               "hold no W_skip")


class _Threshold(torch.autograd.Function):
    """JumpReLU x · H(x − θ), or with ``step`` H(x − θ) (counts a feature as active). The gradient to θ is the
    pseudo-derivative −(θ/ε)·rect((x − θ)/ε), the step's −(1/ε)·rect((x − θ)/ε) (Rajamanoharan et al.); the
    step passes none to x."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, threshold: torch.Tensor, bandwidth: float, step: bool) -> torch.Tensor:
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth, ctx.step = bandwidth, step
        return (x > threshold).to(x.dtype) if step else x * (x > threshold)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor, None, None]:
        x, threshold = ctx.saved_tensors
        eps = ctx.bandwidth
        near = ((x - threshold).abs() < eps / 2).to(grad.dtype)  # rect((x − θ)/ε)
        to_threshold = -((1 if ctx.step else threshold) / eps) * near * grad
        return None if ctx.step else (x > threshold) * grad, _to_shape(to_threshold, threshold), None, None


def _to_shape(grad: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``grad`` summed over the leading axes that broadcasting added to ``like``."""
    return grad.sum(dim=tuple(range(grad.dim() - like.dim()))) if grad.dim() > like.dim() else grad


def jumprelu(x: torch.Tensor, threshold: torch.Tensor, bandwidth: float = 1e-3) -> torch.Tensor:
    """x where x > threshold, else 0 (threshold broadcast against x); trainable threshold (see _Threshold)."""
    return _Threshold.apply(x, threshold, bandwidth, False)


def step(x: torch.Tensor, threshold: torch.Tensor, bandwidth: float = 1e-3) -> torch.Tensor:
    """1.0 where x > threshold, else 0: the L0 count JumpReLU training penalises, with a gradient to threshold."""
    return _Threshold.apply(x, threshold, bandwidth, True)


class TrainableTranscoders(nn.Module):
    """A set of transcoders for every MLP of a model, from a :class:`TranscoderConfig` or its fields as keywords
    (``TrainableTranscoders(n_layers=2, d_model=64, d_transcoder=512, kind="clt")``). Inputs and outputs are
    (..., L, d): every layer's MLP input, every layer's MLP output. Random unit encoder rows, decoder rows of
    norm 0.1 (split over a cross-layer feature's outputs), zero biases and skip, thresholds 0.1.
    """

    def __init__(self, config: TranscoderConfig | None = None, **fields_: Any):
        super().__init__()
        self.config = c = config or TranscoderConfig(**fields_)
        L, d, F = c.n_layers, c.d_model, c.d_transcoder
        W_enc = torch.randn(L, F, d)
        self.W_enc = nn.Parameter(W_enc / W_enc.norm(dim=-1, keepdim=True))  # (L, F, d): row f reads feature f
        self.b_enc = nn.Parameter(torch.zeros(L, F))
        decoders = []
        for i in range(L):
            W = torch.randn(F, c.span(i), d)  # (F, span, d): what feature f of layer i writes to layers i, i+1...
            decoders.append(nn.Parameter(0.1 * W / W.flatten(1).norm(dim=1)[:, None, None]))
        self.W_dec = nn.ParameterList(decoders)
        self.b_dec = nn.Parameter(torch.zeros(L, d))
        self.W_skip = nn.Parameter(torch.zeros(L, d, d)) if c.skip else None  # (L, d_out, d_in)
        self.threshold = nn.Parameter(torch.full((L, F), 0.1)) if c.activation == "jumprelu" else None
        self.register_buffer("input_scale", torch.ones(L))
        self.register_buffer("output_scale", torch.ones(L))
        self.bandwidth = 1e-3  # ε of JumpReLU's pseudo-derivatives, in the units of the pre-activations

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """(..., L, d) MLP inputs -> (..., L, F) encoder outputs before the activation function."""
        c = self.config
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or tuple(x.shape[-2:]) != (c.n_layers, c.d_model):
            raise GlassformerError(f"these transcoders read (..., n_layers={c.n_layers}, d_model={c.d_model}) "
                                   f"MLP inputs, got {shown(x)}")
        scaled = x * self.input_scale[:, None]
        return torch.einsum("...ld,lfd->...lf", scaled, self.W_enc) + self.b_enc

    def activate(self, pre: torch.Tensor, layer: int | None = None) -> torch.Tensor:
        """Pre-activations (..., L, F) (or (..., F) of one ``layer``) -> features."""
        kind = self.config.activation
        if kind == "relu":
            return torch.relu(pre)
        if kind == "topk":
            return topk(pre, self.config.k)
        return jumprelu(pre, self.threshold if layer is None else self.threshold[layer], self.bandwidth)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., L, d) MLP inputs -> (..., L, F) sparse features."""
        return self.activate(self.pre_activations(x))

    def encode_layer(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """(..., d) the MLP input of ``layer`` alone -> (..., F) its features."""
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[-1] != self.config.d_model:
            raise GlassformerError(f"these transcoders read activations of width d_model={self.config.d_model}, "
                                   f"got {shown(x)}")
        pre = (x * self.input_scale[layer]) @ self.W_enc[layer].t() + self.b_enc[layer]
        return self.activate(pre, layer)

    def decode(self, f: torch.Tensor, x: torch.Tensor | None = None, *, bias: bool = True) -> torch.Tensor:
        """(..., L, F) features -> (..., L, d) predicted MLP outputs. ``x`` (..., L, d): the MLP inputs the
        skip connection reads (needed when there is one); ``bias=False`` leaves out b_dec and the skip."""
        out = f.new_zeros(*f.shape[:-1], self.config.d_model)  # (..., L, d)
        for i, W in enumerate(self.W_dec):  # layer i's features write to layers i .. i + span - 1
            out[..., i:i + W.shape[1], :] += torch.einsum("...f,fsd->...sd", f[..., i, :], W)
        if bias:
            out = out + self.b_dec
            if self.W_skip is not None:
                if x is None:
                    raise GlassformerError("these transcoders have a skip connection: decode needs the MLP inputs x")
                out = out + torch.einsum("...ld,lod->...lo", x * self.input_scale[:, None], self.W_skip)
        return out / self.output_scale[:, None]

    def decode_layer(self, features: list[torch.Tensor], layer: int, x: torch.Tensor | None = None) -> torch.Tensor:
        """The predicted MLP output of ``layer`` (..., d) from the features of layers 0..layer (a list of
        (..., F)); ``x`` (..., d): that layer's MLP input, for the skip connection."""
        out = self.b_dec[layer]
        for i in range(layer + 1):
            if layer - i < self.W_dec[i].shape[1]:
                out = out + features[i] @ self.W_dec[i][:, layer - i]
        if self.W_skip is not None:
            out = out + (x * self.input_scale[layer]) @ self.W_skip[layer].t()
        return out / self.output_scale[layer]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The predicted MLP outputs for MLP inputs ``x``: (..., L, d) -> (..., L, d)."""
        return self.decode(self.encode(x), x)

    def decoder_norms(self) -> torch.Tensor:
        """(L, F): the norm of everything each feature writes (over all the layers it writes to)."""
        return torch.stack([W.flatten(1).norm(dim=1) for W in self.W_dec])

    def directions(self, layer: int) -> torch.Tensor:
        """(F, d): what each feature of ``layer`` adds to the residual stream, summed over the layers it writes to."""
        W = self.W_dec[layer]  # (F, span, d)
        return (W / self.output_scale[layer:layer + W.shape[1]][None, :, None]).sum(1)

    @torch.no_grad()
    def fold_scales(self) -> TrainableTranscoders:
        """Move input_scale and output_scale into the weights (both become 1; every output is the same up to
        rounding): the form circuit-tracer's files hold. Returns self."""
        s_in, s_out = self.input_scale.clone(), self.output_scale.clone()
        self.W_enc.mul_(s_in[:, None, None])
        for i, W in enumerate(self.W_dec):
            W.div_(s_out[i:i + W.shape[1]][None, :, None])
        self.b_dec.div_(s_out[:, None])
        if self.W_skip is not None:
            self.W_skip.mul_((s_in / s_out)[:, None, None])
        self.input_scale.fill_(1.0)
        self.output_scale.fill_(1.0)
        return self

    @torch.no_grad()
    def to_transcoders(self, scan: str | None = None) -> Transcoders:
        """These transcoders as :class:`~glassformer.interpret.transcoders.format.Transcoders` (plain float32
        tensors per layer, the scales folded in), ready for ``save_transcoders`` and circuit-tracer."""
        c = self.config
        folded = copy.deepcopy(self).cpu().float().fold_scales()
        layers = [LayerTranscoder(
            W_enc=folded.W_enc[i].clone(), b_enc=folded.b_enc[i].clone(),
            W_dec=folded.W_dec[i][:, 0].clone() if c.kind == "plt" else folded.W_dec[i].clone(),
            b_dec=folded.b_dec[i].clone(), W_skip=None if folded.W_skip is None else folded.W_skip[i].clone(),
            threshold=None if folded.threshold is None else folded.threshold[i].clone()) for i in range(c.n_layers)]
        return Transcoders(layers, c.kind, c.activation, c.k if c.activation == "topk" else None, c.input_hook,
                           c.output_hook, scan=scan)

    @classmethod
    @torch.no_grad()
    def from_transcoders(cls, tc: Transcoders) -> TrainableTranscoders:
        """The module for a set read with ``load_transcoders`` (scales 1; the same numbers as the files)."""
        tc.check()
        config = TranscoderConfig(n_layers=tc.n_layers, d_model=tc.d_model, d_transcoder=tc.d_transcoder,
                                  kind=tc.kind, activation=tc.activation, k=tc.k or 1, skip=tc.skip,
                                  input_hook=tc.feature_input_hook, output_hook=tc.feature_output_hook)
        module = cls(config)
        for name in ("W_enc", "b_enc", "b_dec", "W_skip", "threshold"):  # (L, ...): the layers' tensors stacked
            if getattr(module, name) is not None:
                getattr(module, name).copy_(torch.stack([getattr(layer, name) for layer in tc.layers]))
        for W, layer in zip(module.W_dec, tc.layers, strict=True):
            W.copy_(layer.W_dec.reshape(W.shape))
        return module.eval()

    def __repr__(self) -> str:
        c = self.config
        act = f"topk k={c.k}" if c.activation == "topk" else c.activation
        return (f"TrainableTranscoders({c.kind}: {c.n_layers} layers x {c.d_transcoder} features on "
                f"d_model={c.d_model}, {act}{', skip' if c.skip else ''})")

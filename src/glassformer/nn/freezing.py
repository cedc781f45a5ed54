"""Frozen mode: attention patterns and norm scales held as constants for a backward pass.

Attribution graphs (Ameisen et al. 2025, "circuit tracing") ask how much each feature contributes to
another *through linear paths alone*. Inside ``with frozen(model):`` every forward computes its values as
usual (bit for bit), but autograd sees each attention pattern softmax(q kᵀ/√d) and each norm's divisor
(LayerNorm's sqrt(var + eps), RMSNorm's rms) as constants: gradients flow through the residual stream,
the values, ``o_proj``, the feed-forward and the norms' numerator (LayerNorm's centring, the gain), never
into queries, keys or a norm's statistics. ``model.frozen()`` is the same context. The parts that take part
declare a ``frozen_mode`` flag (False by default): MultiHeadAttention, LayerNorm, RMSNorm."""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


def held(value: torch.Tensor, linear: torch.Tensor) -> torch.Tensor:
    """``value``'s numbers with ``linear``'s gradient: value + (linear - linear) with only ``linear``'s first
    term on autograd's path. Exact: x - x is 0 for a finite x, so the forward is not moved by a rounding."""
    return value.detach() + (linear - linear.detach())


@contextmanager
def frozen(module: nn.Module) -> Iterator[nn.Module]:
    """Within the ``with``, every attention and norm inside ``module`` (a model, a block) holds its pattern or
    scale constant for autograd (see the module docstring); yields ``module``. Nesting is allowed: each
    part returns to the state it had on entry."""
    parts = [m for m in module.modules() if hasattr(type(m), "frozen_mode")]  # the classes that declare it
    before = [m.frozen_mode for m in parts]
    try:
        for m in parts:
            m.frozen_mode = True
        yield module
    finally:
        for m, was in zip(parts, before, strict=True):
            m.frozen_mode = was

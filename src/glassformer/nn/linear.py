"""The linear layer every projection uses, with a faster route for the few rows of decoding on a CPU.

``linear(x, W, b)`` is ``F.linear``: x Wᵀ + b. One case takes another route. A decoding step feeds
one row per sequence through every weight matrix, so its cost is *reading the weights* (the work is
memory-bound, a few FLOPs per weight). On the CPUs measured for docs/benchmarks.md, the kernel
``F.linear`` sends a few-row product to reads the weights at ~12 GB/s; computing the transpose
instead, W xᵀ, with W's rows cut into four blocks multiplied as one batch (``torch.bmm``), reads
them at ~20 GB/s. Same numbers up to float32 rounding; decoding at batch 1 gets ~1.3x faster.

The route is taken only where it was measured to pay: float32 on the CPU, no autograd, at most
``FEW_ROWS`` rows, and a weight too big to stay in cache (``MIN_WEIGHT`` elements). Everything else,
training included, is plain ``F.linear``. ``set_batched_matvec(False)`` turns it off everywhere
(``glassformer bench`` times both).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ArgumentTypeError

FEW_ROWS = 4  # products with at most this many rows (B x T) may take it (at 8 rows it was 0.7x)
MIN_WEIGHT = 1 << 17  # ... when the weight has at least this many elements (512 KB in float32)
BLOCKS = 4  # the weight's rows are multiplied as this many blocks

_batched_matvec = True


def set_batched_matvec(enabled: bool) -> bool:
    """Turn the few-row route on (the default) or off; returns the previous setting."""
    global _batched_matvec
    if not isinstance(enabled, bool):
        raise ArgumentTypeError(f"enabled must be a bool, got {type(enabled).__name__}")
    previous, _batched_matvec = _batched_matvec, enabled
    return previous


def _few_rows(x: torch.Tensor, weight: torch.Tensor) -> int:
    """x's number of rows when the batched route applies to ``x Wᵀ``, else 0."""
    if not _batched_matvec or torch.is_grad_enabled() or weight.numel() < MIN_WEIGHT or weight.dim() != 2:
        return 0  # training (autograd on) always leaves here, at the first two checks
    if x.device.type != "cpu" or weight.dtype != torch.float32 or x.dtype != torch.float32 or x.dim() == 0:
        return 0
    if x.shape[-1] != weight.shape[1] or not weight.is_contiguous():
        return 0
    rows = x.numel() // weight.shape[1]
    return rows if 0 < rows <= FEW_ROWS else 0


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``: x (..., in) -> (..., out), through the few-row route when it applies."""
    rows = _few_rows(x, weight)
    if not rows:
        return F.linear(x, weight, bias)
    n_out, n_in = weight.shape
    per_block = n_out // BLOCKS
    split = BLOCKS * per_block  # rows of W in the blocks; the last n_out % BLOCKS rows go alone
    flat = x.reshape(rows, n_in)
    columns = flat.t().expand(BLOCKS, n_in, rows)  # xᵀ, shared by every block (strides (0, 1, in))
    blocks = (weight if split == n_out else weight[:split]).view(BLOCKS, per_block, n_in)
    y = torch.bmm(blocks, columns).view(split, rows).t()  # (rows, split)
    if split < n_out:
        y = torch.cat([y, F.linear(flat, weight[split:])], dim=1)
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], n_out)


class Linear(nn.Linear):
    """``torch.nn.Linear`` (same parameters, same state dict) whose product is :func:`linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in_features) -> (..., out_features)."""
        return linear(x, self.weight, self.bias)

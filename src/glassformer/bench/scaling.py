"""How a training step's cost grows with context length, batch and width (glassformer only): FLOPs per token
are 6N + 12·L·T·d, so tokens/s should be flat in batch, fall slowly with T and about as 1/d² with width."""

from dataclasses import replace
from typing import Any

import torch

from ..training.optim import make_optimizer
from .setups import SIZES, Size, glass_model, seeded_batch
from .timing import paired
from .train import ADAMW, train_step

SERIES: dict[str, tuple[str, tuple[int, ...]]] = {
    "context": ("block", (64, 128, 256, 512)),  # batch adjusted so every step has 2048 tokens
    "batch": ("batch", (1, 4, 16, 32)),
    "width": ("d_model", (16, 32, 64, 96)),  # per head: d_model = n_heads x this (64-384 on small)
}


def _point(base: Size, field: str, value: int) -> Size:
    """``base`` with ``field`` set to ``value``; a new context length keeps batch x block (tokens per step)."""
    if field == "block":
        return replace(base, block=value, batch=max(1, base.batch * base.block // value))
    return replace(base, **{field: value})


def bench_scaling(base: Size = SIZES["small"], *, rounds: int = 3, calls: int = 1,
                  device: torch.device | str = "cpu", precision: str = "float32") -> dict[str, Any]:
    """Training tokens/s in ``precision`` with one of block, batch, d_model of ``base`` changed at a time:
    {series: {"field", "tokens_per_s": {value: tokens/s}}} for "context", "batch" and "width"."""
    results: dict[str, Any] = {}
    for series, (field, values) in SERIES.items():
        steps, tokens = {}, {}
        if field == "d_model":  # widths every size's head count divides
            values = tuple(base.n_heads * per_head for per_head in values)
        for value in values:
            size = _point(base, field, value)
            model = glass_model(size, device).train()
            ids, _ = seeded_batch(size, device)
            steps[str(value)] = train_step(model, make_optimizer(model, **ADAMW), ids, ids.roll(-1, dims=1),
                                           precision=precision)
            tokens[str(value)] = size.batch * size.block
        timings = paired(steps, rounds=rounds, calls=calls, device=device)
        results[series] = {"field": field, "tokens_per_s": {v: tokens[v] / t.median for v, t in timings.items()}}
    return results

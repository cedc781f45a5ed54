"""The cost of transparency: a forward pass that returns every layer's attention weights.

``return_attn=True`` switches attention from the fused kernel to the explicit softmax, and keeps
each layer's (B, h, T, T) weights alive; this measures what that costs against the fused forward.
"""

from __future__ import annotations

from typing import Any

import torch

from .setups import Size, glass_model
from .timing import paired, paired_ratio


def bench_transparency(size: Size, *, rounds: int = 5, calls: int = 3, device: torch.device | str = "cpu",
                       dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Inference forward on a training batch of ``size``, fused vs ``return_attn=True``, paired.

    Returns tokens_per_s for "fused" and "return_attn", and ratio (return_attn seconds / fused
    seconds: 1.3 means looking inside costs 30% more time).
    """
    model = glass_model(size, device, dtype).eval()
    ids = torch.randint(0, size.vocab_size, (size.batch, size.block),
                        generator=torch.Generator().manual_seed(0)).to(device)

    def forward(return_attn: bool) -> None:
        with torch.inference_mode():
            model(ids, return_attn=return_attn)

    timings = paired({"fused": lambda: forward(False), "return_attn": lambda: forward(True)},
                     rounds=rounds, calls=calls, device=device)
    tokens = size.batch * size.block
    return {
        "size": size.name, "tokens_per_s": {n: tokens / t.median for n, t in timings.items()},
        "ratio": paired_ratio(timings["return_attn"], timings["fused"]),
        "seconds": {n: t.rounds for n, t in timings.items()},
    }

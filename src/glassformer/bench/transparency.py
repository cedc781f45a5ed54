"""The cost of transparency: a forward pass that returns every layer's attention weights.

``return_attn=True`` switches attention from the fused kernel to the explicit softmax, and keeps
each layer's (B, h, T, T) weights alive; this measures what that costs against the fused forward,
and what the hook points of glassformer.interpret cost when used: the last layer's weights alone
(every other layer stays fused) and a cache of every hook point. Each precision asked is a set of
rows of its own: float32, or the forward passes under ``torch.autocast`` (float32 weights).
"""

from __future__ import annotations

from typing import Any

import torch

from ..interpret import attention_weights, run_with_cache
from .setups import Size, glass_model, in_precision
from .timing import paired, paired_ratio


def bench_transparency(size: Size, *, rounds: int = 5, calls: int = 3, device: torch.device | str = "cpu",
                       precisions: tuple[str, ...] = ("float32",)) -> dict[str, dict[str, Any]]:
    """Inference forward on a training batch of ``size``, fused vs ``return_attn=True``, paired, with
    two uses of the hook points: "one_layer_weights" (``attention_weights`` of the last layer) and
    "cache_everything" (``run_with_cache`` of every hook point); every precision in the same rounds.

    Returns, per precision: tokens_per_s of each, ratio (return_attn seconds / fused seconds: 1.3
    means looking inside costs 30% more time) and ratios (each contender's seconds / fused seconds).
    """
    model = glass_model(size, device).eval()
    ids = torch.randint(0, size.vocab_size, (size.batch, size.block),
                        generator=torch.Generator().manual_seed(0)).to(device)

    def forward(return_attn: bool) -> None:
        with torch.inference_mode():
            model(ids, return_attn=return_attn)

    def inspect(use: str) -> None:
        with torch.inference_mode():
            if use == "one_layer_weights":
                attention_weights(model, ids, layers=[size.n_layers - 1])
            else:
                run_with_cache(model, ids)

    contenders = {"fused": lambda: forward(False), "return_attn": lambda: forward(True),
                  "one_layer_weights": lambda: inspect("one_layer_weights"),
                  "cache_everything": lambda: inspect("cache_everything")}
    timed = paired({f"{name} {p}": in_precision(fn, p, device) for p in precisions for name, fn in contenders.items()},
                   rounds=rounds, calls=calls, device=device)
    tokens = size.batch * size.block
    results: dict[str, dict[str, Any]] = {}
    for p in precisions:
        timings = {name: timed[f"{name} {p}"] for name in contenders}
        results[p] = {
            "size": size.name, "precision": p, "tokens_per_s": {n: tokens / t.median for n, t in timings.items()},
            "ratio": paired_ratio(timings["return_attn"], timings["fused"]),
            "ratios": {n: paired_ratio(t, timings["fused"]) for n, t in timings.items() if n != "fused"},
            "seconds": {n: t.rounds for n, t in timings.items()},
        }
    return results

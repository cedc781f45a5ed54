"""The cost of transparency: ``return_attn=True`` (the explicit softmax, every layer's (B, h, T, T) weights
kept) against the fused forward, and what glassformer.interpret's hook points cost when used."""

from typing import Any

import torch

from ..interpret import attention_weights, run_with_cache
from .setups import Size, glass_model, in_precision, seeded_batch
from .timing import paired, paired_ratio


def bench_transparency(size: Size, *, rounds: int = 5, calls: int = 3, device: torch.device | str = "cpu",
                       precisions: tuple[str, ...] = ("float32",)) -> dict[str, dict[str, Any]]:
    """Inference forwards on a training batch, paired: fused, return_attn, one_layer_weights (the last layer's)
    and cache_everything. Returns per precision tokens_per_s of each, ratio (return_attn / fused seconds: 1.3
    means looking inside costs 30% more time) and ratios (each one's seconds / fused seconds)."""
    model = glass_model(size, device).eval()
    ids, _ = seeded_batch(size, device)
    contenders = {"fused": lambda: model(ids), "return_attn": lambda: model(ids, return_attn=True),
                  "one_layer_weights": lambda: attention_weights(model, ids, layers=[size.n_layers - 1]),
                  "cache_everything": lambda: run_with_cache(model, ids)}
    with torch.inference_mode():
        timed = paired({f"{name} {p}": in_precision(fn, p, device) for p in precisions
                        for name, fn in contenders.items()}, rounds=rounds, calls=calls, device=device)
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

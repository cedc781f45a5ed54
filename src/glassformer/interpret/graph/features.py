"""What a graph's page shows about a feature: the tokens its decoder promotes through the unembedding, and
its strongest activations over some text (top examples)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..hooks import hooks
from ..transcoders.format import Transcoders
from .attribute import keeper, point_name, unembedding


def feature_info(model: nn.Module, tc: Transcoders, features: dict[str, tuple[int, int]], *,
                 token_text: Any, ids: torch.Tensor | None = None, window: int = 64, top_logits: int = 5,
                 top_examples: int = 3) -> dict[str, dict[str, Any]]:
    """{node id: info} for ``features`` ({node id: (layer, feature)}).

    Args:
        token_text: ``token_text(id) -> str`` for the page.
        ids: token ids of some text (N,), read in windows of ``window`` tokens for the top examples; None: none.

    Returns:
        per feature ``top_logits`` [[token, value]] (W_U @ decoder, a CLT's decoders summed over the layers it
        writes to), and with ``ids`` ``examples`` [{tokens, values, peak}] and ``max``.
    """
    W_U = unembedding(model)  # (V, d)
    info: dict[str, dict[str, Any]] = {}
    for key, (layer, feat) in features.items():
        dec = tc.layers[layer].W_dec[feat]
        direction = dec if dec.ndim == 1 else dec.sum(0)
        values, top = (W_U @ direction).topk(min(top_logits, W_U.shape[0]))
        info[key] = {"top_logits": [[token_text(int(t)), float(v)] for t, v in zip(top, values, strict=True)]}
    if ids is None or not features or ids.numel() < 2:
        return info
    by_layer: dict[int, list[tuple[str, int]]] = {}
    for key, (layer, feat) in features.items():
        by_layer.setdefault(layer, []).append((key, feat))
    # per feature its best windows so far: (peak value, window start, peak position, values on the window)
    found: dict[str, list[tuple[float, int, int, torch.Tensor]]] = {key: [] for key in features}
    kept: dict[int, torch.Tensor] = {}
    window = max(2, min(window, model.config.max_len))
    pairs = [(point_name(tc.feature_input_hook, layer), keeper(kept, layer)) for layer in by_layer]
    with torch.no_grad(), hooks(model, pairs):
        for start in range(0, max(ids.numel() - 1, 1), window):
            model(ids[start:start + window][None])
            for layer, wanted in by_layer.items():
                acts = tc.encode(layer, kept[layer])  # (t, d_tc)
                for key, feat in wanted:
                    value, pos = acts[:, feat].max(0)
                    if float(value) > 0:  # equal peaks: the later window first
                        hits = [*found[key], (float(value), start, int(pos), acts[:, feat].clone())]
                        found[key] = sorted(hits, key=lambda hit: hit[:3], reverse=True)[:top_examples]
    for key, hits in found.items():
        examples = []
        for _, start, pos, acts in hits:
            chunk = ids[start:start + window]
            lo, hi = max(0, pos - 12), min(chunk.numel(), pos + 4)
            examples.append({"tokens": [token_text(int(t)) for t in chunk[lo:hi]],
                             "values": [round(float(v), 4) for v in acts[lo:hi]], "peak": pos - lo})
        info[key]["examples"] = examples
        info[key]["max"] = hits[0][0] if hits else 0.0
    return info

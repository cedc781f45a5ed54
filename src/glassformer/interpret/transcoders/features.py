"""What each transcoder feature does, for its page: the SAE feature pages' data (frequency, histogram, top
contexts, output tokens pushed up and down) for every layer, a feature's "direction" being everything it
writes to the residual stream (summed over the layers a cross-layer feature writes to).
"""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from ..sae.activations import ActivationSource
from ..sae.features import feature_summary
from .model import TrainableTranscoders


class LayerFeatures:
    """One layer of a transcoder set seen as :func:`feature_summary` reads an SAE: ``encode`` (..., d) ->
    (..., F), ``W_dec`` (F, d) what each feature writes, ``hook`` the point it reads."""

    def __init__(self, transcoders: TrainableTranscoders, layer: int, hook: str):
        c = transcoders.config
        self.transcoders, self.layer, self.hook = transcoders, layer, hook
        self.W_dec = transcoders.directions(layer).detach()  # (F, d)
        act = f"topk k={c.k}" if c.activation == "topk" else c.activation
        self.config = SimpleNamespace(d_sae=c.d_transcoder, d_in=c.d_model, kind=f"{c.kind} {act}")

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d) this layer's MLP inputs -> (..., F) its features."""
        return self.transcoders.encode_layer(x, self.layer)


@torch.no_grad()
def transcoder_feature_summaries(transcoders: TrainableTranscoders, model: nn.Module, tokenizer: Any,
                                 data: list[str | Path], windows: int = 64, *, context: int, batch: int = 32,
                                 val_fraction: float = 0.1, seed: int = 0, prefix_len: int | None = None,
                                 **options: Any) -> list[dict[str, Any]]:
    """One feature summary per layer (layer 0 first) from ``windows`` held-out windows of ``data``; each is
    :func:`feature_summary`'s dict plus "layer". ``options``: feature_summary's (top, before, after...)."""
    summaries = []
    for layer in range(transcoders.config.n_layers):
        hook = f"blocks.{layer}.{transcoders.config.input_hook}"
        source = ActivationSource(model, tokenizer, hook, data, context=context, batch=batch, split="val",
                                  val_fraction=val_fraction, seed=seed + layer, prefix_len=prefix_len)
        summary = feature_summary(LayerFeatures(transcoders, layer, hook), source, windows, residual=True, **options)
        summaries.append({**summary, "layer": layer})
    return summaries

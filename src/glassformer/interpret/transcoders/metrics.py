"""How good transcoders are on held-out text, per layer: ``nmse`` (‖y − ŷ‖² / ‖y − ȳ‖², the normalised MSE of
the MLP output), ``explained_variance`` (1 − nmse), ``l0`` (features per token), ``dead`` (never active on
the sample); and the model's loss as it is, with every MLP replaced by its transcoder (each reading the
replaced model's own MLP inputs) and with every MLP zeroed: ``ce_recovered`` = (zero − replaced) / (zero − clean).
"""

from typing import Any

import torch

from ...io.checks import check_int
from ..hooks import run_with_cache
from ..points import HookPoint
from ..sae.activations import ActivationSource
from ..sae.metrics import Totals, ce_figures, spliced_losses
from .model import TrainableTranscoders


def replacement_hooks(transcoders: TrainableTranscoders, inputs: list[str], outputs: list[str]) -> list:
    """Hooks that put ``transcoders`` in place of every MLP: each input hook encodes its layer, each output hook
    returns the prediction from the features of that layer and the ones before (a cross-layer set's)."""
    features: list[torch.Tensor | None] = [None] * len(inputs)
    seen: list[torch.Tensor | None] = [None] * len(inputs)

    def read(layer: int):
        def encode(x: torch.Tensor, hook: HookPoint) -> None:
            seen[layer] = x
            features[layer] = transcoders.encode_layer(x.float(), layer)
        return encode

    def write(layer: int):
        def decode(y: torch.Tensor, hook: HookPoint) -> torch.Tensor:
            return transcoders.decode_layer(features, layer, seen[layer].float()).to(y.dtype)
        return decode

    return ([(name, read(i)) for i, name in enumerate(inputs)] + [(name, write(i)) for i, name in enumerate(outputs)])


@torch.no_grad()
def evaluate_transcoders(transcoders: TrainableTranscoders, source: ActivationSource,
                         batches: int = 8) -> dict[str, Any]:
    """Every metric of the module docstring on ``batches`` model batches from a "val" ``source`` whose hooks are
    every layer's MLP input then every layer's MLP output; the ``ce_*`` ones only when the inputs have a loss.
    Per-layer figures are lists (layer 0 first); ``nmse_max`` is the worst layer's."""
    check_int("batches", batches, 1)
    L = transcoders.config.n_layers
    names = [p.name for p in source.points]
    inputs, outputs = names[:L], names[L:]
    model, totals = source.model, Totals()
    ce: list[tuple[float, float, float]] = []  # (clean, replaced, zeroed) per batch with a loss
    for _ in range(batches):
        batch = source.next_inputs()
        logits, kept = run_with_cache(model, *batch.args, names=names, **batch.kwargs)
        x = torch.stack([kept[name] for name in inputs], dim=2)[batch.valid].float()  # (N, L, d)
        y = torch.stack([kept[name] for name in outputs], dim=2)[batch.valid].double()
        f = transcoders.encode(x)
        totals.add(y, transcoders.decode(f, x).double(), f)
        ce += spliced_losses(model, batch, logits, replacement_hooks(transcoders, inputs, outputs), outputs)
    nmse = [float(e / v) if v > 0 else float("nan") for e, v in zip(totals.sq_err, totals.variance(), strict=True)]
    c = transcoders.config
    return {
        "tokens": totals.n, "nmse": nmse, "nmse_max": max(nmse), "explained_variance": [1 - v for v in nmse],
        "l0": (totals.l0 / totals.n).tolist(), "dead": (totals.fired == 0).sum(-1).tolist(),
        "d_transcoder": c.d_transcoder, "kind": c.kind, "activation": c.activation, **ce_figures(ce, "replaced")}

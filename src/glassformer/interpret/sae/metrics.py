"""How good an SAE is on held-out text: ``mse`` (per element), ``explained_variance``, ``l0``, ``dead`` /
``dense`` features (never / above ``dense_threshold``), and the model's loss as it is, with the SAE spliced
in and with the activation zeroed: ``ce_recovered`` = (zero − sae) / (zero − clean), 1 when the SAE costs nothing.
"""

from typing import Any

import torch
from torch import nn

from ...io.checks import check_int, check_number
from ..hooks import hooks, run_with_cache
from ..points import HookPoint
from .activations import ActivationSource, InputBatch
from .model import SparseAutoencoder
from .steer import reconstruction_hook


@torch.no_grad()
def reconstruction_metrics(sae: SparseAutoencoder, rows: torch.Tensor, dense_threshold: float = 0.1) -> dict[str, Any]:
    """mse, explained_variance, l0, dead, dense of ``sae`` on fixed activation rows (N, d_in)."""
    totals = Totals()
    for chunk in rows.split(4096):
        totals.add_sae(sae, chunk)
    return totals.sae_figures(dense_threshold)


class Totals:
    """Running sums over chunks of target rows (N, ..., d), their predictions and features (N, ..., F), per
    index of the middle axes (an SAE's rows have none; transcoders' rows a layer each)."""

    def __init__(self) -> None:
        self.n, self.sq_err, self.sq_sum, self.sum, self.l0, self.fired = 0, 0.0, 0.0, 0.0, 0.0, 0

    def add(self, target: torch.Tensor, predicted: torch.Tensor, features: torch.Tensor) -> None:
        """Add a chunk: ``target`` and ``predicted`` (N, ..., d) float64, ``features`` (N, ..., F)."""
        self.n += len(target)
        self.sq_err += (target - predicted).pow(2).sum((0, -1)).cpu()
        self.sq_sum += target.pow(2).sum((0, -1)).cpu()
        self.sum += target.sum(0).cpu()
        active = features != 0
        self.l0 += active.sum((0, -1)).double().cpu()
        self.fired += active.sum(0).cpu()

    def add_sae(self, sae: SparseAutoencoder, x: torch.Tensor) -> None:
        """Add a chunk of activation rows (N, d_in) as ``sae`` reconstructs them."""
        x = x.double()
        f = sae.encode(x.float())
        self.add(x, sae.decode(f).double(), f)

    def variance(self) -> torch.Tensor:
        """Σ‖x − x̄‖² over the rows so far (per index of the middle axes)."""
        return self.sq_sum - self.sum.pow(2).sum(-1) / self.n

    def sae_figures(self, dense_threshold: float) -> dict[str, Any]:
        """mse, explained_variance, l0, dead, dense of an SAE's rows ({} for none)."""
        if self.n == 0:
            return {}
        sq_err, variance, frequency = float(self.sq_err), float(self.variance()), self.fired.double() / self.n
        return {"tokens": self.n, "mse": sq_err / (self.n * len(self.sum)),
                "explained_variance": 1 - sq_err / variance if variance > 0 else float("nan"),
                "l0": float(self.l0) / self.n, "dead": int((self.fired == 0).sum()),
                "dense": int((frequency > dense_threshold).sum()), "d_sae": len(self.fired)}


@torch.no_grad()
def evaluate_sae(sae: SparseAutoencoder, source: ActivationSource, batches: int = 8,
                 dense_threshold: float = 0.1) -> dict[str, Any]:
    """Every metric of the module docstring on ``batches`` model batches from a "val" ``source``; the
    ``ce_*`` ones only when the model's inputs have a loss."""
    check_int("batches", batches, 1)
    check_number("dense_threshold", dense_threshold, 0.0, 1.0)
    model, name = source.model, source.point.name
    totals = Totals()
    ce: list[tuple[float, float, float]] = []  # (clean, with the SAE, zeroed) per batch with a loss
    for _ in range(batches):
        inputs = source.next_inputs()
        logits, kept = run_with_cache(model, *inputs.args, names=[name], **inputs.kwargs)
        totals.add_sae(sae, source.flat(kept[name])[inputs.valid])
        ce += spliced_losses(model, inputs, logits, [reconstruction_hook(sae)], [name])
    return {**totals.sae_figures(dense_threshold), **ce_figures(ce, "sae")}


def spliced_losses(model: nn.Module, inputs: InputBatch, logits: torch.Tensor, spliced: list,
                   zeroed: list[str]) -> list[tuple[float, float, float]]:
    """[(the loss of ``logits`` on ``inputs``, the loss with the ``spliced`` hooks, the loss with the hook points
    ``zeroed`` set to 0)], or [] when the inputs have no loss."""
    clean = inputs.loss(logits)
    if clean is None:
        return []

    def zero(x: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        return torch.zeros_like(x)

    with hooks(model, spliced):
        with_splice = inputs.loss(model(*inputs.args, **inputs.kwargs))
    with hooks(model, [(name, zero) for name in zeroed]):
        without = inputs.loss(model(*inputs.args, **inputs.kwargs))
    return [(float(clean), float(with_splice), float(without))]


def ce_figures(ce: list[tuple[float, float, float]], spliced: str) -> dict[str, float]:
    """The mean losses of :func:`spliced_losses`'s rows as ``ce_clean``, ``ce_{spliced}``, ``ce_zero`` and
    ``ce_recovered`` = (zero − spliced) / (zero − clean); {} for no rows."""
    if not ce:
        return {}
    clean, with_splice, zeroed = (sum(row[i] for row in ce) / len(ce) for i in range(3))
    gap = zeroed - clean
    return {"ce_clean": clean, f"ce_{spliced}": with_splice, "ce_zero": zeroed,
            "ce_recovered": (zeroed - with_splice) / gap if abs(gap) > 1e-9 else float("nan")}

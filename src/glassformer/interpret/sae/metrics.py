"""How good an SAE is on held-out text: ``mse`` (per element), ``explained_variance``, ``l0``, ``dead`` /
``dense`` features (never / above ``dense_threshold``), and the model's loss as it is, with the SAE spliced
in and with the activation zeroed: ``ce_recovered`` = (zero − sae) / (zero − clean), 1 when the SAE costs nothing.
"""

from typing import Any

import torch

from ...io.checks import check_int, check_number
from ..hooks import hooks
from ..points import HookPoint
from .activations import ActivationSource
from .model import SparseAutoencoder
from .steer import reconstruction_hook


@torch.no_grad()
def reconstruction_metrics(sae: SparseAutoencoder, rows: torch.Tensor, dense_threshold: float = 0.1) -> dict[str, Any]:
    """mse, explained_variance, l0, dead, dense of ``sae`` on fixed activation rows (N, d_in)."""
    totals = _Totals(sae.config.d_sae)
    for chunk in rows.split(4096):
        totals.add(sae, chunk)
    return totals.result(dense_threshold)


class _Totals:
    """Running sums for :func:`reconstruction_metrics` over chunks of rows."""

    def __init__(self, d_sae: int):
        self.n, self.sq_err, self.sq_sum, self.l0 = 0, 0.0, 0.0, 0.0
        self.sum: torch.Tensor | None = None
        self.fired = torch.zeros(d_sae, dtype=torch.long)

    def add(self, sae: SparseAutoencoder, x: torch.Tensor) -> None:
        x = x.double()
        f = sae.encode(x.float())
        recon = sae.decode(f).double()
        self.n += len(x)
        self.sq_err += float((x - recon).pow(2).sum())
        self.sq_sum += float(x.pow(2).sum())
        self.sum = x.sum(0) if self.sum is None else self.sum + x.sum(0)
        active = f > 0
        self.l0 += float(active.sum())
        self.fired += active.sum(0).cpu()

    def result(self, dense_threshold: float) -> dict[str, Any]:
        if self.n == 0:
            return {}
        d_in = len(self.sum)
        variance = self.sq_sum - float(self.sum.pow(2).sum()) / self.n  # Σ‖x − x̄‖²
        frequency = self.fired.double() / self.n
        return {"tokens": self.n, "mse": self.sq_err / (self.n * d_in),
                "explained_variance": 1 - self.sq_err / variance if variance > 0 else float("nan"),
                "l0": self.l0 / self.n, "dead": int((self.fired == 0).sum()),
                "dense": int((frequency > dense_threshold).sum()), "d_sae": len(self.fired)}


@torch.no_grad()
def evaluate_sae(sae: SparseAutoencoder, source: ActivationSource, batches: int = 8,
                 dense_threshold: float = 0.1) -> dict[str, Any]:
    """Every metric of the module docstring on ``batches`` model batches from a "val" ``source``; the
    ``ce_*`` ones only when the model's inputs have a loss."""
    check_int("batches", batches, 1)
    check_number("dense_threshold", dense_threshold, 0.0, 1.0)
    model, name = source.model, source.point.name
    totals = _Totals(sae.config.d_sae)
    ce: list[tuple[float, float, float]] = []  # (clean, with the SAE, zeroed) per batch with a loss
    kept: list[torch.Tensor] = []

    def keep(x: torch.Tensor, hook: HookPoint) -> None:
        kept.append(x.detach())

    def zero(x: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        return torch.zeros_like(x)

    for _ in range(batches):
        inputs = source.next_inputs()
        kept.clear()
        with hooks(model, [(name, keep)]):
            logits = model(*inputs.args, **inputs.kwargs)
        totals.add(sae, source.flat(kept[0])[inputs.valid])
        clean = inputs.loss(logits)
        if clean is None:
            continue
        with hooks(model, [reconstruction_hook(sae)]):
            spliced = inputs.loss(model(*inputs.args, **inputs.kwargs))
        with hooks(model, [(name, zero)]):
            ablated = inputs.loss(model(*inputs.args, **inputs.kwargs))
        ce.append((float(clean), float(spliced), float(ablated)))
    found = totals.result(dense_threshold)
    if ce:
        clean, spliced, ablated = (sum(row[i] for row in ce) / len(ce) for i in range(3))
        gap = ablated - clean
        found.update(ce_clean=clean, ce_sae=spliced, ce_zero=ablated,
                     ce_recovered=(ablated - spliced) / gap if abs(gap) > 1e-9 else float("nan"))
    return found

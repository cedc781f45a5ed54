"""How good an SAE is, measured on held-out text: reconstruction, sparsity, and the model's own loss.

- ``mse``: mean squared error per element, in the activation's units;
- ``explained_variance``: 1 − Σ‖x − x̂‖² / Σ‖x − x̄‖² over every held-out token (x̄ their mean);
- ``l0``: features active per token, on average;
- ``dead`` / ``dense``: features that never fire on the held-out tokens / fire on more than
  ``dense_threshold`` of them (SAELens's log-density > −1);
- ``ce_clean``, ``ce_sae``, ``ce_zero``: the model's loss as it is, with the hook's activation replaced
  by the reconstruction, and with it replaced by zeros; ``ce_recovered`` = (zero − sae) / (zero − clean):
  1 when splicing the SAE in costs nothing, 0 when it is as bad as deleting the activation.
"""

from __future__ import annotations

from typing import Any

import torch

from ...errors import check_int, check_number
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
    """Every metric of the module docstring on ``batches`` model batches drawn from ``source``
    (use a "val" source: text the SAE was not trained on).

    Returns {"tokens", "mse", "explained_variance", "l0", "dead", "dense", "d_sae", and when the
    model's inputs have a loss "ce_clean", "ce_sae", "ce_zero", "ce_recovered"}.
    """
    check_int("batches", batches, 1)
    check_number("dense_threshold", dense_threshold, 0.0, 1.0)
    model, name = source.model, source.point.name
    totals = _Totals(sae.config.d_sae)
    ce = {"clean": 0.0, "sae": 0.0, "zero": 0.0}
    with_loss = 0
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
        for key, value in (("clean", clean), ("sae", spliced), ("zero", ablated)):
            ce[key] += float(value)
        with_loss += 1
    found = totals.result(dense_threshold)
    if with_loss:
        clean, spliced, ablated = (ce[k] / with_loss for k in ("clean", "sae", "zero"))
        gap = ablated - clean
        found.update(ce_clean=clean, ce_sae=spliced, ce_zero=ablated,
                     ce_recovered=(ablated - spliced) / gap if abs(gap) > 1e-9 else float("nan"))
    return found

"""Attribution patching (Nanda 2023): activation patching's first-order estimate for every hook point at
once, from three passes (a clean forward; a corrupted forward and backward):

    metric(corrupted, a := clean a) - metric(corrupted)  ≈  (a_clean - a_corrupted) · ∂metric/∂a |corrupted

Close where the metric is near linear in the activation; :func:`exact_head_patching` checks it.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import GlassformerError
from .circuits import induction_task, metric_value
from .detectors import repeated_tokens
from .hooks import Hooks, run_with_cache
from .patching import Inputs, Metric, _as_tuple, patching_effects
from .points import HookPoint, NameSpec

ATTRIBUTION = "attribution.json"  # a run folder's per-head comparison, drawn by the run page


@dataclass
class Attribution:
    """What :func:`attribution_patching` estimates, metric(patched) - metric(corrupted) (docs/interpret.md,
    "One sign"), by hook name: of
    patching one (query) position (``by_position`` (T,)), one head (``by_head`` (h,)), the whole point (``total``)."""

    by_position: dict[str, torch.Tensor]
    by_head: dict[str, torch.Tensor]
    total: dict[str, float]
    clean_metric: float
    corrupted_metric: float
    points: dict[str, HookPoint]

    def heads(self, kind: str = "z", stack: str = "blocks") -> torch.Tensor:
        """(L, h): every head's estimate, read from ``kind`` (default each head's output ``hook_z``)."""
        names = [n for n, p in self.points.items() if p.short == kind and p.stack == stack and n in self.by_head]
        if not names:
            raise GlassformerError(f"no per-head point {kind!r} in {stack} was estimated (names= left it out?)")
        return torch.stack([self.by_head[n] for n in names])

    def layers(self, kind: str = "resid_pre", stack: str = "blocks") -> torch.Tensor:
        """(L,): each layer's estimate for the whole point ``kind`` (e.g. "resid_pre", "attn_out", "mlp_out")."""
        names = [n for n, p in self.points.items() if p.short == kind and p.stack == stack]
        if not names:
            raise GlassformerError(f"no point {kind!r} in {stack} was estimated")
        return torch.tensor([self.total[n] for n in names])


def attribution_patching(model: nn.Module, clean: Inputs, corrupted: Inputs, metric: Metric, *,
                         names: NameSpec = None, **kwargs: Any) -> Attribution:
    """Estimate activation patching (clean into corrupted, inputs of one shape) for every hook point in
    ``names`` (None: all) at once; ``metric``: output -> a differentiable 0-dim tensor. Signs as
    docs/interpret.md's "One sign" states."""
    clean, corrupted = _as_tuple(clean), _as_tuple(corrupted)
    with torch.no_grad():
        clean_out, clean_cache = run_with_cache(model, *clean, names=names, **kwargs)
        clean_metric = float(metric_value(metric, clean_out))
    kept: dict[str, torch.Tensor] = {}

    def keep(x: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        # a copy in the graph (a new leaf where needed) that the forward goes on from: every path downstream
        copy = x.clone() if x.requires_grad else x.detach().clone().requires_grad_(True)
        kept[hook.name] = copy
        return copy

    with torch.enable_grad(), Hooks(model, [(names, keep)]):
        value = metric_value(metric, model(*corrupted, **kwargs), differentiable=True)
    # zeros where the metric does not depend on a point (e.g. a decoder-only metric and the encoder's last norm)
    grads = torch.autograd.grad(value, list(kept.values()), materialize_grads=True)
    by_position, by_head, total = {}, {}, {}
    for name, grad in zip(kept, grads):
        tap = clean_cache.points[name].module
        before, after = kept[name].detach(), clean_cache[name].to(grad.dtype)
        product = torch.where(torch.isfinite(before) & torch.isfinite(after), (after - before) * grad, 0.0).double()
        for table, axis in ((by_position, tap.position_axis), (by_head, tap.head_axis)):  # summed over the rest
            if axis is not None:  # masked scores (-inf in both runs) count 0
                table[name] = product.sum([a for a in range(product.dim()) if a != axis]).float()
        total[name] = float(by_position[name].double().sum())
    return Attribution(by_position, by_head, total, clean_metric, float(value.detach()),
                       {n: clean_cache.points[n] for n in kept})


@torch.no_grad()
def exact_head_patching(model: nn.Module, clean: Inputs, corrupted: Inputs, metric: Metric, *,
                        kind: str = "z", **kwargs: Any) -> torch.Tensor:
    """(L, h): metric(patched) - metric(corrupted) when one head's ``kind`` (default its output ``hook_z``,
    at every position) comes from the clean run; one forward per head (:func:`patching_effects`; docs/interpret.md,
    "One sign")."""
    return patching_effects(model, clean, corrupted, metric, what=kind, per="head", **kwargs)


def correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson's correlation of two tensors' entries (nan when one is constant)."""
    a, b = a.flatten().double(), b.flatten().double()
    a, b = a - a.mean(), b - b.mean()
    denominator = (a.norm() * b.norm()).item()
    return float((a @ b).item() / denominator) if denominator > 0 else float("nan")


def top_heads(effects: torch.Tensor, k: int = 3, key: Callable[[torch.Tensor], torch.Tensor] = torch.abs,
              ) -> list[tuple[int, int, float]]:
    """The ``k`` heads of an (L, h) table with the largest ``key(effect)`` (default |effect|):
    [(layer, head, effect), ...], largest first."""
    flat = key(effects).flatten()
    order = flat.argsort(descending=True)[:k].tolist()
    h = effects.shape[1]
    return [(i // h, i % h, float(effects.flatten()[i])) for i in order]


def induction_patching(model: nn.Module, length: int = 20, batch: int = 16, *, seed: int = 1, low: int = 0,
                       bos: int | None = None) -> dict[str, Any]:
    """Attribution patching against exact patching, per head, on the induction task: {"estimate", "exact"
    (L, h), "correlation", "top_estimate", "top_exact", "clean_metric", "corrupted_metric"}."""
    vocab = model.config.vocab_size
    repeated = repeated_tokens(vocab, length, batch, seed=seed, low=low, bos=bos).to(next(model.parameters()).device)
    clean, corrupted, metric = induction_task(repeated, length, 0 if bos is None else 1, low, vocab, seed + 1)
    result = attribution_patching(model, clean, corrupted, metric, names="z")
    estimate, exact = result.heads(), exact_head_patching(model, clean, corrupted, metric)
    return {"estimate": estimate.tolist(), "exact": exact.tolist(), "correlation": correlation(estimate, exact),
            "top_estimate": top_heads(estimate), "top_exact": top_heads(exact),
            "clean_metric": result.clean_metric, "corrupted_metric": result.corrupted_metric}

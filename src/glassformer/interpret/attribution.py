"""Attribution patching: activation patching's linear estimate for every hook point at once (Nanda 2023).

Activation patching runs the model once per patched activation. Its first-order Taylor estimate needs
one forward on the clean input (its activations) and one forward and backward on the corrupted input
(its activations and the metric's gradient with respect to each of them):

    metric(corrupted, a := clean a) - metric(corrupted)  ≈  (a_clean - a_corrupted) · ∂metric/∂a |corrupted

so every hook point, position, layer and head gets its estimate from those three passes. Where the
metric is close to linear in an activation (a head's output, the residual stream) the estimate tracks
the exact effect; where it is not (attention patterns, a saturated softmax) it can miss — which is why
:func:`exact_head_patching` is here to check it against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import GlassformerError
from .hooks import Hooks, run_with_cache
from .patching import Inputs, Metric, _as_tuple, patching_effects
from .points import HookPoint, NameSpec, resolve

ATTRIBUTION = "attribution.json"  # a run folder's per-head comparison, drawn by the run page


@dataclass
class Attribution:
    """What :func:`attribution_patching` estimates; every number is metric(patched) - metric(corrupted).

    Attributes:
        by_position: {hook name: (T,)} the estimate of patching that point at one (query) position.
        by_head: {hook name: (h,)} for per-head points (q, k, v, z, pattern...): patching one head, all positions.
        total: {hook name: float} patching the whole point.
        clean_metric, corrupted_metric: the metric of the two unpatched runs.
        points: {hook name: :class:`HookPoint`} of the estimated points, in forward order.
    """

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


def _estimate(point: HookPoint, delta_times_grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(by position (T,), by head (h,) or None) sums of ``(clean - corrupted) * grad`` over every other axis."""
    x = delta_times_grad.double()
    positions = point.position_axis
    by_position = x.sum([a for a in range(x.dim()) if a != positions])
    by_head = None
    if point.head_axis is not None:
        by_head = x.sum([a for a in range(x.dim()) if a != point.head_axis])
    return by_position.float(), None if by_head is None else by_head.float()


def _checked(value: Any, needs_grad: bool) -> torch.Tensor:
    """``value`` when it is a 0-dim tensor (computed from the output, when ``needs_grad``), else an error."""
    if not isinstance(value, torch.Tensor) or value.dim() != 0 or (needs_grad and not value.requires_grad):
        shown = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise GlassformerError(f"metric must return a 0-dim tensor computed from the logits (differentiable), "
                               f"got {shown}")
    return value


def attribution_patching(model: nn.Module, clean: Inputs, corrupted: Inputs, metric: Metric, *,
                         names: NameSpec = None, **kwargs: Any) -> Attribution:
    """Estimate activation patching (clean into corrupted) for every hook point in ``names`` at once.

    Three passes: a forward on ``clean`` caching the points, and a forward and backward on ``corrupted``
    keeping each point's activation and the gradient of ``metric`` with respect to it.

    Args:
        model: a TransformerLM or EncoderDecoder, in eval mode (dropout off).
        clean, corrupted: inputs of the same shape (a tensor, or a tuple such as (src, tgt_in)).
        metric: output (logits) -> a 0-dim tensor, differentiable (e.g. a logit difference, a loss).
        names: the points to estimate (as ``run_with_cache`` takes them); None: every point.
        kwargs: passed to every forward (``pad``, ``prefix_len``...).
    Returns:
        An :class:`Attribution`; ``.heads()`` gives the (L, h) head estimates that
        :func:`exact_head_patching` measures exactly.
    Raises:
        GlassformerError when ``metric`` does not return a 0-dim tensor that depends on the output.
    """
    clean, corrupted = _as_tuple(clean), _as_tuple(corrupted)
    with torch.no_grad():
        clean_out, clean_cache = run_with_cache(model, *clean, names=names, **kwargs)
        clean_metric = float(_checked(metric(clean_out), needs_grad=False))
    kept: dict[str, torch.Tensor] = {}

    def keep(x: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        # a copy in the graph (a new leaf where nothing before needs gradients) that the forward goes on from,
        # so the gradient with respect to it takes in every path downstream
        copy = x.clone() if x.requires_grad else x.detach().clone().requires_grad_(True)
        kept[hook.name] = copy
        return copy

    points_all = clean_cache.points
    chosen = resolve(points_all, names)
    with torch.enable_grad(), Hooks(model, [([p.name for p in chosen], keep)]):
        value = _checked(metric(model(*corrupted, **kwargs)), needs_grad=True)
    names_kept = list(kept)
    grads = torch.autograd.grad(value, [kept[n] for n in names_kept], allow_unused=True)
    by_position, by_head, total = {}, {}, {}
    for name, grad in zip(names_kept, grads):
        point = points_all[name]
        if grad is None:  # the metric does not depend on it (e.g. a decoder-only metric and the encoder's last norm)
            grad = torch.zeros_like(kept[name])
        before, after = kept[name].detach(), clean_cache[name].to(grad.dtype)
        product = torch.where(torch.isfinite(before) & torch.isfinite(after), (after - before) * grad, 0.0)
        by_position[name], head = _estimate(point, product)  # masked scores (-inf in both runs) count 0
        if head is not None:
            by_head[name] = head
        total[name] = float(by_position[name].double().sum())
    return Attribution(by_position, by_head, total, clean_metric, float(value.detach()),
                       {n: points_all[n] for n in names_kept})


@torch.no_grad()
def exact_head_patching(model: nn.Module, clean: Inputs, corrupted: Inputs, metric: Metric, *,
                        kind: str = "z", **kwargs: Any) -> torch.Tensor:
    """(L, h): metric(patched) - metric(corrupted) when one head's ``kind`` (default its output ``hook_z``,
    at every position) comes from the clean run; one forward per head (:func:`patching_effects`)."""
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
    """Attribution patching against exact patching, per head, on the induction task.

    Clean rows are random tokens repeated twice (:func:`~glassformer.interpret.repeated_tokens`); the
    corrupted rows replace the first copy with other random tokens, so the second copy can no longer be
    predicted by looking back. The metric is the mean log-probability of the second copy's next tokens
    (as in the clean rows).

    Returns:
        {"estimate", "exact": (L, h) lists, "correlation" (Pearson, over heads), "top_estimate",
        "top_exact": the three heads of largest |effect| [(layer, head, effect)], "clean_metric",
        "corrupted_metric"}.
    """
    from .detectors import repeated_tokens

    device = next(model.parameters()).device
    clean = repeated_tokens(model.config.vocab_size, length, batch, seed=seed, low=low, bos=bos).to(device)
    start = 0 if bos is None else 1
    other = torch.randint(low, model.config.vocab_size, (batch, length),
                          generator=torch.Generator().manual_seed(seed + 1))
    corrupted = clean.clone()
    corrupted[:, start:start + length] = other.to(device)
    targets = clean[:, start + length + 1:]  # the second copy's tokens after its first

    def metric(logits: torch.Tensor) -> torch.Tensor:
        picked = logits[:, start + length:-1].float().log_softmax(-1)
        return picked.gather(-1, targets[..., None]).mean()

    result = attribution_patching(model, clean, corrupted, metric, names="z")
    estimate, exact = result.heads(), exact_head_patching(model, clean, corrupted, metric)
    return {"estimate": estimate.tolist(), "exact": exact.tolist(), "correlation": correlation(estimate, exact),
            "top_estimate": top_heads(estimate), "top_exact": top_heads(exact),
            "clean_metric": result.clean_metric, "corrupted_metric": result.corrupted_metric}

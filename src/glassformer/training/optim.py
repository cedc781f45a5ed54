"""AdamW with decoupled weight decay on matrices only, and the learning-rate schedules."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import GlassformerError
from ..nn.positions import LearnedPositions

SCHEDULES = ("cosine", "noam", "constant")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: weight matrices decay; biases, norm gains and embeddings do not.

    Decay pulls weights toward zero; for a bias, a norm's gain or an embedding row (updated only
    when its token occurs) that shrinkage is not a useful prior (the BERT and GPT-2 recipes).
    A parameter shared by two modules is listed once.
    """
    embeddings = {id(p) for m in model.modules() if isinstance(m, (nn.Embedding, LearnedPositions))
                  for p in m.parameters(recurse=False)}
    decay, no_decay, seen = [], [], set()
    for p in model.parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 and id(p) not in embeddings else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                   eps: float = 1e-8, fused: bool | None = None) -> torch.optim.AdamW:
    """AdamW over :func:`param_groups`; ``fused=None`` uses the fused kernel where this torch has it
    for the parameters' device (one kernel for all parameters instead of a loop of small ones)."""
    groups = param_groups(model, weight_decay)
    if fused is None:
        try:
            return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=True)
        except (RuntimeError, ValueError, TypeError):
            fused = False
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def lr_at(step: int, schedule: str, lr: float, warmup_steps: int = 0, decay_steps: int | None = None,
          min_lr: float = 0.0) -> float:
    """The learning rate of update number ``step`` (0-based).

    cosine: linear warmup ``lr·(step+1)/(warmup+1)`` (nanoGPT's), then a half cosine from ``lr`` down
        to ``min_lr`` at ``decay_steps``, then ``min_lr``.
    noam: the 2017 paper's ``d^-0.5 · min(s^-0.5, s·warmup^-1.5)`` (s = step + 1), scaled so the peak,
        reached at s = warmup, is ``lr``: ``lr · min(s/warmup, sqrt(warmup/s))``.
    constant: ``lr`` after the same linear warmup as cosine.
    """
    if schedule not in SCHEDULES:
        raise GlassformerError(f"lr_schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule == "noam":
        s, w = step + 1, max(warmup_steps, 1)
        return lr * min(s / w, math.sqrt(w / s))
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    if schedule == "constant" or decay_steps is None:
        return lr
    if step >= decay_steps:
        return min_lr
    ratio = (step - warmup_steps) / max(decay_steps - warmup_steps, 1)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

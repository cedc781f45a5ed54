"""The optimizers (AdamW, or Muon on the blocks' matrices with AdamW on the rest) and learning-rate schedules."""

import math
from typing import Any

import torch
from torch import nn

from ..errors import GlassformerError
from ..nn.block import TransformerBlock
from ..nn.positions import LearnedPositions
from ..validate import check_choice
from .muon import Muon

SCHEDULES = ("cosine", "noam", "constant", "wsd")
OPTIMIZERS = ("adamw", "muon")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups, each parameter once: matrices decay; biases, norm gains and embeddings do not."""
    embeddings = {id(p) for m in model.modules() if isinstance(m, (nn.Embedding, LearnedPositions))
                  for p in m.parameters(recurse=False)}
    decay, no_decay = [], []
    for p in model.parameters():  # a shared parameter comes once
        if p.requires_grad:
            (decay if p.dim() >= 2 and id(p) not in embeddings else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def muon_params(model: nn.Module) -> list[nn.Parameter]:
    """The hidden weight matrices Muon updates: the Transformer blocks' 2-D parameters, each once, except
    any a block shares with a module outside the blocks (those are AdamW's)."""
    blocks = [m for m in model.modules() if isinstance(m, TransformerBlock)]
    inside = {id(m) for block in blocks for m in block.modules()}
    outside = {id(p) for m in model.modules() if id(m) not in inside for p in m.parameters(recurse=False)}
    chosen = {id(p): p for block in blocks for p in block.parameters()
              if p.requires_grad and p.dim() == 2 and id(p) not in outside}
    return list(chosen.values())


class Optimizers:
    """Several optimizers (``adamw=..., muon=...``) that the trainer steps, schedules and checkpoints as one."""

    def __init__(self, **parts: torch.optim.Optimizer):
        self.parts = parts

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """Every parameter group of every optimizer (not copies)."""
        return [group for part in self.parts.values() for group in part.param_groups]

    @property
    def state(self) -> dict[torch.Tensor, dict[str, Any]]:
        """Parameter -> its optimizer state, over all the optimizers (a new dict, to read)."""
        return {p: s for part in self.parts.values() for p, s in part.state.items()}

    def step(self) -> None:
        """One update of every parameter, each by its own optimizer."""
        for part in self.parts.values():
            part.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient."""
        for part in self.parts.values():
            part.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, dict[str, Any]]:
        """{name: that optimizer's state_dict()} (weights_only-loadable)."""
        return {name: part.state_dict() for name, part in self.parts.items()}

    def load_state_dict(self, state: dict[str, dict[str, Any]]) -> None:
        """Restore what :meth:`state_dict` returned; a GlassformerError when it holds other optimizers."""
        if not isinstance(state, dict) or sorted(state, key=str) != sorted(self.parts):
            got = sorted(state, key=str) if isinstance(state, dict) else type(state).__name__
            raise GlassformerError(f"optimizer state must hold the states of {sorted(self.parts)}, got {got} "
                                   f"(saved with another optimizer setting?)")
        for name, part in self.parts.items():
            part.load_state_dict(state[name])


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                   eps: float = 1e-8, fused: bool | None = None, kind: str = "adamw") -> torch.optim.AdamW | Optimizers:
    """The optimizer ``kind`` for ``model``: "adamw" over :func:`param_groups` (``fused=None``: where
    available), or "muon": :class:`Optimizers` of Muon on :func:`muon_params` (its updates scaled to
    AdamW's size, so one ``lr`` drives both) and AdamW on the rest; not on FSDP-sharded weights."""
    groups = param_groups(model, weight_decay)
    if check_choice("optimizer", kind, OPTIMIZERS) == "adamw":
        return _adamw(groups, lr, betas, eps, fused)
    if not hasattr(torch.optim, "Muon"):
        raise GlassformerError(f"optimizer 'muon' needs torch.optim.Muon, which torch {torch.__version__} does not "
                               f"have; upgrade torch or use optimizer 'adamw'")
    matrices = muon_params(model)
    if not matrices:
        raise GlassformerError("optimizer 'muon' needs Transformer blocks with weight matrices; the model has none")
    if any(hasattr(p, "to_local") for p in matrices):  # DTensor: this process holds a shard
        raise GlassformerError("optimizer 'muon' cannot update FSDP-sharded weights; use parallel 'ddp' or "
                               "optimizer 'adamw'")
    taken = {id(p) for p in matrices}
    groups = [{**g, "params": [p for p in g["params"] if id(p) not in taken]} for g in groups]
    groups = [g for g in groups if g["params"]]
    muon = Muon(matrices, lr=lr, weight_decay=weight_decay, adjust_lr_fn="match_rms_adamw")
    return Optimizers(adamw=_adamw(groups, lr, betas, eps, fused), muon=muon)


def _adamw(groups: list[dict], lr: float, betas: tuple[float, float], eps: float,
           fused: bool | None) -> torch.optim.AdamW:
    if fused is None:
        try:
            return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=True)
        except (RuntimeError, ValueError, TypeError):
            fused = False
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def lr_at(step: int, schedule: str, lr: float, warmup_steps: int = 0, decay_steps: int | None = None,
          min_lr: float = 0.0, cooldown: float = 0.2) -> float:
    """The learning rate of update number ``step`` (0-based).

    cosine: linear warmup ``lr·(step+1)/(warmup+1)``, then a half cosine down to ``min_lr`` at ``decay_steps``.
    noam: the 2017 paper's, scaled to peak at ``lr``: ``lr · min(s/warmup, sqrt(warmup/s))`` (s = step + 1).
    constant: ``lr`` after the same warmup as cosine.
    wsd (warmup-stable-decay, Hägele et al. 2024; the modded-nanogpt records): the same warmup, ``lr`` held,
    then a straight line down to ``min_lr`` at ``decay_steps`` over the last ``cooldown`` fraction of the
    steps after warmup (``cooldown=1``: a linear decay from the peak).
    """
    if check_choice("lr_schedule", schedule, SCHEDULES) == "noam":
        s, w = step + 1, max(warmup_steps, 1)
        return lr * min(s / w, math.sqrt(w / s))
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    if schedule == "constant" or decay_steps is None:
        return lr
    if step >= decay_steps:
        return min_lr
    ratio = (step - warmup_steps) / max(decay_steps - warmup_steps, 1)
    if schedule == "wsd":  # the fraction of the cooldown done: 0 until it starts, 1 at decay_steps
        done = min(max((ratio - (1.0 - cooldown)) / cooldown, 0.0), 1.0) if cooldown > 0 else 0.0
        return lr - done * (lr - min_lr)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

"""Exact resume: what a checkpoint's ``train_state.pt`` holds besides the weights, how a trainer is
restored from it, and how a run's folder is put in order before training starts (or restarts)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..errors import GlassformerError
from ..fileio import atomic_write_text
from ..state_check import check_resume_matches, check_train_state
from .checkpoint import STATE, load_checkpoint
from .distributed import full_optimizer_state, load_full_state
from .metrics import METRICS, metrics_line, read_metrics
from .run_dir import clear_run, find_resumable, recover_run

if TYPE_CHECKING:
    from .loop import Trainer

STATE_FORMAT = 1


def train_state(trainer: Trainer) -> dict[str, Any]:
    """What resuming needs besides the weights (all plain tensors/numbers: weights_only-loadable).
    Under FSDP a collective that gathers the optimizer state: every rank calls it, rank 0 gets it all."""
    state = {"format": STATE_FORMAT, "step": trainer.step, "best_val": trainer.best_val,
             "best_step": trainer.best_step, "tokens_seen": trainer.tokens_seen,
             "optimizer": full_optimizer_state(trainer.model, trainer.optimizer),
             "rng_cpu": torch.get_rng_state(), "precision": trainer.precision.name}
    if trainer.scaler.is_enabled():
        state["scaler"] = trainer.scaler.state_dict()
    if torch.cuda.is_available() and trainer.dist.device.type == "cuda":
        state["rng_cuda"] = torch.cuda.get_rng_state(trainer.dist.device)
    return state


def restore(trainer: Trainer, path: str | Path | None = None) -> bool:
    """Restore ``trainer``'s weights, optimizer, RNG and step from ``path`` (default: the newest
    complete checkpoint of its ``out_dir``, see :func:`~glassformer.training.run_dir.find_resumable`).

    Returns False when there is nothing to resume from (no checkpoint at all).
    Raises:
        BadFileError when ``out_dir`` holds checkpoints but none that can be resumed.
    """
    if path is None:
        found = find_resumable(trainer.out)
        if found is None:
            return False
        path = found
    path = Path(path)
    if not path.exists():
        return False
    checkpoint = load_checkpoint(path, with_state=True)
    check_resume_matches(path, trainer.model.config, checkpoint.model.config, checkpoint.tokenizer.kind,
                         checkpoint.training, trainer.config.to_dict())
    state = checkpoint.train_state
    saved = state.get("optimizer")
    saved_kind = "muon" if isinstance(saved, dict) and set(saved) == {"adamw", "muon"} else "adamw"
    if saved_kind != trainer.config.optimizer:
        raise GlassformerError(f"cannot resume from {str(path)!r}: it was trained with optimizer {saved_kind!r}, "
                               f"this run uses {trainer.config.optimizer!r}")
    # every shape, dtype and type checked before the optimizer's kernels or the RNG see a tensor
    check_train_state(state, path / STATE, trainer.model, trainer.optimizer, STATE_FORMAT,
                      trainer.scaler.is_enabled())
    load_full_state(trainer.model, trainer.optimizer, checkpoint.model.state_dict(), state["optimizer"])
    if "scaler" in state and trainer.scaler.is_enabled():
        trainer.scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng_cpu"])
    if "rng_cuda" in state and trainer.dist.device.type == "cuda":
        torch.cuda.set_rng_state(state["rng_cuda"], trainer.dist.device)
    trainer.step, trainer.best_val = int(state["step"]), float(state["best_val"])
    trainer.tokens_seen = int(state["tokens_seen"])
    trainer.best_step = int(state.get("best_step", -1))
    trainer.history = [h for h in read_metrics(trainer.out / METRICS) if h["step"] <= trainer.step]
    trainer.last_checkpoint = path
    trainer.resumed_from = {"step": trainer.step, "checkpoint": str(path), "training": dict(checkpoint.training or {})}
    return True


def start_run(trainer: Trainer) -> None:
    """Resume (when asked) and, on rank 0, put ``out_dir`` in order: resuming repairs the pointers
    and removes leftovers of a crash; starting afresh removes an earlier run's checkpoints. Then
    ``metrics.jsonl`` is rewritten (atomically) with the records up to the resumed step."""
    resumed = trainer.resume() if trainer.config.resume else False
    if not trainer.dist.is_main:
        return
    if resumed:
        trainer.last_checkpoint = recover_run(trainer.out, trainer.last_checkpoint, trainer.best_step)
    else:
        clear_run(trainer.out)
    atomic_write_text(trainer.out / METRICS, "".join(metrics_line(h) for h in trainer.history))
    if trainer.microscope is not None:  # the same rules for microscope.jsonl
        trainer.microscope.start(trainer.out, trainer.step, trainer.model)

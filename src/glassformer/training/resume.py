"""Exact resume: the trainer's counters (:class:`TrainState`), what a checkpoint's ``train_state.pt``
holds besides the weights, and how a run is restored from it and its folder put in order.

Pure functions of what they are given: nothing here reads or writes a Trainer (the Trainer calls
them and keeps what they return), and nothing imports the training loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import GlassformerError
from ..fileio import atomic_write_text
from ..state_check import check_resume_matches, check_train_state
from .checkpoint import STATE, load_checkpoint
from .config import TrainConfig
from .distributed import full_optimizer_state, load_full_state
from .metrics import METRICS, metrics_line, read_metrics
from .run_dir import clear_run, find_resumable, recover_run

STATE_FORMAT = 1


@dataclass
class TrainState:
    """The counters of a training run that a checkpoint carries (the Trainer owns one).

    Attributes:
        step: optimiser updates done; tokens_seen: training tokens of those steps, over all processes;
        best_val: the lowest validation loss seen (inf before the first evaluation);
        best_step: the step of ``best_val``'s checkpoint (-1 before the first).
    """

    step: int = 0
    best_val: float = math.inf
    best_step: int = -1
    tokens_seen: int = 0


@dataclass
class Resumed:
    """What :func:`restore` found: the counters, the ``metrics.jsonl`` records up to the resumed step,
    the checkpoint folder, and the training config it was written under."""

    state: TrainState
    history: list[dict[str, Any]]
    checkpoint: Path
    training: dict[str, Any] = field(default_factory=dict)


def state_to_dict(state: TrainState, model: nn.Module, optimizer: torch.optim.Optimizer,
                  scaler: torch.amp.GradScaler, precision: str, device: torch.device) -> dict[str, Any]:
    """What resuming needs besides the weights (all plain tensors/numbers: weights_only-loadable):
    ``state``'s counters, the optimizer's state, the RNG states, ``precision``'s name and (float16) the
    loss scaler. Under FSDP a collective that gathers the optimizer state: every rank calls it, rank 0
    gets it all."""
    saved = {"format": STATE_FORMAT, "step": state.step, "best_val": state.best_val, "best_step": state.best_step,
             "tokens_seen": state.tokens_seen, "optimizer": full_optimizer_state(model, optimizer),
             "rng_cpu": torch.get_rng_state(), "precision": precision}
    if scaler.is_enabled():
        saved["scaler"] = scaler.state_dict()
    if torch.cuda.is_available() and device.type == "cuda":
        saved["rng_cuda"] = torch.cuda.get_rng_state(device)
    return saved


def restore(path: str | Path | None, out: Path, config: TrainConfig, model: nn.Module,
            optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, device: torch.device) -> Resumed | None:
    """Load a checkpoint's weights, optimizer state, loss scaler and RNG states into ``model``,
    ``optimizer``, ``scaler`` and torch's generators, and return its counters and history.

    Args:
        path: the checkpoint folder; None: the newest complete one of ``out``
            (:func:`~glassformer.training.run_dir.find_resumable`).
        out: the run's folder (its ``metrics.jsonl`` gives the history); config: the run's TrainConfig,
            which the checkpoint's must match (:func:`~glassformer.state_check.check_resume_matches`).
    Returns:
        :class:`Resumed`, or None when there is nothing to resume from (no checkpoint at all).
    Raises:
        BadFileError when ``out`` holds checkpoints but none that can be resumed, or the state does not
        fit ``model`` and ``optimizer`` (every shape, dtype and type checked before a kernel sees it).
    """
    if path is None:
        path = find_resumable(out)
        if path is None:
            return None
    path = Path(path)
    if not path.exists():
        return None
    checkpoint = load_checkpoint(path, with_state=True)
    check_resume_matches(path, model.config, checkpoint.model.config, checkpoint.tokenizer.kind,
                         checkpoint.training, config.to_dict())
    saved = checkpoint.train_state
    optimizer_state = saved.get("optimizer")
    saved_kind = "muon" if isinstance(optimizer_state, dict) and set(optimizer_state) == {"adamw", "muon"} else "adamw"
    if saved_kind != config.optimizer:
        raise GlassformerError(f"cannot resume from {str(path)!r}: it was trained with optimizer {saved_kind!r}, "
                               f"this run uses {config.optimizer!r}")
    # every shape, dtype and type checked before the optimizer's kernels or the RNG see a tensor
    check_train_state(saved, path / STATE, model, optimizer, STATE_FORMAT, scaler.is_enabled())
    load_full_state(model, optimizer, checkpoint.model.state_dict(), saved["optimizer"])
    if "scaler" in saved and scaler.is_enabled():
        scaler.load_state_dict(saved["scaler"])
    torch.set_rng_state(saved["rng_cpu"])
    if "rng_cuda" in saved and device.type == "cuda":
        torch.cuda.set_rng_state(saved["rng_cuda"], device)
    state = TrainState(step=int(saved["step"]), best_val=float(saved["best_val"]),
                       best_step=int(saved.get("best_step", -1)), tokens_seen=int(saved["tokens_seen"]))
    history = [h for h in read_metrics(out / METRICS) if h["step"] <= state.step]
    return Resumed(state, history, path, dict(checkpoint.training or {}))


def tidy_run_dir(out: Path, resumed: Path | None, best_step: int, history: list[dict[str, Any]]) -> Path | None:
    """Put ``out`` in order before training (rank 0): a run resumed from the checkpoint folder
    ``resumed`` gets its pointers repaired (``best`` at ``best_step``'s folder) and a crash's leftovers
    removed; a fresh run (``resumed`` None) removes an earlier run's checkpoints. Then
    ``metrics.jsonl`` is rewritten (atomically) with ``history``. Returns the path naming the last good
    checkpoint (None for a fresh run)."""
    if resumed is None:
        clear_run(out)
    last = recover_run(out, resumed, best_step) if resumed is not None else None
    atomic_write_text(out / METRICS, "".join(metrics_line(h) for h in history))
    return last

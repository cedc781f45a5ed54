"""Exact resume: the trainer's counters, what ``train_state.pt`` holds, and how a run is restored from it."""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import GlassformerError
from ..io.fileio import atomic_write
from ..io.state_check import check_resume_matches, check_train_state
from .checkpoint import load_checkpoint
from .config import TrainConfig
from .distributed import full_optimizer_state, load_full_state
from .metrics import METRICS, metrics_line, read_metrics
from .run_dir import STATE, clear_run, find_resumable, recover_run

STATE_FORMAT = 1


@dataclass
class TrainState:
    """The counters a checkpoint carries (best_val: inf and best_step: -1 before the first evaluation)."""

    step: int = 0
    best_val: float = math.inf
    best_step: int = -1
    tokens_seen: int = 0
    kept: list[int] = field(default_factory=list)  # the steps of a kept series (keep_checkpoints) so far


@dataclass
class Resumed:
    """What :func:`restore` found: counters, history up to the step, the folder, and its training config."""

    state: TrainState
    history: list[dict[str, Any]]
    checkpoint: Path
    training: dict[str, Any] = field(default_factory=dict)


def state_to_dict(state: TrainState, model: nn.Module, optimizer: torch.optim.Optimizer,
                  scaler: torch.amp.GradScaler, precision: str, device: torch.device) -> dict[str, Any]:
    """What resuming needs besides the weights (weights_only-loadable): the counters, optimizer and RNG
    states, the precision and (float16) the loss scaler; under FSDP a collective (rank 0 gets it all)."""
    saved = {"format": STATE_FORMAT, "step": state.step, "best_val": state.best_val, "best_step": state.best_step,
             "tokens_seen": state.tokens_seen, "optimizer": full_optimizer_state(model, optimizer),
             "rng_cpu": torch.get_rng_state(), "precision": precision, "kept": list(state.kept)}
    if scaler.is_enabled():
        saved["scaler"] = scaler.state_dict()
    if torch.cuda.is_available() and device.type == "cuda":
        saved["rng_cuda"] = torch.cuda.get_rng_state(device)
    return saved


def restore(path: str | Path | None, out: Path, config: TrainConfig, model: nn.Module,
            optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, device: torch.device) -> Resumed | None:
    """Load the checkpoint ``path`` (None: the newest complete one of ``out``) into ``model``, ``optimizer``,
    ``scaler`` and torch's generators; :class:`Resumed`, or None without any checkpoint. A checkpoint
    that does not match ``config`` or whose state does not fit is a BadFileError."""
    path = find_resumable(out) if path is None else Path(path)
    if path is None or not path.exists():
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
    check_train_state(saved, path / STATE, model, optimizer, STATE_FORMAT, scaler.is_enabled())
    load_full_state(model, optimizer, checkpoint.model.state_dict(), saved["optimizer"])
    if "scaler" in saved and scaler.is_enabled():
        scaler.load_state_dict(saved["scaler"])
    torch.set_rng_state(saved["rng_cpu"])
    if "rng_cuda" in saved and device.type == "cuda":
        torch.cuda.set_rng_state(saved["rng_cuda"], device)
    state = TrainState(step=int(saved["step"]), best_val=float(saved["best_val"]),
                       best_step=int(saved.get("best_step", -1)), tokens_seen=int(saved["tokens_seen"]),
                       kept=[int(s) for s in saved.get("kept", [])])
    history = [h for h in read_metrics(out / METRICS) if h["step"] <= state.step]
    return Resumed(state, history, path, dict(checkpoint.training or {}))


def tidy_run_dir(out: Path, resumed: Path | None, best_step: int, history: list[dict[str, Any]],
                 keep: list[Path]) -> Path | None:
    """Put ``out`` in order before training (rank 0): repair a resumed run's pointers and remove a crash's
    leftovers but ``keep`` (:func:`recover_run`), or clear an earlier run for a fresh one (``resumed`` None);
    rewrite ``metrics.jsonl`` with ``history``. Returns the path of the last good checkpoint (None when fresh)."""
    if resumed is None:
        clear_run(out)
    last = recover_run(out, resumed, best_step, keep) if resumed is not None else None
    atomic_write(out / METRICS, "".join(metrics_line(h) for h in history))
    return last

"""What every trainer on a model's activations shares (SAEs, transcoders): the step loop with its progress
bar and records, Ctrl-C/SIGTERM at a step's end, and a saved state that a resume continues bit for bit.

The config: an :class:`ActivationTrainConfig`. A subclass sets ``STATE_FORMAT``, ``STATE_NAMES`` (the files of
its state folder), ``SAME_ON_RESUME``, ``what`` (and the messages' names), builds its module with :meth:`_build`
and ``last_fired``, and provides :meth:`initialize`, :meth:`train_step`, :meth:`module_state` /
:meth:`load_module_state` (its own part of the state).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from ...errors import BadFileError, GlassformerError
from ...io.budget import check_threads
from ...io.checks import MAX_SEED, check_device_name, check_int, is_int, shown
from ...io.fileio import atomic_directory, restore_moved_aside
from ...io.loaders import MAX_STEP, expand_home
from ...io.progress import showing
from ...io.signals import StopSignals
from ...validate import CheckedConfig, check_fields, option
from .activations import ActivationBuffer, ActivationSource

STATE_DIR, STATE_FILE = "state", "train_state.pt"


@dataclass
class ActivationTrainConfig(CheckedConfig):
    """The keys an SAE run and a transcoder run share (each adds its own, and its own defaults of some)."""

    data: list[str] = option(factory=list)  # text files the model reads
    out_dir: str | None = None  # None: next to the checkpoint (the command's default)
    expansion: int = option(8, ge=1)  # features: expansion x the width read, when not given
    aux_coefficient: float = option(1 / 32, ge=0.0)  # topk: α of AuxK
    aux_k: int | None = option(None, ge=1)  # topk: dead features AuxK uses; None: half the width (Gao et al.)
    dead_window: int = option(250, ge=1)  # steps without firing after which a feature counts as dead
    lr: float = option(1e-3, gt=0.0)
    lr_warmup_steps: int = option(0, ge=0)
    lr_decay_steps: int = option(0, ge=0)  # linear decay to 0 over the last steps (0: constant)
    beta1: float = option(0.9, ge=0.0, lt=1.0)
    beta2: float = option(0.999, ge=0.0, lt=1.0)
    batch_size: int = option(1024, ge=1)  # activation rows (tokens) per step
    steps: int = option(2000, ge=1)
    buffer_size: int = 32768  # rows mixed in the shuffling buffer (at least 2 x batch_size)
    context: int | None = option(None, ge=1)  # tokens per window; None: the model's max_len
    model_batch: int = option(32, ge=1)  # windows per forward of the model
    prefix_len: int | None = option(None, ge=1)  # prefix-LM: prefix of each window; None: context // 2
    normalize: bool = True  # train on activations scaled so that their norm averages √d
    val_fraction: float = option(0.1, gt=0.0, le=0.5)  # the last fraction of each file: metrics and pages read it
    eval_batches: int = option(8, ge=1)  # model batches for the final metrics
    feature_windows: int = option(128, ge=0)  # windows read for the feature pages (0: no pages)
    save_every: int = option(500, ge=0)  # steps between saved states (0: only at the end)
    log_every: int = option(100, ge=1)
    seed: int = option(0, ge=0, le=MAX_SEED)
    device: str = "cpu"  # "cpu", "cuda", "cuda:N" or "auto"
    num_threads: int | None = option(None, ge=1, le=4096)  # set by the trainer when given; None: left alone
    resume: bool = False
    progress: bool = True
    log: str = "none"  # trackers: "tensorboard", "wandb", both joined by a comma

    def __post_init__(self) -> None:
        check_fields(self, coerce=True)  # "3e-4" from the command line becomes 3e-4, then each range
        self.data, self.out_dir = expand_home(self.data), expand_home(self.out_dir)  # ~/x: the home folder's x
        check_int("buffer_size", self.buffer_size, 2 * self.batch_size)
        check_device_name(self.device)

    def activation_source(self, model: nn.Module, tokenizer: Any, hooks: str | list[str], split: str,
                          seed: int) -> ActivationSource:
        """The rows of ``hooks`` that ``model`` computes reading ``data`` (its "train" or "val" split) as this
        config says: context, model_batch, val_fraction, prefix_len."""
        return ActivationSource(model, tokenizer, hooks, self.data, context=self.context or model.config.max_len,
                                batch=self.model_batch, split=split, val_fraction=self.val_fraction, seed=seed,
                                prefix_len=self.prefix_len)


def record_line(what: str, record: dict[str, float], steps: int) -> str:
    """One logged record as a line where no bar is drawn: ``sae step 100/1500 | loss 0.0123 | l0 16``."""
    return " | ".join([f"{what} step {record['step']}/{steps}",
                       *(f"{key} {value:.4g}" for key, value in record.items() if key != "step")])


class ActivationTrainer:
    """The loop and the resumable state of a trainer on activation rows (see the module docstring)."""

    STATE_FORMAT = ""
    STATE_NAMES: frozenset[str] = frozenset({STATE_FILE})
    # the config's keys that must be the same to resume (what the saved state means); a subclass adds its own
    SAME_ON_RESUME: tuple[str, ...] = ("kind", "expansion", "k", "batch_size", "buffer_size", "context", "model_batch",
                                       "seed", "normalize", "val_fraction", "prefix_len", "data")
    what = "module"  # the progress bar's name and the command's ("sae", "transcoders")
    title = "module"  # the messages' name for it ("SAE")
    hint = "lower lr"  # what to try when the loss stops being finite
    error = "loss"  # the progress bar's first figure, a key of train_step's result

    def __init__(self, config: Any):
        if config.out_dir is None:
            raise GlassformerError(f"out_dir must be set (glassformer {self.what} puts it next to the checkpoint)")
        self.config, self.out = config, Path(config.out_dir)
        if config.num_threads:
            check_threads(config.num_threads)
            torch.set_num_threads(config.num_threads)
        self.stop_signal: int | None = None  # the signal that stopped the last train(), if one did
        self.step = 0
        self.history: list[dict[str, float]] = []
        self.on_record: Callable[[dict[str, float]], None] | None = None  # called with each logged record

    def _build(self, source: Any, model: nn.Module | None, make: Callable[[], nn.Module]) -> nn.Module:
        """The constructor's shared part: the buffer over ``source``, the module ``make()`` builds (seeded by
        ``config.seed``) on ``model``'s device (or the CPU), and its Adam optimizer. Returns the module."""
        c = self.config
        self.source = source
        self.buffer = ActivationBuffer(source, c.buffer_size, c.batch_size, seed=c.seed + 1)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(c.seed)
            module = make()
        self.device = next(model.parameters()).device if model is not None else torch.device("cpu")
        module.to(self.device)
        self.optimizer = torch.optim.Adam(module.parameters(), lr=c.lr, betas=(c.beta1, c.beta2))
        return module

    # -- what a subclass provides ------------------------------------------------------------------------
    def initialize(self, rows: torch.Tensor) -> None:
        """Step 0's set-up from the first rows the buffer holds."""

    def train_step(self, rows: torch.Tensor) -> dict[str, float]:
        """One optimiser step; returns at least "loss" and the figures the progress bar shows."""
        raise NotImplementedError

    def module_state(self, folder: Path) -> dict[str, Any]:
        """Write the trained module's own files into ``folder``; return its extra entries of the state file."""
        return {}

    def load_module_state(self, folder: Path, state: dict[str, Any], file: Path) -> None:
        """Restore what :meth:`module_state` saved (``state`` already checked for the shared keys)."""

    # -- the loop ----------------------------------------------------------------------------------------
    def dead(self) -> torch.Tensor:
        """Bool, the shape of ``last_fired`` (the step after which each feature last fired): the features that
        fired in none of the last ``dead_window`` steps."""
        return self.step - self.last_fired >= self.config.dead_window

    def lr_at(self, step: int) -> float:
        """The learning rate of step ``step``: linear warm-up, constant, then linear decay to 0."""
        c = self.config
        scale = min(1.0, (step + 1) / c.lr_warmup_steps) if c.lr_warmup_steps else 1.0
        if c.lr_decay_steps and step >= c.steps - c.lr_decay_steps:
            scale *= (c.steps - step) / c.lr_decay_steps
        return c.lr * scale

    def train(self, stop_at: int | None = None) -> dict[str, Any]:
        """Train to ``config.steps`` (or stop after step ``stop_at``), saving the state every ``save_every``
        steps and at the end. Ctrl-C or SIGTERM stops at the end of the current step, saves, and raises
        KeyboardInterrupt (:attr:`stop_signal` says which). Returns {"steps", "history", "final"}."""
        c = self.config
        end = c.steps if stop_at is None else min(stop_at, c.steps)
        if self.step == 0:
            self.initialize(self.buffer.peek())
        show = c.progress and showing()
        bar = tqdm(total=c.steps, initial=self.step, disable=None if show else True, desc=self.what)  # None: a tty
        with bar, StopSignals() as signals:  # a second Ctrl-C, mid-step: the state saved at a step's end is kept
            last = self._steps(end, bar, signals.requests, lines=show and bar.disable)
        self.save_state()
        if signals.requests:  # Ctrl-C or SIGTERM: stopped at the end of a step, saved; a resume continues bit for bit
            self.stop_signal = signals.requests[0]
            raise KeyboardInterrupt
        return {"steps": self.step, "history": self.history, "final": last}

    def _steps(self, end: int, bar: Any, stop: list[int], lines: bool = False) -> dict[str, float]:
        """:meth:`train`'s loop to step ``end`` (or until ``stop`` is filled); returns the last losses.
        ``lines``: no bar is drawn (a log file, a pipe), so each logged record is a line on stderr."""
        c, last = self.config, {}
        while self.step < end and not stop:
            last = self.train_step(self.buffer.next_batch())
            bar.update(1)
            if self.step % c.log_every == 0 or self.step == c.steps:
                record = {"step": self.step, **{k: round(v, 6) for k, v in last.items()}}
                self.history.append(record)
                if self.on_record is not None:
                    self.on_record(record)
                if lines:
                    print(record_line(self.what, record, c.steps), file=sys.stderr, flush=True)
                bar.set_postfix({self.error: f"{last[self.error]:.3g}", "l0": f"{last['l0']:.1f}",
                                 "dead": f"{last['dead']:.2f}"})  # the error, L0 and the fraction of dead features
            if not math.isfinite(last["loss"]):
                raise GlassformerError(f"the {self.title}'s loss became {last['loss']} at step {self.step}; "
                                       f"{self.hint}")
            if c.save_every and self.step % c.save_every == 0 and self.step < end:
                self.save_state()
        return last

    # -- the saved state ---------------------------------------------------------------------------------
    def same_on_resume(self) -> dict[str, Any]:
        """The config's keys that decide what a saved state means."""
        return {k: v for k, v in self.config.to_dict().items() if k in self.SAME_ON_RESUME}

    def save_state(self) -> Path:
        """Write ``out_dir/state/`` (the module, Adam, buffer, step, history...) atomically; returns it."""
        folder = self.out / STATE_DIR
        with atomic_directory(folder, self.STATE_NAMES) as temp:
            state = {"format": self.STATE_FORMAT, "step": self.step, "optimizer": self.optimizer.state_dict(),
                     "buffer": self.buffer.state_dict(), "history": self.history, "config": self.same_on_resume(),
                     "last_fired": self.last_fired, **self.module_state(temp)}
            torch.save(state, temp / STATE_FILE)
        return folder

    def resume(self) -> bool:
        """Continue from ``out_dir/state/`` when it exists (False when there is none); BadFileError naming
        the keys when it was written with another config in ``SAME_ON_RESUME``."""
        from ...io.loaders import load_state_file
        from ...io.state_check import check_optimizer_state

        folder = self.out / STATE_DIR
        file = folder / STATE_FILE
        restore_moved_aside(folder, self.STATE_NAMES)  # killed between a save's two renames
        if not file.is_file():
            return False
        state = load_state_file(file)  # the trainer's reader: bounded sizes, tensors and plain containers only
        if state.get("format") != self.STATE_FORMAT or not isinstance(state.get("config"), dict):
            raise BadFileError(f"{file} is not a {self.title} training state of this glassformer")
        ours = self.same_on_resume()
        differ = sorted(k for k in ours if state["config"].get(k) != ours[k])
        if differ:  # first: a changed key explains the shapes that would not fit below
            changes = ", ".join(f"{k}: saved {state['config'].get(k)!r}, now {ours[k]!r}" for k in differ)
            raise BadFileError(f"cannot resume from {str(folder)!r}: the config changed ({changes})")
        if not is_int(state.get("step")) or not 0 <= state["step"] <= MAX_STEP:  # as the trainer's: no negative step
            raise BadFileError(f"{file}: step holds {shown(state.get('step'))}, expected an int in [0, {MAX_STEP}]")
        check_optimizer_state(state.get("optimizer"), self.optimizer, str(file))  # shapes before a fused kernel
        for key in ("buffer", "history"):
            if key not in state:
                raise BadFileError(f"{file}: the key {key!r} is missing")
        fired = check_tensor(state.get("last_fired"), self.last_fired.shape, torch.long, file,
                             "last_fired must be an int64 tensor")
        self.load_module_state(folder, state, file)
        self.optimizer.load_state_dict(state["optimizer"])
        try:
            self.buffer.load_state_dict(state["buffer"])
        except (RuntimeError, TypeError, KeyError, AttributeError) as error:
            raise BadFileError(f"{file}: the buffer state is not one glassformer saved "
                               f"({str(error).splitlines()[0] if str(error) else type(error).__name__})") from None
        self.history, self.step, self.last_fired = list(state["history"]), int(state["step"]), fired
        return True


def check_tensor(value: Any, shape: tuple[int, ...], dtype: torch.dtype, file: Path, what: str) -> torch.Tensor:
    """``value`` (read from the state ``file``) when a ``dtype`` tensor of ``shape``; else a BadFileError
    "FILE: ``what`` of shape SHAPE"."""
    if not torch.is_tensor(value) or tuple(value.shape) != tuple(shape) or value.dtype != dtype:
        raise BadFileError(f"{file}: {what} of shape {tuple(shape)}")
    return value

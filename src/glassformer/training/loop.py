"""Trainer: the training loop, with evaluation, logging, checkpoints, exact resume and torchrun scale-out."""

import contextlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm  # a widget in Jupyter, text on a terminal

from ..data import IGNORE, LMBatches, Seq2SeqBatches, take_rows
from ..errors import GlassformerError, MeasurementError
from ..io.fileio import fsync_file, run_lock
from ..io.signals import StopSignals
from ..runtime.attention import use_bf16_attention
from ..runtime.kernel_choice import choices
from ..runtime.threads import LoadFollower
from ..tokenizers import Tokenizer
from .checkpoint import commit_checkpoint
from .config import TrainConfig
from .distributed import (
    DistInfo,
    all_reduce_sum,
    full_model_state,
    grad_sync,
    init_distributed,
    is_sharded,
    wrap_for_training,
)
from .metrics import METRICS, metrics_line
from .objectives import batch_loss, check_model_for
from .optim import lr_at, make_optimizer
from .report import describe_model, resume_line, say, schedule_warnings
from .resume import TrainState, restore, state_to_dict, tidy_run_dir
from .run_dir import LAST, step_folder
from .series import check_series_disk, checkpoint_bytes, kept_steps
from .step_precision import choose_precision
from .trackers import Tracker, console_line, open_trackers
from .validation import evaluate


class TrainingDiverged(GlassformerError):
    """The training or validation loss, or the weights, became NaN or infinite; nothing more is saved."""


class Trainer:
    """Train ``model`` on ``batches`` (from :func:`~glassformer.training.prepare_run`) as ``config`` says;
    rank 0 writes finite checkpoints (``ckpt-NNNNNN/``, pointers ``last`` and ``best``) and ``metrics.jsonl``
    to ``config.out_dir``. ``dist``: default from torchrun's environment. ``tracker`` (rank 0) takes
    anyone's ``tracker.log(step, {name: number})``; ``run_state`` holds the counters a checkpoint carries."""

    def __init__(self, config: TrainConfig, model: nn.Module, tokenizer: Tokenizer,
                 batches: LMBatches | Seq2SeqBatches, dist: DistInfo | None = None):
        self.config = config
        check_model_for(config.objective, model)
        self.dist = dist or init_distributed(config.device)
        if config.batch_size % (self.dist.world_size * config.grad_accum):  # (batch_size >= 1: validated)
            raise GlassformerError(f"batch_size={config.batch_size} must be a multiple of processes x grad_accum = "
                                   f"{self.dist.world_size} x {config.grad_accum}")
        if config.num_threads:  # asked for by the config; None/0: threads are left alone (runtime.tune decides)
            torch.set_num_threads(config.num_threads)
        self.model = model.to(self.dist.device)
        self.n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)  # before FSDP shards it
        self.tokenizer, self.batches = tokenizer, batches
        self.out = Path(config.out_dir)
        self.run_state = TrainState()  # step, best_val, best_step, tokens_seen: what a checkpoint carries
        if self.dist.device.type == "cpu" and config.precision in ("auto", "bfloat16") and not config.compile:
            use_bf16_attention(self.model)  # bfloat16 attention on the bfloat16 units where measured faster here
        micro = self._to_device(self._micro_batches()[0]) if config.precision == "auto" and self.dist.is_main else None
        self.precision = choose_precision(config.precision, self.model, self.dist, micro)
        # float16's narrow range needs the loss scaled up before backward
        self.scaler = torch.amp.GradScaler(self.dist.device.type, enabled=self.precision.name == "float16")
        # after the precision measurement (rank 0 alone) and before the optimizer (sharding replaces parameters)
        self.train_model: nn.Module = wrap_for_training(self.model, self.dist, config.parallel)
        self.sharded = is_sharded(self.model)
        self.microscope = None  # interpretability probes at each evaluation (config.watch; rank 0, unsharded)
        if config.watch and self.dist.is_main and not self.sharded:
            from .microscope import microscope_for_run
            self.microscope = microscope_for_run(config.watch, self.model, tokenizer, batches, config.eval_every,
                                                 config.max_steps, config.block_size, config.max_memory)
        self.optimizer = make_optimizer(self.model, config.lr, config.weight_decay, (config.beta1, config.beta2),
                                        config.eps, config.fused_adamw, kind=config.optimizer)
        if config.compile:
            self.train_model = torch.compile(self.train_model)
        self.history: list[dict[str, Any]] = []
        self.last_checkpoint: Path | None = None
        self.stop_signal: int | None = None
        # a stop asked by Ctrl-C or SIGTERM in this process; one asked by any (agreed at the start of a step)
        self._stop_requests: list[int] = []  # Ctrl-C or SIGTERM while training (io/signals.py)
        self._stop_agreed = False
        self.tracker: Tracker = Tracker()  # config.log's trackers, opened by train() on rank 0
        self._lines = False  # print a line per record (train() sets it where no progress bar is drawn)
        self._bar: Any = None  # the progress bar while train() runs: evaluation lines are written above it
        self.resumed_from: dict[str, Any] | None = None  # set by resume(): {"step", "checkpoint", "training"}
        self.series = kept_steps(config.keep_checkpoints, config.max_steps)  # kept beside last and best (replay)

    @property
    def step(self) -> int:
        """Optimiser updates done."""
        return self.run_state.step

    @property
    def best_val(self) -> float:
        """The lowest validation loss (inf before any)."""
        return self.run_state.best_val

    @property
    def best_step(self) -> int:
        """The step of :attr:`best_val` (-1 before any)."""
        return self.run_state.best_step

    @property
    def tokens_seen(self) -> int:
        """Training tokens so far, over all processes."""
        return self.run_state.tokens_seen

    def state(self) -> dict[str, Any]:
        """What resuming needs besides the weights: :func:`~glassformer.training.resume.state_to_dict`."""
        return state_to_dict(self.run_state, self.model, self.optimizer, self.scaler, self.precision.name,
                             self.dist.device)

    def save(self, best: bool = False) -> Path | None:
        """Commit this step's checkpoint (rank 0; no finiteness check); returns its folder (None on other ranks)."""
        folder = None
        if best:
            self.run_state.best_step = self.step  # recorded in the state, so that a resumed run can repair `best`
        self.run_state.kept = self._kept_steps()  # carried by the checkpoint: a resume keeps them whatever it asks
        weights = full_model_state(self.model) if self.sharded else None  # FSDP: every rank gathers, rank 0 gets
        train_state = self.state() if self.sharded or self.dist.is_main else None
        if self.dist.is_main:
            if (self.out / METRICS).is_file():
                fsync_file(self.out / METRICS)  # the records the checkpoint covers reach the disk before it
            folder = commit_checkpoint(self.out, self.step, self.model, self.tokenizer, weights=weights,
                                       training=self.config.to_dict(), train_state=train_state, best=best,
                                       keep=self._series_folders())
        self.last_checkpoint = self.out / LAST
        return folder

    def _series_folders(self) -> list[Path]:
        """The kept series' folders written by now (:mod:`~glassformer.training.series`)."""
        return [step_folder(self.out, s) for s in self._kept_steps()]

    def _kept_steps(self) -> list[int]:
        """The steps up to now whose checkpoints stay: this run's series and what earlier parts of it kept."""
        return sorted(s for s in {*self.series, *self.run_state.kept} if s <= self.step)

    def _state_is_finite(self) -> bool:
        """Weights and optimizer state (this rank's shards) hold no NaN or infinity; one device sync."""
        tensors = [*self.model.state_dict().values(),
                   *(v for s in self.optimizer.state.values() for v in s.values() if torch.is_tensor(v))]
        tensors = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]  # DTensor -> its shard
        checks = [torch.isfinite(t).all() for t in tensors if t.is_floating_point()]
        return bool(torch.stack(checks).all()) if checks else True

    def _checked_save(self, val_loss: float | None = None, best: bool = False) -> None:
        """Save, unless ``val_loss`` or the weights are not finite (TrainingDiverged); all ranks agree."""
        bad = torch.zeros(2, dtype=torch.float64)
        if self.dist.is_main:
            bad[0] = float(val_loss is not None and not math.isfinite(val_loss))
        if self.dist.is_main or self.sharded:
            bad[1] = float(not self._state_is_finite())
        bad = all_reduce_sum(bad.to(self.dist.device), self.dist).cpu()
        if bad[0]:
            shown = f" became {val_loss}" if val_loss is not None else " is not finite"
            raise TrainingDiverged(f"the validation loss{shown} at step {self.step}; stopped. {self._kept()}")
        if bad[1]:
            raise TrainingDiverged(f"the weights or optimizer state hold NaN/inf at step {self.step}; stopped. "
                                   f"{self._kept()}")
        self.save(best=best)

    def _kept(self) -> str:
        """What a stop message says about checkpoints: only ones that exist."""
        if self.last_checkpoint is None:
            return "No checkpoint was written (none was good); try a lower lr or grad_clip"
        return (f"The last good checkpoint is kept in {self.last_checkpoint} (try a lower lr or grad_clip, and "
                f"--resume true to continue from it)")

    def resume(self, path: str | Path | None = None) -> bool:
        """Restore weights, optimizer, RNG and step from ``path`` (default: the newest complete checkpoint
        of ``out_dir``; :func:`~glassformer.training.resume.restore`); False when there is nothing to resume."""
        resumed = restore(path, self.out, self.config, self.model, self.optimizer, self.scaler, self.dist.device)
        if resumed is None:
            return False
        self.run_state, self.history, self.last_checkpoint = resumed.state, resumed.history, resumed.checkpoint
        self.resumed_from = {"step": self.step, "checkpoint": str(resumed.checkpoint), "training": resumed.training}
        return True

    def _log(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        if self.dist.is_main:
            with open(self.out / METRICS, "a", encoding="utf-8") as handle:
                handle.write(metrics_line(record))
            self.tracker.log(record["step"], {k: v for k, v in record.items() if k != "step"})
            if self._lines:
                print(console_line(record, self.config.max_steps), file=sys.stderr, flush=True)
            elif self._bar is not None and not self._bar.disable and "val_loss" in record:
                self._bar.write(console_line(record, self.config.max_steps), file=sys.stderr)  # above the bar

    def _micro_batches(self) -> list[dict[str, torch.Tensor]]:
        """This process's micro-batches of the current step's global batch, on the host."""
        config = self.config
        batch = self.batches.global_batch(self.step, config.batch_size)
        size = config.batch_size // (self.dist.world_size * config.grad_accum)  # rows per micro-batch
        first = self.dist.rank * config.grad_accum  # this process's first micro-batch
        return [take_rows(batch, (first + i) * size, (first + i + 1) * size) for i in range(config.grad_accum)]

    def _to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``batch`` on the training device (to a GPU through pinned memory, without blocking the host)."""
        device, pin = self.dist.device, self.dist.device.type == "cuda"
        return {k: (v.pin_memory() if pin else v).to(device, non_blocking=pin) for k, v in batch.items()}

    def train_step(self) -> torch.Tensor:
        """One optimiser update; returns the global mean training loss of the step (a 0-dim tensor)."""
        config = self.config
        host = self._micro_batches()
        # the global batch's counted tokens, on the host (no device sync); under torchrun summed with the stop flag
        counted, stop = float(sum(int((mb["labels"] != IGNORE).sum()) for mb in host)), bool(self._stop_requests)
        if self.dist.distributed:
            local = torch.tensor([counted, float(stop)], dtype=torch.float64, device=self.dist.device)
            counts = all_reduce_sum(local, self.dist).cpu()
            counted, stop = float(counts[0]), bool(counts[1] > 0)
        micro = [self._to_device(mb) for mb in host]
        self._stop_agreed = stop  # every process stops after this same step
        count = max(counted, 1.0)
        scale = self.dist.world_size / count  # loss sums over the global batch's tokens; DDP/FSDP average
        lr = lr_at(self.step, config.lr_schedule, config.lr, config.warmup_steps,
                   config.lr_decay_steps or config.max_steps, config.min_lr, config.cooldown)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss_sum: torch.Tensor | None = None  # float64, summed over the micro-batches (no extra op per step)
        if not (self.train_model.training and self.model.training):  # evaluation restores the mode: set once,
            self.train_model.train()  # not a walk over every module at every step
        for i, mb in enumerate(micro):
            sync = i == len(micro) - 1 or not self.dist.distributed
            with grad_sync(self.train_model, sync), self.precision.autocast(self.dist.device):
                parts = batch_loss(self.train_model, mb, config.label_smoothing, count_correct=False,
                                   check_ids=False)  # ids its tokenizer made: no host sync
            self.scaler.scale(parts.loss_sum * scale).backward()
            part = parts.loss_sum.detach().double()
            loss_sum = part if loss_sum is None else loss_sum + part
        self.scaler.unscale_(self.optimizer)  # (float16 only) the true gradients, for clipping
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_clip)
        self.scaler.step(self.optimizer)  # (float16) skipped when a gradient overflowed
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.run_state.step += 1
        self.run_state.tokens_seen += sum(int(mb["labels"].numel()) for mb in micro) * self.dist.world_size
        return all_reduce_sum(loss_sum, self.dist) / count

    def evaluate(self) -> dict[str, float]:
        """:func:`evaluate` on the validation split (rank 0's result; other ranks get {})."""
        if not self.dist.is_main and not self.sharded:
            return {}
        metrics = evaluate(self.model, self.batches, self.config.eval_batch_size, self.config.eval_batches,
                           self.dist.device, self.tokenizer.kind == "char", self.precision,
                           progress=self.config.progress and self.dist.is_main)  # a line every ~10 s
        return metrics if self.dist.is_main else {}

    def _evaluate_and_save(self) -> None:
        """Say that an evaluation runs (the bar's label, or a line where there is no bar), evaluate and save."""
        self._bar.set_description_str("evaluating")
        if self._lines and self.dist.is_main:
            print(say("evaluating", step=self.step, max_steps=self.config.max_steps), file=sys.stderr, flush=True)
        metrics = self.evaluate()
        if metrics:
            self._log({"step": self.step, **metrics})
        val_loss = metrics.get("val_loss")
        best = val_loss is not None and val_loss < self.best_val  # False for NaN, which _checked_save refuses
        if best:
            self.run_state.best_val = val_loss
        self._checked_save(val_loss, best)

    def _check_finite(self, loss: float) -> None:
        if not math.isfinite(loss):
            raise TrainingDiverged(f"training loss became {loss} at step {self.step}; stopped. {self._kept()}")

    def _start(self) -> None:
        """Resume (when asked); on rank 0, put ``out_dir`` in order and start the microscope's records."""
        resumed = self.resume() if self.config.resume else False
        if not self.dist.is_main:
            return
        self.last_checkpoint = tidy_run_dir(self.out, self.last_checkpoint if resumed else None, self.best_step,
                                            self.history, self._series_folders())
        if self.microscope is not None:  # the same rules for microscope.jsonl
            self.microscope.start(self.out, self.step, self.model)

    def train(self) -> dict[str, Any]:
        """Run until ``max_steps`` (resuming when ``config.resume``); Ctrl-C or SIGTERM saves after the next
        step and stops ("interrupted"); a NaN/inf loss or weights raise :class:`TrainingDiverged`. Returns
        {"step", "stopped", "precision", "precision_reason", "train_loss", "best_val_loss", "best_step",
        "tokens_per_s" (this call's), "wall_s", **the last evaluation's metrics, "history"}."""
        with contextlib.ExitStack() as lock:
            if self.dist.is_main:
                self.out.mkdir(parents=True, exist_ok=True)
                lock.enter_context(run_lock(self.out))  # a second trainer of out_dir is refused
            return self._train()

    def _train(self) -> dict[str, Any]:
        config = self.config
        self._start()
        if self.dist.is_main:  # what is trained and from where, schedule warnings, a precision other than float32
            resumed = self.resumed_from
            lines = [describe_model(self.model, config.block_size, self.n_params)] if config.progress else []
            if resumed is not None:  # said under progress: false too (like the warnings below): not progress
                lines.append(resume_line(config.out_dir, self.step, config.max_steps, resumed["checkpoint"]))
            lines += schedule_warnings(config, self.step, resumed["training"] if resumed is not None else None)
            lines += [self.precision.describe()] if config.precision != "float32" else []
            if self.series:  # what the kept series takes on disk, checked against what is free
                sizes = [checkpoint_bytes(self.model, self.tokenizer, self.optimizer, config.to_dict(), stepped)
                         for stepped in (True, False)]
                lines.append(check_series_disk(self.out, self.series, *sizes, self.step if resumed else -1))
            for line in lines:
                print(line, file=sys.stderr, flush=True)
            resumed_at = self.step if self.last_checkpoint is not None else None
            self.tracker = open_trackers(config.log, self.out, config.to_dict(), resumed_at)
            self.tracker.text("precision", self.precision.describe())
            if self.microscope is not None:  # its scalars go to the trackers too (docs/training.md)
                self.microscope.attach(self.tracker, fresh=resumed_at is None)
        stop_signals = StopSignals().catch()  # Ctrl-C or SIGTERM: saved after the step, then stopped
        self._stop_requests = stop_signals.requests
        show = config.progress and self.dist.is_main
        self._bar = bar = tqdm(total=config.max_steps, initial=self.step, disable=None if show else True,
                               desc="train", dynamic_ncols=True, leave=False)  # disable=None: only on a terminal
        self._lines = show and bar.disable  # no bar (output to a file or a pipe): a line per record instead
        stopped, last_loss, started, eval_metrics = "done", math.nan, time.perf_counter(), {}
        tokens_at_start = self.tokens_seen  # a resumed run's rate counts this run's tokens only
        window_start, window_tokens = time.perf_counter(), self.tokens_seen
        # the thread count follows the load where the policy was asked for (runtime.tune; the command asks)
        threads = LoadFollower(on=not config.num_threads)
        try:
            if self.step == 0 and self.series and self.series[0] == 0:  # the weights before training, for replay
                self._checked_save()
            while self.step < config.max_steps:
                loss = self.train_step()
                threads.tick()
                if self.microscope is not None and self.microscope.due(self.step):
                    try:
                        self.microscope.record(self.model, self.step)
                    except MeasurementError:  # the user's code failed: keep this step's training, then say so
                        self._checked_save()
                        raise
                stop = self._stop_agreed and self.step < config.max_steps
                at_eval = config.eval_every and self.step % config.eval_every == 0
                if self.step % config.log_every == 0 or at_eval or self.step == config.max_steps:
                    last_loss = float(loss)
                    self._check_finite(last_loss)
                    now = time.perf_counter()
                    rate = (self.tokens_seen - window_tokens) / max(now - window_start, 1e-9)
                    window_start, window_tokens = now, self.tokens_seen
                    self._log({"step": self.step, "train_loss": last_loss, "lr": self.optimizer.param_groups[0]["lr"],
                               "tokens_per_s": rate})
                    if not bar.disable:  # (no bar: a line per record from _log instead)
                        bar.set_postfix(loss=f"{last_loss:.4f}", tok_s=f"{rate:,.0f}")
                if at_eval and self.step < config.max_steps:
                    self._evaluate_and_save()
                    bar.set_description_str("train")
                elif stop or (self.step in self.series and self.step < config.max_steps):  # (the last: below)
                    self._check_finite(float(loss))
                    self._checked_save()
                bar.update(1)
                if stop:
                    stopped = "interrupted"
                    self.stop_signal = self._stop_requests[0] if self._stop_requests else None
                    break
            if stopped == "done":
                # A run resumed at its last step has evaluated and saved it already.
                if not any(h["step"] == self.step and "val_loss" in h for h in self.history):
                    self._evaluate_and_save()
                eval_metrics = self.history[-1] if self.history and "val_loss" in self.history[-1] else {}
        finally:
            bar.close()
            self._bar = None
            if made := choices():  # the kernel choices this run made
                self.tracker.text("kernel_choices", json.dumps(made, indent=1))
            self.tracker.close()
            stop_signals.release()
        wall = time.perf_counter() - started
        return {"step": self.step, "stopped": stopped, "precision": self.precision.name,
                "precision_reason": self.precision.reason, "train_loss": last_loss,
                "best_val_loss": self.best_val if math.isfinite(self.best_val) else None,
                "best_step": self.best_step if math.isfinite(self.best_val) else None,
                "tokens_per_s": (self.tokens_seen - tokens_at_start) / wall if wall > 0 else 0.0, "wall_s": wall,
                **{k: v for k, v in eval_metrics.items() if k != "step"}, "history": list(self.history)}

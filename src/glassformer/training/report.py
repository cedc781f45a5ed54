"""What training prints for a person: the model line at the start, the resume line and its warnings, and
the short summary at the end (the full numbers go to files: metrics.jsonl, summary.json).

nanoGPT prints the parameter count first and a line per evaluation; Hugging Face's Trainer ends with a
few rounded figures. These functions build those lines from plain values; the trainer and the
``train`` command decide where they go (standard error while training, standard output at the end).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from torch import nn

from ..models.common import count_params
from .optim import lr_at


def parameter_count(n: int) -> str:
    """``0.80 M parameters`` (``6,304 parameters`` under ten thousand, where millions would read 0.01)."""
    return f"{n / 1e6:.2f} M parameters" if n >= 10_000 else f"{n:,} parameters"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def describe_model(model: nn.Module, block_size: int, n_params: int | None = None) -> str:
    """One line naming the model and its size, e.g. ``model: TransformerLM causal, 4 layers x 128 wide,
    4 heads, vocab 65, block 64: 0.80 M parameters``.

    Args:
        model: a glassformer model (its ``config`` gives the shape; any other module is named by its class).
        block_size: the training window (tokens).
        n_params: the trainable parameter count, when counted before the model was wrapped (FSDP shards it);
            default: counted here (a tied matrix once).
    """
    n = count_params(model) if n_params is None else n_params
    config = getattr(model, "config", None)
    if config is None:
        return f"model: {type(model).__name__}, block {block_size}: {parameter_count(n)}"
    if getattr(config, "arch", "lm") == "encoder-decoder":
        shape = f"{config.n_enc} encoder + {config.n_dec} decoder layers"
        kind = type(model).__name__
    else:
        shape = _plural(config.n_layers, "layer")
        kind = f"{type(model).__name__} {config.attn}"
    return (f"model: {kind}, {shape} x {config.d_model} wide, {config.n_heads} heads, vocab {config.vocab_size}, "
            f"block {block_size}: {parameter_count(n)}")


def resume_line(out_dir: str, step: int, max_steps: int, checkpoint: str) -> str:
    """``resuming out/ at step 120 of 200 (from out/ckpt-000120)``, or that nothing is left to train."""
    left = (f"at step {step} of {max_steps}" if step < max_steps
            else f"at step {step}: max_steps {max_steps} reached, nothing left to train")
    return f"resuming {out_dir.rstrip('/')}/ {left} (from {checkpoint})"


def schedule_warnings(config: Any, step: int, before: Mapping[str, Any] | None = None) -> list[str]:
    """Warnings about the learning-rate schedule of a run that starts (or resumes) at ``step``.

    - ``lr_decay_steps`` past ``max_steps`` (e.g. a shortened ``--max_steps`` that kept the config's
      ``lr_decay_steps``): the cosine never reaches ``min_lr``.
    - A resumed run whose ``max_steps`` differs from the checkpoint's (``before``: the checkpoint's
      training config) while the cosine decays over ``max_steps``: the learning rate jumps at the resume.

    Args:
        config: the run's TrainConfig; step: the first update this run makes;
        before: the training config the checkpoint was written under (None: a fresh run).
    Returns:
        The warning lines (empty when the schedule is as the user set it).
    """
    found = []
    cosine = config.lr_schedule == "cosine"
    decay = config.lr_decay_steps
    if cosine and decay and decay > config.max_steps:
        end = lr_at(config.max_steps - 1, "cosine", config.lr, config.warmup_steps, decay, config.min_lr)
        found.append(f"warning: lr_decay_steps {decay} is past max_steps {config.max_steps}: the learning rate ends at "
                     f"{end:.2e}, not min_lr {config.min_lr:.2e}; set --lr_decay_steps {config.max_steps} (or drop "
                     f"it) to decay over this run")
    old = before.get("max_steps") if before else None
    if cosine and decay is None and old is not None and old != config.max_steps and step < config.max_steps:
        then = lr_at(step, "cosine", config.lr, config.warmup_steps, before.get("lr_decay_steps") or old, config.min_lr)
        now = lr_at(step, "cosine", config.lr, config.warmup_steps, config.max_steps, config.min_lr)
        found.append(f"warning: max_steps changed from {old} to {config.max_steps} since the checkpoint: the cosine "
                     f"schedule now decays over {config.max_steps} steps, so the learning rate at step {step} is "
                     f"{now:.2e} instead of {then:.2e}; add --lr_decay_steps {old} to keep the old schedule")
    return found


def _number(value: float, digits: int = 4) -> str:
    """``value`` rounded for reading: 4 decimals below 100, thousands separated above."""
    if not math.isfinite(value):
        return str(value)
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.{digits}f}"


def summary_lines(result: Mapping[str, Any], max_steps: int) -> list[str]:
    """A training run's result (:meth:`~glassformer.training.Trainer.train`) in two or three short lines:

        done: step 200 of 200 in 170.3 s, 1,178 tok/s (float32)
        train_loss 1.9321 | val_loss 2.0012 (best 1.9987 at step 150) | val_ppl 7.3900 | ...
    """
    verb = "done" if result["stopped"] == "done" else "interrupted"
    head = (f"{verb}: step {result['step']} of {max_steps} in {result['wall_s']:.1f} s, "
            f"{result['tokens_per_s']:,.0f} tok/s ({result['precision']})")
    parts = []
    train_loss = result.get("train_loss")
    if isinstance(train_loss, float) and math.isfinite(train_loss):
        parts.append(f"train_loss {_number(train_loss)}")
    for key, value in result.items():
        if not key.startswith("val_") or key == "val_tokens" or not isinstance(value, (int, float)):
            continue
        text = f"{key} {_number(float(value))}"
        best = result.get("best_val_loss")
        if key == "val_loss" and best is not None and best != value:
            text += f" (best {_number(best)} at step {result.get('best_step', '?')})"
        parts.append(text)
    return [head, " | ".join(parts)] if parts else [head]

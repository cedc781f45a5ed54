"""What training prints for a person: the model line, the resume line and its warnings, the summary."""

import math
from collections.abc import Mapping
from typing import Any

from torch import nn

from ..locale import catalogue
from ..models.common import count_params
from .optim import lr_at

# The lines a person reads, by language (locale/train.<lang>.json); warnings, like errors, stay English.
TEXT: dict[str, dict[str, str]] = {lang: catalogue(f"train.{lang}") for lang in ("en", "zh")}
_language = "en"


def use_language(lang: str) -> None:
    """Print this module's lines in ``lang`` ("en" or "zh") from now on; anything else is refused."""
    global _language
    if lang not in TEXT:
        raise ValueError(f"lang must be one of {', '.join(TEXT)}, got {lang!r}")
    _language = lang


def say(key: str, **fields: Any) -> str:
    """The line ``key`` of :data:`TEXT` in the current language, its ``{fields}`` filled in."""
    return TEXT[_language][key].format(**fields)


def parameter_count(n: int) -> str:
    """``0.80 M parameters`` (``6,304 parameters`` under ten thousand)."""
    return say("params_m", m=n / 1e6) if n >= 10_000 else say("params", n=n)


def describe_model(model: nn.Module, block_size: int, n_params: int | None = None) -> str:
    """One line naming the model and its size, e.g. ``model: TransformerLM causal, 4 layers x 128 wide,
    4 heads, vocab 65, block 64: 0.80 M parameters`` (``n_params``: counted before FSDP sharded it)."""
    n = count_params(model) if n_params is None else n_params
    config = getattr(model, "config", None)
    if config is None:
        return say("model_other", kind=type(model).__name__, block=block_size, params=parameter_count(n))
    if getattr(config, "arch", "lm") == "encoder-decoder":
        shape = say("encdec", enc=config.n_enc, dec=config.n_dec)
        kind = type(model).__name__
    else:
        shape = say("layer" if config.n_layers == 1 else "layers", n=config.n_layers)
        kind = f"{type(model).__name__} {config.attn}"
    return say("model", kind=kind, shape=shape, d=config.d_model, heads=config.n_heads, vocab=config.vocab_size,
               block=block_size, params=parameter_count(n))


def resume_line(out_dir: str, step: int, max_steps: int, checkpoint: str) -> str:
    """``resuming out/ at step 120 of 200 (from out/ckpt-000120)``, or that nothing is left to train."""
    left = say("resume_at" if step < max_steps else "resume_end", step=step, max_steps=max_steps)
    return say("resuming", out=out_dir.rstrip("/"), left=left, checkpoint=checkpoint)


def schedule_warnings(config: Any, step: int, before: Mapping[str, Any] | None = None) -> list[str]:
    """Warnings about the learning-rate schedule of a run that starts (or resumes) at ``step``: a cosine
    or wsd that never reaches ``min_lr`` (``lr_decay_steps`` past ``max_steps``), or one that jumps because
    ``max_steps`` differs from ``before`` (the checkpoint's training config; None: a fresh run)."""
    found = []
    kind = config.lr_schedule
    decaying = kind in ("cosine", "wsd")  # the schedules whose shape depends on max_steps
    decay = config.lr_decay_steps
    if decaying and decay and decay > config.max_steps:
        end = lr_at(config.max_steps - 1, kind, config.lr, config.warmup_steps, decay, config.min_lr, config.cooldown)
        found.append(f"warning: lr_decay_steps {decay} is past max_steps {config.max_steps}: the learning rate ends at "
                     f"{end:.2e}, not min_lr {config.min_lr:.2e}; set --lr_decay_steps {config.max_steps} (or drop "
                     f"it) to decay over this run")
    old = before.get("max_steps") if before else None
    if decaying and decay is None and old is not None and old != config.max_steps and step < config.max_steps:
        then = lr_at(step, kind, config.lr, config.warmup_steps, before.get("lr_decay_steps") or old, config.min_lr,
                     config.cooldown)
        now = lr_at(step, kind, config.lr, config.warmup_steps, config.max_steps, config.min_lr, config.cooldown)
        found.append(f"warning: max_steps changed from {old} to {config.max_steps} since the checkpoint: the {kind} "
                     f"schedule now decays over {config.max_steps} steps, so the learning rate at step {step} is "
                     f"{now:.2e} instead of {then:.2e}; add --lr_decay_steps {old} to keep the old schedule")
    return found


def _number(value: float, digits: int = 4) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.{digits}f}"


def summary_lines(result: Mapping[str, Any], max_steps: int) -> list[str]:
    """A training run's result in short lines: ``done: step 200 of 200 in 170.3 s, 1,178 tok/s (float32)``,
    then ``train_loss 1.9321 | val_loss 2.0012 (best 1.9987 at step 150) | val_ppl 7.3900 | ...``."""
    head = say("summary", verb=say("done" if result["stopped"] == "done" else "interrupted"), step=result["step"],
               max_steps=max_steps, wall=result["wall_s"], rate=result["tokens_per_s"], precision=result["precision"])
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
            text += say("best", value=_number(best), step=result.get("best_step", "?"))
        parts.append(text)
    return [head, " | ".join(parts)] if parts else [head]

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

# The lines a person reads, in English and Chinese (``glassformer --lang zh`` or a zh locale: the command
# calls use_language). Metric names (train_loss, val_loss, lr) stay as they are written in metrics.jsonl;
# warnings, like errors, stay English (they name options and are searched for).
TEXT: dict[str, dict[str, str]] = {
    "en": {
        "params_m": "{m:.2f} M parameters", "params": "{n:,} parameters",
        "model_other": "model: {kind}, block {block}: {params}",
        "model": "model: {kind}, {shape} x {d} wide, {heads} heads, vocab {vocab}, block {block}: {params}",
        "encdec": "{enc} encoder + {dec} decoder layers", "layers": "{n} layers", "layer": "{n} layer",
        "resume_at": "at step {step} of {max_steps}",
        "resume_end": "at step {step}: max_steps {max_steps} reached, nothing left to train",
        "resuming": "resuming {out}/ {left} (from {checkpoint})",
        "done": "done", "interrupted": "interrupted",
        "summary": "{verb}: step {step} of {max_steps} in {wall:.1f} s, {rate:,.0f} tok/s ({precision})",
        "best": " (best {value} at step {step})",
        "preparing": "preparing the data: {tokenizer} tokenizer and token cache from {n} file(s) ...",
        "nothing_to_resume": "resume: {out} holds no checkpoint to resume from; starting at step 0",
        "kept": "checkpoints in {kept}; summary in {summary}",
        "none_kept": "no checkpoint was written; summary in {summary}",
        "and": " and ",
        "resume_with": "interrupted at step {step} of {max_steps}; resume with: {command}",
        "same_torchrun": " (under the same torchrun)",
        "evaluating": "step {step}/{max_steps} | evaluating on the validation split ...",
        "wins": "{a} wins: {ea:.3f} vs {eb:.3f} exact match ({b})",
        "wins_symbols": "{a} wins on symbols: both {ea:.3f} exact match, {sa:.3f} vs {sb:.3f} symbol accuracy ({b})",
        "tie": "a tie: both {ea:.3f} exact match and {sa:.3f} symbol accuracy",
        "recipe": "recipe {task}{corpus}: {wall:.1f} s", "on_corpus": " on {corpus}", "training": "training",
        "sample": "sample {n} (prompt {prompt!r}):",
        "bleu": "BLEU on {split} ({n:,} sentences): ", "source": "source:   ", "reference": "reference:",
        "exact": "exact match {em:.3f}, symbol accuracy {sa:.3f}; ",
        "phase": "{name}: phase change {when}; {heads}; loss on the repeat {repeat:.3f} (first half {first:.3f})",
        "phase_at": "at step {step}", "phase_none": "not seen", "feature_pages": "feature pages: {path}",
        "everything": "everything in {out}/results.json",
    },
    "zh": {
        "params_m": "{m:.2f} M 个参数", "params": "{n:,} 个参数",
        "model_other": "模型：{kind}，窗口 {block}：{params}",
        "model": "模型：{kind}，{shape} × {d} 宽，{heads} 个头，词表 {vocab}，窗口 {block}：{params}",
        "encdec": "编码器 {enc} 层 + 解码器 {dec} 层", "layers": "{n} 层", "layer": "{n} 层",
        "resume_at": "从第 {step} 步继续（共 {max_steps} 步）",
        "resume_end": "已在第 {step} 步：max_steps {max_steps} 已达到，没有要训练的了",
        "resuming": "继续训练 {out}/：{left}（来自 {checkpoint}）",
        "done": "完成", "interrupted": "已中断",
        "summary": "{verb}：第 {step} 步（共 {max_steps} 步），用时 {wall:.1f} 秒，"
                   "每秒 {rate:,.0f} 个 token（{precision}）",
        "best": "（最佳 {value}，在第 {step} 步）",
        "preparing": "准备数据：{tokenizer} 分词器和 token 缓存，来自 {n} 个文件 ……",
        "nothing_to_resume": "resume：{out} 里没有可以继续的检查点；从第 0 步开始",
        "kept": "检查点在 {kept}；摘要在 {summary}",
        "none_kept": "没有写出检查点；摘要在 {summary}",
        "and": " 和 ",
        "resume_with": "在第 {step} 步（共 {max_steps} 步）中断；继续训练请运行：{command}",
        "same_torchrun": "（在同样的 torchrun 下）",
        "evaluating": "第 {step}/{max_steps} 步 | 正在验证集上评估 ……",
        "wins": "{a} 胜：完全匹配 {ea:.3f} 对 {eb:.3f}（{b}）",
        "wins_symbols": "{a} 按符号胜：完全匹配都是 {ea:.3f}，符号准确率 {sa:.3f} 对 {sb:.3f}（{b}）",
        "tie": "平局：完全匹配都是 {ea:.3f}，符号准确率都是 {sa:.3f}",
        "recipe": "配方 {task}{corpus}：{wall:.1f} 秒", "on_corpus": "（语料 {corpus}）", "training": "训练",
        "sample": "样例 {n}（提示 {prompt!r}）：",
        "bleu": "{split} 上的 BLEU（{n:,} 个句子）：", "source": "源句：  ", "reference": "参考译文：",
        "exact": "完全匹配 {em:.3f}，符号准确率 {sa:.3f}；",
        "phase": "{name}：相变 {when}；{heads}；重复部分的损失 {repeat:.3f}（前一半 {first:.3f}）",
        "phase_at": "在第 {step} 步", "phase_none": "没有出现", "feature_pages": "特征页面：{path}",
        "everything": "全部结果在 {out}/results.json",
    },
}
_language = "en"


def use_language(lang: str) -> None:
    """Print the lines of this module in ``lang`` ("en" or "zh") from now on; the command line calls it
    with its language (``--lang``, or the locale). Anything else is refused."""
    global _language
    if lang not in TEXT:
        raise ValueError(f"lang must be one of {', '.join(TEXT)}, got {lang!r}")
    _language = lang


def say(key: str, **fields: Any) -> str:
    """The line ``key`` of :data:`TEXT` in the current language, its ``{fields}`` filled in."""
    return TEXT[_language][key].format(**fields)


def parameter_count(n: int) -> str:
    """``0.80 M parameters`` (``6,304 parameters`` under ten thousand, where millions would read 0.01)."""
    return say("params_m", m=n / 1e6) if n >= 10_000 else say("params", n=n)


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

"""The training microscope: interpretability probes recorded into the run folder while a model trains.

At step 0 and then every ``every`` steps (default: at each evaluation), :class:`Microscope` runs the
model (in eval mode, without touching the random state) on two fixed probes and appends one record to
``out_dir/microscope.jsonl``:

    previous_token, induction, duplicate   (L, h) head scores on random tokens repeated twice
    loss_first, loss_repeat                the next-token loss on each copy of that probe
    entropy                                (L, h) mean attention entropy (nats) on the probe text
    lens_loss                              (L + 1,) the logit lens's next-token loss on the probe text,
                                           read before each block and after the last
    resid_norm                             (L + 1,) mean L2 norm of the residual stream at the same places
    weight_norm                            (L,) Frobenius norm of each block's parameters
    attention                              {"layer.head": (S, S)} patterns of the chosen heads on the
                                           first S tokens of the probe text's first row

``microscope.json`` (written once per run) holds the probe text's tokens, the chosen heads and the
settings. The records follow ``metrics.jsonl``'s rules: one strict-JSON line each, flushed to disk
before the checkpoint that covers it; a resumed run first drops the records after its step, so its
series equal an uninterrupted run's. ``glassformer inspect OUT_DIR`` draws them
(:mod:`glassformer.viz.report_run`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import yaml
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError, check_int
from ..fileio import atomic_write_text
from ..models import TransformerLM
from ..records import read_records, record_line
from .detectors import duplicate_token_scores, induction_scores, previous_token_scores, repeated_tokens
from .hooks import run_with_cache
from .lens import residual_names

RECORDS, META = "microscope.jsonl", "microscope.json"


@dataclass
class WatchConfig:
    """The ``watch:`` block of a training config: what the microscope records, and how often.

    Attributes:
        every: steps between records; 0 (default): at each evaluation (``eval_every``) and at the end.
        probe_length: n, the length of one copy in the repeated-tokens probe (2n tokens a row, after
            the tokenizer's bos if it has one); None: 20, or less to fit the model's ``max_len``.
        probe_batch: rows of that probe.
        text_rows: rows of the probe text (the first validation batch, cut to ``block_size``).
        snapshot_tokens: S, the tokens of the attention snapshots.
        heads: [[layer, head], ...] whose patterns are kept; empty: every head when there are at most
            16, else head 0 of each layer.
    """

    every: int = 0
    probe_length: int | None = None
    probe_batch: int = 16
    text_rows: int = 4
    snapshot_tokens: int = 24
    heads: list[list[int]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WatchConfig:
        """Build and check a ``watch:`` mapping; an unknown key or a bad value is an error naming it."""
        if not isinstance(data, dict):
            raise ArgumentTypeError(f"watch must be a mapping of its keys to values, got {data!r:.60}")
        known = [f.name for f in fields(cls)]
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise GlassformerError(f"unknown watch key(s) {unknown}; known keys: {known}")
        config = cls(**{k: _parsed(v) for k, v in data.items()})
        check_int("watch.every", config.every, 0)
        check_int("watch.probe_length", config.probe_length, 2, allow_none=True)
        for name in ("probe_batch", "text_rows", "snapshot_tokens"):
            check_int(f"watch.{name}", getattr(config, name), 1)
        if not isinstance(config.heads, list) or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(i, int) for i in p)
                for p in config.heads):
            raise ArgumentTypeError(f"watch.heads must be a list of [layer, head] pairs, got {config.heads!r:.80}")
        return config


def _parsed(value: Any) -> Any:
    """A command line's string ("10", "[[0, 3]]") as the YAML value it spells; anything else as it is."""
    if not isinstance(value, str):
        return value
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def _rounded(t: torch.Tensor, digits: int = 4) -> Any:
    """A tensor as nested lists of rounded floats (what a JSON line holds)."""
    return torch.round(t.double(), decimals=digits).tolist()


def _entropy(pattern: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of each head's attention rows: (B, h, T, T) -> (h,)."""
    p = pattern.float().clamp_min(1e-12)
    return -(pattern.float() * p.log()).sum(-1).mean((0, 2))


class Microscope:
    """Records the probes of one run (see the module's text); made by the trainer from ``config.watch``.

    Args:
        watch: the settings.
        model: a causal :class:`~glassformer.models.TransformerLM`.
        probe_text: (R, T) token ids of the probe text; ``tokens``: their strings (row 0), for the page.
        eval_every, max_steps: the run's cadence (``every`` = 0 records at its evaluations).
    Raises:
        GlassformerError for a model that is not a causal TransformerLM, or a head out of range.
    """

    def __init__(self, watch: WatchConfig, model: nn.Module, probe_text: torch.Tensor, tokens: list[str],
                 eval_every: int, max_steps: int, bos: int | None = None, low: int = 0):
        if not isinstance(model, TransformerLM) or model.config.attn != "causal":
            raise GlassformerError("watch: the microscope reads causal TransformerLMs (objective clm); "
                                   f"this run trains a {type(model).__name__} with attn={model.config.attn!r}")
        c = model.config
        self.watch, self.eval_every, self.max_steps, self.bos, self.low = watch, eval_every, max_steps, bos, low
        self.probe_text, self.tokens = probe_text, tokens
        L, h = c.n_layers, c.n_heads
        for layer, head in watch.heads:
            if not (0 <= layer < L and 0 <= head < h):
                raise GlassformerError(f"watch.heads: [{layer}, {head}] is out of range for {L} layers x {h} heads")
        self.heads = [list(p) for p in watch.heads] or (
            [[i, j] for i in range(L) for j in range(h)] if L * h <= 16 else [[i, 0] for i in range(L)])
        extra = 1 if bos is not None else 0
        self.probe_length = watch.probe_length or max(2, min(20, (c.max_len - extra) // 2))
        if 2 * self.probe_length + extra > c.max_len:
            raise GlassformerError(f"watch.probe_length={self.probe_length} needs max_len >= "
                                   f"{2 * self.probe_length + extra}, the model has {c.max_len}")
        self.file: Path | None = None

    # ------------------------------------------------------------------ the run folder
    def start(self, out_dir: str | Path, step: int, model: nn.Module) -> None:
        """Begin (or continue) the series in ``out_dir``: keep the records up to ``step`` (none on a
        fresh run), write ``microscope.json``, and record step 0 on a fresh run."""
        out = Path(out_dir)
        self.file = out / RECORDS
        kept = [r for r in read_records(self.file) if r["step"] <= step] if step > 0 else []
        atomic_write_text(self.file, "".join(record_line(r, compact=True) for r in kept))
        watch = {**asdict(self.watch), "probe_length": self.probe_length}
        meta = {"tokens": self.tokens, "heads": self.heads, "watch": watch,
                "n_layers": model.config.n_layers, "n_heads": model.config.n_heads}
        atomic_write_text(out / META, json.dumps(meta, indent=1) + "\n")
        if step == 0:
            self.record(model, 0)

    def due(self, step: int) -> bool:
        """Whether ``step`` (just finished) is a recording step."""
        every = self.watch.every or self.eval_every
        return step == self.max_steps or bool(every) and step % every == 0

    def record(self, model: nn.Module, step: int) -> dict[str, Any]:
        """Measure ``model`` now and append the record (flushed to disk); returns it."""
        record = self.measure(model, step)
        if self.file is not None:
            with open(self.file, "a", encoding="utf-8") as handle:
                handle.write(record_line(record, compact=True))
                handle.flush()
                os.fsync(handle.fileno())
        return record

    # ------------------------------------------------------------------ the probes
    @torch.no_grad()
    def measure(self, model: TransformerLM, step: int) -> dict[str, Any]:
        """One record (see the module's text); the model is back in its mode afterwards."""
        was_training = model.training
        model.eval()
        try:
            return {"step": step, **self._head_scores(model), **self._text_probes(model)}
        finally:
            model.train(was_training)

    def _head_scores(self, model: TransformerLM) -> dict[str, Any]:
        n, w = self.probe_length, self.watch
        device = model.emb.weight.device
        ids = repeated_tokens(model.config.vocab_size, n, w.probe_batch, low=self.low, bos=self.bos).to(device)
        logits, cache = run_with_cache(model, ids, names="pattern")
        patterns = cache.stack("pattern")  # (L, B, h, T, T)
        start = 0 if self.bos is None else 1
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
        loss = loss.view(w.probe_batch, -1)  # loss[:, i] predicts position i + 1
        return {"loss_first": float(loss[:, start:start + n - 1].mean()),
                "loss_repeat": float(loss[:, start + n:].mean()),
                "previous_token": _rounded(torch.stack([previous_token_scores(p) for p in patterns])),
                "induction": _rounded(torch.stack([induction_scores(p, n, start) for p in patterns])),
                "duplicate": _rounded(torch.stack([duplicate_token_scores(p, n, start) for p in patterns]))}

    def _text_probes(self, model: TransformerLM) -> dict[str, Any]:
        ids = self.probe_text.to(model.emb.weight.device)  # (R, T)
        names = residual_names(model)
        _, cache = run_with_cache(model, ids, names=[*names, "pattern"])
        lens_loss, resid_norm = [], []
        for name in names:
            resid = cache[name]  # (R, T, d)
            logits = model.logits(model.norm_f(resid))  # read as the model reads its last layer
            lens_loss.append(float(F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())))
            resid_norm.append(float(resid.float().norm(dim=-1).mean()))
        patterns = cache.stack("pattern")  # (L, R, h, T, T)
        S = min(self.watch.snapshot_tokens, ids.shape[1])
        snapshots = {f"{layer}.{head}": _rounded(patterns[layer, 0, head, :S, :S], 3) for layer, head in self.heads}
        weight_norm = [math.sqrt(sum(float(p.double().pow(2).sum()) for p in block.parameters()))
                       for block in model.blocks]
        return {"entropy": _rounded(torch.stack([_entropy(p) for p in patterns])),
                "lens_loss": [round(v, 5) for v in lens_loss], "resid_norm": [round(v, 4) for v in resid_norm],
                "weight_norm": [round(v, 4) for v in weight_norm], "attention": snapshots}




def microscope_for_run(watch: dict[str, Any], model: nn.Module, tokenizer: Any, batches: Any, eval_every: int,
                       max_steps: int, block_size: int) -> Microscope:
    """The :class:`Microscope` of a training run: its probe text is the first rows of the validation
    split (of the step-0 training batch when there is none), cut to ``block_size``."""
    config = WatchConfig.from_dict(watch)
    rows = next(iter(batches.eval_batches(config.text_rows, 1)), None) or batches.global_batch(0, config.text_rows)
    text = rows["ids"][:config.text_rows, :block_size].cpu()
    tokens = tokenizer.tokens(text[0, :config.snapshot_tokens].tolist())
    bos = tokenizer.bos_id  # the repeated-tokens probe starts with it, as the model's rows do
    low = max(tokenizer.special_tokens.values(), default=-1) + 1  # random probe tokens leave specials out
    low = low if low < tokenizer.vocab_size // 2 else 0
    return Microscope(config, model, text, tokens, eval_every, max_steps, bos=bos, low=low)

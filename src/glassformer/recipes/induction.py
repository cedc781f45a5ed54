"""Induction heads (Olsson et al. 2022) reproduced on a CPU: the ``induction`` recipe task. A 2-layer
attention-only model reads random segments, each repeated, while the training microscope scores its heads;
``recipe.gpt2`` also trains a GPT-2 model and scores it after a round trip through a Hugging Face folder;
``recipe.mlp_from_step`` trains a model with MLPs whose MLPs join late (configs/induction_heads_mlp.yaml).
"""

import json
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..config import ModelConfig
from ..data import step_generator
from ..errors import GlassformerError
from ..interop import load_hf_dir, save_hf_dir
from ..interpret import head_scores
from ..interpret.attribution import ATTRIBUTION, induction_patching
from ..interpret.measurements import detect_phase_change
from ..io.checks import check_int
from ..io.fileio import atomic_write
from ..io.loaders import read_records
from ..models import build_model
from ..tokenizers import CharTokenizer
from ..training import TrainConfig, Trainer, save_checkpoint
from ..training.microscope import RECORDS
from ..viz.heads import plot_head_scores, plot_phase_change
from .progress import say

ALPHABET = string.ascii_letters + string.digits  # the random tokens, readable in reports (62 at most)


class RepeatedSegments:
    """Rows ``<bos> r r r' r' ...`` (``r``: ``min_len`` to ``max_len`` of ``vocab`` random tokens, at most 62)
    cut to ``block_size + 1`` tokens, as Trainer batches; step s's batch depends only on (seed, s)."""

    def __init__(self, vocab: int = 62, block_size: int = 64, min_len: int = 6, max_len: int = 20, seed: int = 0,
                 eval_rows: int = 256):
        check_int("vocab", vocab, 2, len(ALPHABET))
        check_int("block_size", block_size, 4)
        check_int("min_len", min_len, 2)
        check_int("max_len", max_len, min_len)
        check_int("eval_rows", eval_rows, 1)
        self.tokenizer = CharTokenizer(list(ALPHABET[:vocab]), specials=["bos"])
        self.bos = self.tokenizer.bos_id
        self.low = self.bos + 1  # random tokens are ids low .. vocab_size - 1
        self.block_size, self.min_len, self.max_len, self.seed, self.eval_rows = (
            block_size, min_len, max_len, seed, eval_rows)

    def rows(self, count: int, generator: torch.Generator) -> torch.Tensor:
        """(count, block_size + 1) token ids drawn from ``generator``."""
        V, T = self.tokenizer.vocab_size, self.block_size + 1
        out = torch.empty(count, T, dtype=torch.long)
        for row in range(count):
            tokens = [self.bos]
            while len(tokens) < T:
                n = int(torch.randint(self.min_len, self.max_len + 1, (1,), generator=generator))
                segment = torch.randint(self.low, V, (n,), generator=generator).tolist()
                tokens += segment + segment
            out[row] = torch.tensor(tokens[:T])
        return out

    def batch(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Next-token batch of (B, block_size + 1) rows: ``ids`` and ``labels``, (B, block_size) each."""
        return {"ids": rows[:, :-1], "labels": rows[:, 1:]}

    def global_batch(self, step: int, batch_size: int) -> dict[str, torch.Tensor]:
        """The training batch of ``step``."""
        return self.batch(self.rows(batch_size, step_generator(self.seed, step)))

    def eval_batches(self, batch_size: int, max_batches: int | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """The fixed validation rows (a seed training never uses) in batches of ``batch_size``."""
        rows = self.rows(self.eval_rows, step_generator(self.seed, -1))
        for start in range(0, len(rows), batch_size)[:max_batches]:
            yield self.batch(rows[start:start + batch_size])


def measure(model: nn.Module, task: RepeatedSegments, step: int, length: int, batch: int) -> dict[str, Any]:
    """One point of the history: the head detectors on the probe (seed 0)."""
    was_training = model.training
    model.eval()
    try:
        scores = head_scores(model, length, batch, low=task.low, bos=task.bos)
    finally:
        model.train(was_training)
    return {"step": step, "loss_first": scores.loss_first, "loss_repeat": scores.loss_repeat,
            "previous_token": [[round(v, 4) for v in layer] for layer in scores.previous_token.tolist()],
            "induction": [[round(v, 4) for v in layer] for layer in scores.induction.tolist()]}


def phase_change_step(history: list[dict[str, Any]]) -> int | None:
    """The step of the phase change (an abrupt, lasting drop) in the repeated-copy loss, or None."""
    found = detect_phase_change([r["step"] for r in history], [r["loss_repeat"] for r in history])
    return None if found is None else found["step"]


def best_heads(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The best-scoring head of each kind in one history record: {kind: {"layer", "head", "score"}}."""
    best = {kind: max((s, l, h) for l, row in enumerate(record[kind]) for h, s in enumerate(row))
            for kind in ("previous_token", "induction")}
    return {kind: {"layer": layer, "head": head, "score": score} for kind, (score, layer, head) in best.items()}


def by_probe_length(model: nn.Module, task: RepeatedSegments, spec: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The control: each layer's best induction score and the repeat loss at each of ``spec["control_lengths"]``
    (an induction head follows content, so its score holds at every length; a fixed-offset head's does not)."""
    found = {}
    for length in (n for n in spec.get("control_lengths", [8, 12, 16, 20]) if 2 * n + 1 <= model.config.max_len):
        record = measure(model, task, -1, int(length), int(spec.get("probe_batch", 32)))
        found[int(length)] = {"induction_by_layer": [max(row) for row in record["induction"]],
                              "loss_repeat": record["loss_repeat"]}
    return found


def hold_mlps_at_zero(model: nn.Module) -> None:
    """Zero every MLP's output layer (weight and bias): each MLP then adds exactly 0 to the residual stream."""
    with torch.no_grad():
        for block in model.blocks:
            for p in block.ffn.down.parameters():  # its weight and bias (when it has one)
                p.zero_()


class MLPsJoinLate(Trainer):
    """A Trainer whose MLP parameters get no gradient before step ``mlp_from_step``: the optimizer holds them
    (so checkpoints and resume see one optimizer all along) but skips them while their gradient is None, so they
    stay exactly as they are (no update, no weight decay, no optimizer state); from that step on they train, their
    Adam moments starting from zero. Decided by the step at each update, so a resume on either side of the switch
    continues the same run. With :func:`hold_mlps_at_zero` first, the MLPs add exactly 0 until they join."""

    def __init__(self, *args: Any, mlp_from_step: int, **kwargs: Any):
        super().__init__(*args, **kwargs)  # the optimizer is made here, over every parameter
        self.mlp_from_step = mlp_from_step
        self.mlp = [p for block in self.model.blocks for p in block.ffn.parameters()]  # (checked: it has MLPs)

    def train_step(self) -> torch.Tensor:
        """:meth:`Trainer.train_step`, with the MLPs frozen before ``mlp_from_step``."""
        joined = self.step >= self.mlp_from_step
        for p in self.mlp:
            p.requires_grad_(joined)
            if not joined:
                p.grad = None  # a gradient left by anyone else would move them
        return super().train_step()

    def train(self) -> dict[str, Any]:
        """:meth:`Trainer.train`; the MLPs require gradients again afterwards (whatever the step)."""
        try:
            return super().train()
        finally:
            for p in self.mlp:
                p.requires_grad_(True)


def mlp_from_step(spec: dict[str, Any], model_config: ModelConfig, max_steps: int) -> int | None:
    """``spec["mlp_from_step"]`` (an int >= 0: :func:`~glassformer.recipes.run.check_recipe_section`) checked
    against the model (it needs MLPs) and the run (at most ``max_steps``); None when not set (0: set, but nothing
    is held back)."""
    value = spec.get("mlp_from_step")
    if value is None:
        return None
    if model_config.attn_only:
        raise GlassformerError(f"recipe.mlp_from_step={value} holds the MLPs back, but the model has none "
                               f"(model.attn_only: true); expected a model with MLPs (attn_only: false)")
    if value > max_steps:
        raise GlassformerError(f"recipe.mlp_from_step={value} must be at most max_steps={max_steps} (the MLPs "
                               f"would never train)")
    return value


def _train_and_measure(config: TrainConfig, model: nn.Module, task: RepeatedSegments,
                       mlp_from: int | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train ``model`` by ``config`` (its microscope on), its MLPs held at zero and frozen before step ``mlp_from``
    (None: all along); the history read back from the run folder, and the validation."""
    if mlp_from is None:
        trainer = Trainer(config, model, task.tokenizer, task)
    else:
        hold_mlps_at_zero(model)  # a resumed run reads its weights back over these
        trainer = MLPsJoinLate(config, model, task.tokenizer, task, mlp_from_step=mlp_from)
    trainer.train()
    kinds = ("step", "loss_first", "loss_repeat", "previous_token", "induction")
    history = [{k: r[k] for k in kinds} for r in read_records(Path(config.out_dir) / RECORDS)]
    save_checkpoint(Path(config.out_dir) / "model", model, task.tokenizer)
    return history, trainer.evaluate()


def run_induction(config: TrainConfig, spec: dict[str, Any]) -> dict[str, Any]:
    """Train the recipe's model (and with ``spec["gpt2"]`` the GPT-2 one), measuring its heads; returns
    {"attn_only": run, "gpt2": run}, each {"history", "phase_change_step", "final", "best_heads", ...}; the first
    is "with_mlps" when the model has MLPs. ``spec["mlp_from_step"]`` (that model only): its MLPs are held at zero
    and frozen until that step (:class:`MLPsJoinLate`)."""
    task = RepeatedSegments(int(spec.get("vocab", 62)), config.block_size, int(spec.get("min_len", 6)),
                            int(spec.get("max_len", 20)), config.seed)
    every = spec.get("measure_every", 10)  # these: ints >= 1, checked with the recipe section
    length, batch = spec.get("probe_length", 20), spec.get("probe_batch", 32)
    watch = {"every": every, "probe_length": length, "probe_batch": batch, **config.watch}
    out = Path(config.out_dir)
    runs: dict[str, Any] = {}
    first = config.model_config(task.tokenizer.vocab_size)
    mlp_from = mlp_from_step(spec, first, config.max_steps)  # checked before any work
    parts = [("attn_only" if first.attn_only else "with_mlps", first, config.max_steps)]
    if spec.get("gpt2"):
        c = first
        gpt2 = ModelConfig(vocab_size=c.vocab_size, d_model=c.d_model, n_heads=c.n_heads, n_layers=c.n_layers,
                           d_ff=int(spec.get("gpt2_d_ff", 4 * c.d_model)), max_len=config.block_size, pos="learned",
                           activation="gelu_tanh", scale_embeddings=False, init_std=c.init_std or 0.02)
        parts.append(("gpt2", gpt2, int(spec.get("gpt2_steps", config.max_steps))))

    for number, (name, model_config, steps) in enumerate(parts, 1):
        run_config = TrainConfig.from_dict({**config.to_dict(), "out_dir": str(out / name), "max_steps": steps,
                                            "watch": watch})
        late = mlp_from if name == "with_mlps" and mlp_from else None  # 0: the MLPs train from the start (plain)
        what = {"attn_only": "attention-only model", "gpt2": "GPT-2 model"}.get(
            name, "model with MLPs" if late is None else f"model with MLPs (held at zero until step {late})")
        say(f"{what} ({number} of {len(parts)}): {steps} steps into {run_config.out_dir}, its heads scored every "
            f"{every} steps (a line per {config.log_every} steps when no progress bar is "
            f"drawn)", config.progress)
        torch.manual_seed(config.seed)
        model = build_model(model_config)
        history, validation = _train_and_measure(run_config, model, task, late)
        run: dict[str, Any] = {"history": history, "phase_change_step": phase_change_step(history),
                               "final": history[-1], "best_heads": best_heads(history[-1]),
                               "by_probe_length": by_probe_length(model, task, spec),
                               "validation": validation, "out_dir": run_config.out_dir}
        if late is not None:
            run["mlp_from_step"] = late
        model.eval()  # attribution patching against exact patching, per head; the run page shows both
        say(f"attribution and exact patching of every head ({run_config.out_dir}/{ATTRIBUTION})", config.progress)
        run["attribution"] = induction_patching(model, length, batch, low=task.low, bos=task.bos)
        atomic_write(out / name / ATTRIBUTION, json.dumps(run["attribution"], indent=1) + "\n")
        if name == "gpt2":  # through a Hugging Face folder and back, as any GPT-2 would come in
            folder = save_hf_dir(model, None, out / name / "hf")
            loaded, _ = load_hf_dir(folder)
            after = measure(loaded, task, steps, length, batch)
            run.update(hf_folder=str(folder), loaded_through_interop=after, best_heads=best_heads(after))
        title = {"attn_only": "attention-only", "gpt2": "GPT-2 architecture"}.get(name, "with MLPs")
        title = f"{model_config.n_layers}-layer {title}"
        plot_phase_change(history, out / name / "phase_change.png", f"{title}: the phase change")
        plot_head_scores(history, out / name / "head_scores.png", f"{title}: every head over training")
        runs[name] = run
    return runs

"""The tiny character LM lesson (lesson 12), end to end: a 2-layer model learns four built-in lines of Chinese
in seconds, every step shown (windows, shapes, LayerNorm by hand, causality, training, greedy trace, reload).
"""

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..checks import check_causality
from ..config import ModelConfig
from ..data import LMBatches
from ..generation import trace_generation
from ..io.fileio import atomic_write, claim_outputs
from ..models import build_model, count_params
from ..nn.norms import make_norm
from ..tokenizers import CharTokenizer
from ..training import TrainConfig, Trainer, evaluate, save_checkpoint
from ..training.checkpoint import load
from ..training.run_dir import check_run_dir
from ..viz.i18n import text
from ..viz.plots import plot_attention, plot_losses
from ..viz.shapes import shape_trace

LINES = ["春天来了，花开了。", "夏天来了，蝉叫了。", "秋天来了，叶落了。", "冬天来了，雪下了。"]
PREFIX = "春天来了，"
EXPECTED = "春天来了，花开了。"  # what the trained model must generate from PREFIX
CONTEXT, STEPS, BATCH, LR, SEED, GENERATE = 16, 320, 32, 0.004, 1212, 12


class AllWindows(LMBatches):
    """Random training windows of the corpus ``ids``; evaluation: every (N, T) window ``x`` and its targets ``y``."""

    def __init__(self, ids: np.ndarray, x: torch.Tensor, y: torch.Tensor) -> None:
        super().__init__("clm", ids, ids, CONTEXT, SEED)
        self.x, self.y = x, y

    def eval_batches(self, batch_size: int, max_batches: int | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """One batch, whatever the sizes asked: every window."""
        yield {"ids": self.x, "labels": self.y}


# What run() writes into ``out`` itself, beside the folders run/ and tiny-char-lm/.
OUTPUT_FILES = ("results.json", "loss_curve.png", "attention_layer1.png", "attention_layer2.png")


def run(out: str | Path, steps: int = STEPS, progress: bool = True) -> dict[str, Any]:
    """Run the lesson for ``steps`` training steps, writing to ``out`` :data:`OUTPUT_FILES`, the checkpoint
    ``tiny-char-lm/`` and the trainer's ``run/``. Returns the results (also in results.json); a RuntimeError
    when one of the lesson's checks (LayerNorm by hand, causality, reload) fails.
    """
    started = time.perf_counter()
    out = Path(out)
    claim_outputs([out / name for name in OUTPUT_FILES], what="demo output")  # a user's file there: refused now
    check_run_dir(out / "run")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    corpus = "\n".join(LINES) + "\n"
    tokenizer = CharTokenizer.from_text(corpus)
    ids = np.asarray(tokenizer.encode(corpus), dtype=np.int64)
    data = torch.from_numpy(ids)
    x = data[:-1].unfold(0, CONTEXT, 1)  # (N, T): every window whose next-token targets exist
    y = data[1:].unfold(0, CONTEXT, 1)  # (N, T), x shifted by one

    config = ModelConfig.preset("tiny-char", vocab_size=tokenizer.vocab_size, max_len=CONTEXT)
    model = build_model(config)
    shapes = shape_trace(model, x[:2])
    norm = make_norm("layernorm", 4, 1e-5)
    norm_input = torch.tensor([1.0, 2.0, 3.0, 4.0])
    with torch.no_grad():
        normalized = norm(norm_input)
    by_hand = (norm_input - norm_input.mean()) / torch.sqrt(norm_input.var(correction=0) + 1e-5)
    branch = torch.tensor([0.5, -0.5, 1.0, -1.0])
    residual = norm_input + branch
    if not torch.allclose(normalized, by_hand) or not torch.equal(residual, torch.tensor([1.5, 1.5, 4.0, 3.0])):
        raise RuntimeError(f"LayerNorm/residual check failed: {normalized.tolist()} vs {by_hand.tolist()}")
    causality = check_causality(model, x[:1])
    if not causality.ok:
        raise RuntimeError(f"causality check failed: a future token changed earlier logits by {causality.max_leak}")

    train_config = TrainConfig(max_steps=steps, batch_size=BATCH, block_size=CONTEXT, lr=LR, lr_schedule="constant",
                               warmup_steps=0, weight_decay=0.01, beta2=0.999, grad_clip=0.0, eval_every=20,
                               log_every=20, seed=SEED, device="cpu", out_dir=str(out / "run"), progress=progress)
    batches = AllWindows(ids, x, y)
    initial = evaluate(model, batches)["val_loss"]
    trained = Trainer(train_config, model, tokenizer, batches).train()
    plot_losses(trained["history"], out / "run" / "loss.png")  # the trainer's own curve, as `glassformer train` draws
    history = [{"step": 0, "train_loss": initial}] + [
        {"step": h["step"], "train_loss": h["val_loss"]} for h in trained["history"] if "val_loss" in h]
    accuracy = evaluate(model, batches)["val_accuracy"]  # next-token accuracy on every window
    model.eval()

    records = trace_generation(model, tokenizer.encode(PREFIX), max_new_tokens=GENERATE, top_k=4,
                               tokenizer=tokenizer)
    generated = PREFIX + "".join(r["chosen_text"] for r in records)
    steps_out = [{"step": r["step"], "context": r["context_text"], "chosen": r["chosen_text"],
                  "chosen_probability": r["chosen_probability"],
                  "top4": [{"char": c, "probability": p} for c, p in r["top_k_text"]]} for r in records]
    checkpoint = save_checkpoint(out / "tiny-char-lm", model, tokenizer)
    reloaded, reloaded_tokenizer = load(checkpoint)
    with torch.inference_mode():
        reload_diff = float((reloaded(x[:2]) - model(x[:2])).abs().max())
    if reload_diff != 0.0 or reloaded_tokenizer.to_dict() != tokenizer.to_dict():
        raise RuntimeError(f"the reloaded checkpoint differs from the trained model (max logit diff {reload_diff})")
    line = torch.tensor([tokenizer.encode(LINES[0])])
    with torch.inference_mode():
        _, attention = model(line, return_attn=True)
    pieces = tokenizer.tokens(line[0].tolist())
    files = {"loss_curve": str(plot_losses(history, out / "loss_curve.png", "tiny char LM: loss on all windows"))}
    for layer in range(config.n_layers):
        files[f"attention_layer{layer + 1}"] = str(plot_attention(
            attention, pieces, out / f"attention_layer{layer + 1}.png", layers=[layer],
            title=f"layer {layer} (counted from 0, as the hooks do): attention on {LINES[0]!r}"))

    result = {
        "torch_version": torch.__version__, "device": "cpu", "lines": LINES, "corpus": corpus,
        "vocab": tokenizer.chars,
        "configuration": {"context": CONTEXT, "d_model": config.d_model, "heads": config.n_heads,
                          "head_width": config.head_dim, "layers": config.n_layers, "ffn_width": config.d_ff,
                          "steps": steps, "batch_size": BATCH, "lr": LR, "parameters": count_params(model),
                          "sampling": "greedy argmax"},
        "window_count": len(x), "shapes": shapes,
        "shift_example": {"input": list(corpus[:8]), "target": list(corpus[1:9])},
        "norm_example": {"input": norm_input.tolist(), "mean": float(norm_input.mean()),
                         "variance": float(norm_input.var(correction=0)), "epsilon": 1e-5,
                         "normalized": normalized.tolist(), "branch": branch.tolist(), "sum": residual.tolist()},
        "causal_earlier_logits_max_diff": causality.max_leak,
        "causality": {"max_leak": causality.max_leak, "max_visible_change": causality.max_visible_change,
                      "checks": causality.checks},
        "history": history, "final_train_token_accuracy": accuracy,
        "generation": {"prefix": PREFIX, "text": generated, "steps": steps_out},
        "checkpoint": {"path": str(checkpoint), "reload_max_logit_diff": reload_diff},
        "files": files, "wall_seconds": round(time.perf_counter() - started, 2),
    }
    atomic_write(out / "results.json", json.dumps(result, ensure_ascii=False, indent=2), what="demo output")
    result["files"]["results"] = str(out / "results.json")
    return result


def summary(result: dict[str, Any], lang: str = "en") -> str:
    """A readable account of :func:`run`'s results in ``lang`` ("en" or "zh"): a line per finding and step."""
    c, gen = result["configuration"], result["generation"]
    history = result["history"]
    norm = result["norm_example"]
    lines = [
        text("demo.title", lang),
        text("demo.corpus", lang, chars=len(result["corpus"]), distinct=len(result["vocab"]),
             windows=result["window_count"], context=c["context"]),
        text("demo.shift", lang, input=repr("".join(result["shift_example"]["input"])),
             target=repr("".join(result["shift_example"]["target"]))),
        text("demo.model", lang, layers=c["layers"], d_model=c["d_model"], heads=c["heads"],
             head_width=c["head_width"], ffn=c["ffn_width"], params=f"{c['parameters']:,}"),
        text("demo.shapes", lang, shapes=", ".join(f"{k} {tuple(v)}" for k, v in result["shapes"].items())),
        text("demo.norm", lang, normalized=[round(v, 4) for v in norm["normalized"]], sum=norm["sum"]),
        text("demo.causality", lang, checks=result["causality"]["checks"],
             leak=f"{result['causality']['max_leak']:.1e}"),
        text("demo.training", lang, history="  ".join(
            f"{h['step']}:{h['train_loss']:.3f}" for i, h in enumerate(history)
            if i % max(1, len(history) // 6) == 0 or i == len(history) - 1)),
        text("demo.accuracy", lang, accuracy=f"{result['final_train_token_accuracy']:.3f}"),
        text("demo.greedy", lang, prefix=repr(gen["prefix"])),
    ]
    for s in gen["steps"]:
        top = "  ".join(f"{t['char']!r} {t['probability']:.2f}" for t in s["top4"])
        lines.append(text("demo.step", lang, step=s["step"], context=repr(s["context"]), chosen=repr(s["chosen"]),
                          p=f"{s['chosen_probability']:.2f}", top=top))
    lines += [text("demo.generated", lang, text=repr(gen["text"])),
              text("demo.checkpoint", lang, path=result["checkpoint"]["path"],
                   diff=result["checkpoint"]["reload_max_logit_diff"]),
              text("demo.wrote", lang, files=", ".join(Path(p).name for p in result["files"].values()),
                   folder=Path(result["files"]["results"]).parent, seconds=f"{result['wall_seconds']:.1f}")]
    return "\n".join(lines)

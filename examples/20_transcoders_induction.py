"""Transcoders for the induction recipe's GPT-2-architecture model (2 layers, MLPs; configs/induction_heads.yaml).

Trains that model as docs/results.md's longer, gentler run does (6,000 steps at lr 1e-3: it learns to copy),
or reads one with --checkpoint (e.g. out/induction_heads/model after ``glassformer recipe induction_heads``),
writes a corpus of its rows (random segments, each repeated), trains
a per-layer transcoder set on its MLPs and prints the held-out normalised MSE per layer, L0, the loss with
every MLP replaced, and the time each part took (docs/transcoders.md quotes this script's output).

    python examples/20_transcoders_induction.py --out out/induction_transcoders
"""

import argparse
import json
import time
from pathlib import Path

import torch

from glassformer.config import ModelConfig
from glassformer.interpret.transcoders import TranscoderTrainConfig, run_transcoders
from glassformer.models import build_model
from glassformer.recipes.induction import ALPHABET, RepeatedSegments
from glassformer.runtime.kernel_choice import cpu_name
from glassformer.training import TrainConfig, Trainer, load_checkpoint, save_checkpoint
from glassformer.viz.report_sae import write_transcoder_pages


def train_model(out: Path, steps: int, lr: float, seed: int) -> tuple[torch.nn.Module, RepeatedSegments]:
    """The recipe's GPT-2-architecture model (d_model 64, 4 heads, 2 layers, d_ff 256) trained ``steps`` steps
    at a constant ``lr`` (docs/results.md: 6,000 steps at 1e-3 learn to copy; the recipe's 3,000 at 3e-3 not)."""
    task = RepeatedSegments(62, 64, 6, 20, seed)
    config = ModelConfig(vocab_size=task.tokenizer.vocab_size, d_model=64, n_heads=4, n_layers=2, d_ff=256,
                         max_len=64, pos="learned", activation="gelu_tanh", scale_embeddings=False,
                         init_std=0.02)
    train = TrainConfig.from_dict({"block_size": 64, "batch_size": 32, "max_steps": steps, "lr": lr,
                                   "lr_schedule": "constant", "warmup_steps": 100, "weight_decay": 0.0,
                                   "eval_every": 0, "progress": False, "seed": seed, "out_dir": str(out / "train"),
                                   "precision": "float32"})
    torch.manual_seed(seed)
    model = build_model(config)
    Trainer(train, model, task.tokenizer, task).train()
    save_checkpoint(out / "model", model, task.tokenizer)
    return model.eval(), task


def write_corpus(path: Path, task: RepeatedSegments, rows: int, seed: int) -> None:
    """``rows`` rows of the task as one line of text (no <bos>: windows are read anywhere in it)."""
    ids = task.rows(rows, torch.Generator().manual_seed(seed))[:, 1:]  # (rows, block_size), <bos> dropped
    text = "".join(ALPHABET[int(i) - task.low] for i in ids.flatten())
    path.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/induction_transcoders"))
    parser.add_argument("--checkpoint", type=Path, help="the recipe's trained model (else trained here)")
    parser.add_argument("--model_steps", type=int, default=6000, help="training steps of the model")
    parser.add_argument("--model_lr", type=float, default=1e-3, help="its learning rate")
    parser.add_argument("--steps", type=int, default=3000, help="transcoder training steps")
    parser.add_argument("--d_transcoder", type=int, default=512)
    parser.add_argument("--activation", default="jumprelu", help="jumprelu, relu or topk")
    parser.add_argument("--k", type=int, default=16, help="topk: features per layer and token")
    parser.add_argument("--threshold", type=float, default=1.0, help="jumprelu: every threshold's start")
    parser.add_argument("--sparsity_coefficient", type=float, default=2e-3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if args.checkpoint:
        loaded = load_checkpoint(args.checkpoint)
        model, task = loaded.model.eval(), RepeatedSegments(62, 64, 6, 20, 0)
    else:
        model, task = train_model(args.out, args.model_steps, args.model_lr, seed=0)
    model_s = time.perf_counter() - started
    corpus = args.out / "segments.txt"
    write_corpus(corpus, task, 4000, seed=1)
    config = TranscoderTrainConfig.from_dict({
        "data": [str(corpus)], "out_dir": str(args.out / "transcoders"), "kind": "plt",
        "activation": args.activation, "k": args.k, "threshold": args.threshold, "d_transcoder": args.d_transcoder,
        "steps": args.steps, "batch_size": 1024,
        "buffer_size": 16384, "context": 64, "model_batch": 32, "lr": 1e-3, "lr_decay_steps": args.steps // 5,
        "sparsity_coefficient": args.sparsity_coefficient, "sparsity_warmup_steps": args.steps // 10,
        "eval_batches": 8, "feature_windows": 64, "progress": False, "log_every": 100})
    result = run_transcoders(config, model, task.tokenizer)
    m = result["metrics"]
    write_transcoder_pages(result["features"], args.out / "transcoders", metrics=m)  # features-L{i}.html
    report = {"cpu": cpu_name(), "threads": args.threads, "model_s": round(model_s, 1),
              "transcoders_s": result["training"]["wall_s"], "steps": args.steps, "d_transcoder": args.d_transcoder,
              "activation": args.activation, "nmse": [round(v, 4) for v in m["nmse"]],
              "l0": [round(v, 1) for v in m["l0"]], "dead": m["dead"],
              **{k: round(m[k], 4) for k in ("ce_clean", "ce_replaced", "ce_zero", "ce_recovered") if k in m}}
    (args.out / "result.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()

"""glassformer's SAE trainer against SAELens on the same activations: variance explained, L0, wall time.

    python benchmarks/bench_sae_lens.py --checkpoint out/shakespeare_char_sae/best \
        --saelens_python /work/saelens-venv/bin/python [--steps 1000 --k 16 --expansion 8]

1. Activations of ``--hook`` are read once from ``--data`` through the checkpoint's model (glassformer's
   ActivationSource: random windows of the training split; held-out rows from the last 10%), scaled so
   that their norm averages √d_in (both sides then train with normalisation off), shuffled once, and
   written to ``--work``/activations.pt.
2. glassformer's TopK SAE trains on them: the same batches in the same order (``SAETrainer.train_step``).
3. SAELens (``sae-lens`` 6.x, its own virtual environment: it pins transformer-lens < 4, glassformer's
   tests use 4.x) trains ``TopKTrainingSAE`` with its ``SAETrainer`` on the same batch iterator: this
   file run by that interpreter with ``--worker``.
4. Both SAEs are measured by one function (below) on the same held-out rows: fraction of variance
   explained, L0, MSE. Wall time is the training loop alone, on the same CPU, with the same threads.

Same hyperparameters on both sides: d_sae, k, lr, Adam betas, batch, steps, dead-feature window, AuxK
coefficient. Differences that stay (each library's own design, named in the output): SAELens scales
its AuxK loss by min(dead / k_aux, 1) and keeps the decoder's norm free (rescaling activations by it),
glassformer projects decoder gradients and renormalises rows; initialisations differ (SAELens: decoder
rows at norm 0.1, b_dec zero; glassformer: unit rows, b_dec at the geometric median).
Writes ``--out`` (JSON) and prints a table. Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch


def measure(encode, decode, rows: torch.Tensor) -> dict[str, float]:
    """Fraction of variance explained, L0 and MSE of an SAE (encode, decode) on rows (N, d); both sides use this."""
    n, sq_err, l0 = 0, 0.0, 0.0
    with torch.no_grad():
        for chunk in rows.split(4096):
            f = encode(chunk)
            recon = decode(f)
            sq_err += float((chunk.double() - recon.double()).pow(2).sum())
            l0 += float((f > 0).sum())
            n += len(chunk)
    x = rows.double()
    variance = float((x - x.mean(0)).pow(2).sum())
    return {"explained_variance": 1 - sq_err / variance, "l0": l0 / n, "mse": sq_err / (n * rows.shape[1])}


def batches(rows: torch.Tensor, batch: int):
    """The training batches, in order, cycling through the rows."""
    start = 0
    while True:
        if start + batch > len(rows):
            start = 0
        yield rows[start:start + batch]
        start += batch


class Rows:
    """Fixed rows as an activation source (SAETrainer wants one; the loop below feeds batches itself)."""

    def __init__(self, rows: torch.Tensor):
        self.rows = rows

    def next_rows(self) -> torch.Tensor:
        return self.rows

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


# ------------------------------------------------------------------------------------------- SAELens side
def saelens_worker(args: argparse.Namespace) -> None:
    """Train SAELens's TopK SAE on the saved activations and print its measurements as JSON."""
    import sae_lens
    from sae_lens.config import LoggingConfig, SAETrainerConfig
    from sae_lens.saes.topk_sae import TopKTrainingSAE, TopKTrainingSAEConfig
    from sae_lens.training.sae_trainer import SAETrainer

    torch.set_num_threads(args.threads)
    data = torch.load(args.work / "activations.pt", weights_only=True)
    train, held_out = data["train"], data["held_out"]
    d_in = train.shape[1]
    torch.manual_seed(args.seed)
    sae = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=d_in, d_sae=args.expansion * d_in, k=args.k, dtype="float32",
                                                device="cpu", normalize_activations="none",
                                                aux_loss_coefficient=args.aux_coefficient))
    config = SAETrainerConfig(total_training_samples=args.steps * args.batch, train_batch_size_samples=args.batch,
                              lr=args.lr, adam_beta1=0.9, adam_beta2=0.999, lr_decay_steps=args.lr_decay_steps,
                              lr_end=0.0 if args.lr_decay_steps else None, dead_feature_window=args.dead_window,
                              feature_sampling_window=args.steps, device="cpu",
                              logger=LoggingConfig(log_to_wandb=False))
    trainer = SAETrainer(config, sae, batches(train, args.batch))
    started = time.perf_counter()
    trainer.fit()
    wall = time.perf_counter() - started
    sae.eval()
    found = measure(sae.encode, sae.decode, held_out)
    print(json.dumps({"wall_s": wall, **found, "version": sae_lens.__version__, "torch": torch.__version__}))


# ------------------------------------------------------------------------------------------- glassformer side
def prepare(args: argparse.Namespace) -> dict:
    """Read the activations once (train and held-out), scale them, shuffle, save; return facts about them."""
    from glassformer.interpret.sae import ActivationSource
    from glassformer.interpret.sae.model import estimate_input_scale
    from glassformer.training import load

    model, tokenizer = load(args.checkpoint)
    parts = {}
    for split, count, seed in (("train", args.rows, args.seed), ("val", args.held_out, args.seed + 1)):
        source = ActivationSource(model, tokenizer, args.hook, [args.data], context=model.config.max_len,
                                  batch=64, split=split, seed=seed)
        rows, have = [], 0
        while have < count:
            rows.append(source.next_rows())
            have += len(rows[-1])
        parts[split] = torch.cat(rows)[:count]
    scale = estimate_input_scale(parts["train"])
    g = torch.Generator().manual_seed(args.seed)
    train = (parts["train"] * scale)[torch.randperm(len(parts["train"]), generator=g)].contiguous()
    held_out = (parts["val"] * scale).contiguous()
    args.work.mkdir(parents=True, exist_ok=True)
    torch.save({"train": train, "held_out": held_out}, args.work / "activations.pt")
    return {"d_in": train.shape[1], "train_rows": len(train), "held_out_rows": len(held_out), "scale": scale}


def glassformer_side(args: argparse.Namespace) -> dict:
    from glassformer.interpret.sae import SAETrainConfig, SAETrainer

    torch.set_num_threads(args.threads)
    data = torch.load(args.work / "activations.pt", weights_only=True)
    train, held_out = data["train"], data["held_out"]
    config = SAETrainConfig.from_dict(dict(hook=args.hook, kind="topk", expansion=args.expansion, k=args.k,
                                           lr=args.lr, lr_decay_steps=args.lr_decay_steps, batch_size=args.batch,
                                           steps=args.steps, dead_window=args.dead_window, normalize=False,
                                           aux_coefficient=args.aux_coefficient, seed=args.seed,
                                           out_dir=str(args.work / "glassformer"), progress=False))
    trainer = SAETrainer(config, source=Rows(train), d_in=train.shape[1])  # batches are fed by hand below
    stream = batches(train, args.batch)
    started = time.perf_counter()
    trainer.initialize(train[:8192])
    for _ in range(args.steps):
        trainer.train_step(next(stream))
    wall = time.perf_counter() - started
    sae = trainer.sae.eval()
    import glassformer

    return {"wall_s": wall, **measure(sae.encode, sae.decode, held_out), "version": glassformer.__version__,
            "torch": torch.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=Path("out/shakespeare_char_sae/best"))
    parser.add_argument("--data", type=Path, default=None, help="default: the shipped tinyshakespeare")
    parser.add_argument("--hook", default="blocks.2.hook_resid_post")
    parser.add_argument("--saelens_python", default="/work/saelens-venv/bin/python")
    parser.add_argument("--work", type=Path, default=Path("out/bench_sae_lens"))
    parser.add_argument("--out", type=Path, default=Path("out/bench_sae_lens/results.json"))
    parser.add_argument("--rows", type=int, default=262144, help="training activations (cycled)")
    parser.add_argument("--held_out", type=int, default=32768)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--expansion", type=int, default=8)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lr_decay_steps", type=int, default=200)
    parser.add_argument("--dead_window", type=int, default=250)
    parser.add_argument("--aux_coefficient", type=float, default=1 / 32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads on both sides (1: see docs/results.md)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        saelens_worker(args)
        return
    from glassformer.runtime.kernel_choice import cpu_name  # here: the SAELens worker's environment has no glassformer

    if args.data is None:
        from glassformer.recipes import corpora

        args.data = corpora.tinyshakespeare(None, False)
    facts = prepare(args)
    ours = glassformer_side(args)
    command = [args.saelens_python, __file__, "--worker", *sys.argv[1:]]
    if "--work" not in sys.argv:
        command += ["--work", str(args.work)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "disabled"})
    if done.returncode != 0:
        theirs = {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    else:
        theirs = json.loads(done.stdout.strip().splitlines()[-1])
    result = {"activations": facts, "hook": args.hook, "checkpoint": str(args.checkpoint), "cpu": cpu_name(),
              "threads": args.threads, "load_average": os.getloadavg()[0],
              "hyperparameters": {k: getattr(args, k) for k in ("steps", "batch", "expansion", "k", "lr",
                                                                "lr_decay_steps", "dead_window", "aux_coefficient")},
              "glassformer": ours, "sae_lens": theirs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'':14} {'variance explained':>19} {'L0':>6} {'MSE':>9} {'wall s':>8}")
    for name, side in (("glassformer", ours), ("SAELens", theirs)):
        if "error" in side:
            print(f"{name:14} error: {side['error']}")
        else:
            print(f"{name:14} {side['explained_variance']:19.4f} {side['l0']:6.1f} {side['mse']:9.5f} "
                  f"{side['wall_s']:8.1f}")
    print(f"{facts['train_rows']:,} training rows (d_in {facts['d_in']}), {facts['held_out_rows']:,} held out; "
          f"{args.steps} steps of {args.batch}; {result['cpu']}, {args.threads} threads, "
          f"load {result['load_average']:.1f}")


if __name__ == "__main__":
    main()

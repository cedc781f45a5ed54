"""``glassformer train --config FILE.yaml [--key value ...]``: train with any of the four objectives.

Runs the same way alone or under ``torchrun --nproc_per_node=N`` (see docs/training.md).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from ..fileio import Writes

WRITES = (Writes(("train", "--config", "{config}", "--out_dir", "{out}"),
                 ("{out}/metrics.jsonl", "{out}/loss.png", "{out}/microscope.jsonl", "{out}/microscope.json",
                  "{out}/tracker.json", "{out}/.glassformer.lock")),)
"""What this verb writes (tests/test_outputs_guard.py guards every file)."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``train`` verb to the ``glassformer`` subparsers (it takes ``--key value`` overrides)."""
    parser = sub.add_parser(
        "train", help="train on your own text files from a YAML config (clm, mlm, prefix-LM or seq2seq)",
        description="Train from a YAML config; any key can be overridden on the command line as --key value "
                    "(model fields as --model.KEY value). Writes checkpoints (ckpt-NNNNNN/ folders, pointed to by last "
                    "and best), metrics.jsonl and loss.png to out_dir; SIGTERM or Ctrl-C stops after saving. "
                    "--log tensorboard (or wandb, or tensorboard,wandb) also sends the run to a tracker. "
                    "Keys and defaults: docs/training.md.",
        epilog="example: glassformer train --config configs/shakespeare_char.yaml --max_steps 500 --out_dir out/sc",
        allow_abbrev=False)
    parser.add_argument("--config", type=Path, help="YAML file of training keys (optional: overrides alone work)")
    parser.set_defaults(func=run, overrides=[])


def run(args: argparse.Namespace) -> int:
    """Train as ``args.config`` plus ``args.overrides`` say; print the summary as one JSON line.

    Rank 0 draws ``out_dir/loss.png`` from the run's history, also when training stops with an error.
    Returns 0, or 128 + the signal number when Ctrl-C (130) or SIGTERM (143) stopped the run after
    saving a checkpoint.
    """
    from ..training import TrainConfig, Trainer, prepare_run
    from ..training.checkpoint import find_resumable
    from ..training.distributed import init_distributed, shutdown
    from ..viz.plots import plot_losses
    from .overrides import overrides_from_argv

    config = TrainConfig.from_yaml(args.config, overrides_from_argv(args.overrides))
    config.check_data()
    dist = init_distributed(config.device)
    try:
        if dist.is_main and config.progress:  # reading files and training a BPE tokenizer can take a while
            files = [config.pairs] if config.pairs else [config.src] if config.src else config.data
            print(f"preparing the data: {config.tokenizer} tokenizer and token cache from {len(files)} file(s) ...",
                  file=sys.stderr, flush=True)
        run_ = prepare_run(config)
        if config.resume and dist.is_main and find_resumable(config.out_dir) is None:
            print(f"resume: {config.out_dir} holds no checkpoint to resume from; starting at step 0", file=sys.stderr)
        trainer = Trainer(config, run_.model, run_.tokenizer, run_.batches, dist=dist)
        try:
            result = trainer.train()
        finally:
            if dist.is_main and trainer.history:
                plot_losses(trainer.history, Path(config.out_dir) / "loss.png")
    finally:
        shutdown(dist)
    if dist.is_main:
        shown = {k: (round(v, 4) if math.isfinite(v) else None) if isinstance(v, float) else v
                 for k, v in result.items() if k != "history"}  # strict JSON: no NaN token
        print(json.dumps(shown))
        kept = [str(Path(config.out_dir) / name) for name in ("last", "best") if (Path(config.out_dir) / name).exists()]
        print(f"checkpoints in {' and '.join(kept)}" if kept else "no checkpoint was written")
    return 128 + int(trainer.stop_signal or 2) if result["stopped"] == "interrupted" else 0

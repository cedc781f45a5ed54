"""``glassformer train --config FILE.yaml [--key value ...]``: train with any of the four objectives.

Runs the same way alone or under ``torchrun --nproc_per_node=N`` (see docs/training.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``train`` verb to the ``glassformer`` subparsers (it takes ``--key value`` overrides)."""
    parser = sub.add_parser(
        "train", help="train a model from a YAML recipe (clm, mlm, prefix-LM or seq2seq)",
        description="Train from a YAML config; any key can be overridden on the command line as --key value "
                    "(model fields as --model.KEY value). Writes checkpoints (last/, best/), metrics.jsonl and "
                    "loss.png to out_dir. Keys and defaults: docs/training.md.",
        epilog="example: glassformer train --config configs/shakespeare_char.yaml --max_steps 500 --out_dir out/sc")
    parser.add_argument("--config", type=Path, help="YAML file of training keys (optional: overrides alone work)")
    parser.set_defaults(func=run, overrides=[])


def run(args: argparse.Namespace) -> int:
    """Train as ``args.config`` plus ``args.overrides`` say; print the summary as one JSON line.

    Rank 0 draws ``out_dir/loss.png`` from the run's history, also when training stops with an error.
    Returns 0, or 130 when Ctrl-C stopped the run (after saving ``last/``).
    """
    from ..training import TrainConfig, Trainer, prepare_run
    from ..training.distributed import init_distributed, shutdown
    from ..viz.plots import plot_losses
    from .overrides import overrides_from_argv

    config = TrainConfig.from_yaml(args.config, overrides_from_argv(args.overrides))
    config.check_data()
    dist = init_distributed(config.device)
    try:
        run_ = prepare_run(config)
        trainer = Trainer(config, run_.model, run_.tokenizer, run_.batches, dist=dist)
        try:
            result = trainer.train()
        finally:
            if dist.is_main and trainer.history:
                plot_losses(trainer.history, Path(config.out_dir) / "loss.png")
    finally:
        shutdown(dist)
    if dist.is_main:
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in result.items() if k != "history"}
        print(json.dumps(shown))
        print(f"checkpoints in {Path(config.out_dir) / 'last'} and {Path(config.out_dir) / 'best'}")
    return 130 if result["stopped"] == "interrupted" else 0

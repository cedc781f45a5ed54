"""``glassformer train --config FILE.yaml [--key value ...]``: train with any of the four objectives.

Runs the same way alone or under ``torchrun --nproc_per_node=N`` (see docs/training.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "train", help="train a model from a YAML recipe (clm, mlm, prefix-LM or seq2seq)",
        description="Train from a YAML config; any key can be overridden on the command line as --key value "
                    "(model fields as --model.KEY value). Writes checkpoints (last/, best/), metrics.jsonl and "
                    "loss.png to out_dir. Keys and defaults: docs/training.md.",
        epilog="example: glassformer train --config configs/shakespeare_char.yaml --max_steps 500 --out_dir out/sc")
    parser.add_argument("--config", type=Path, help="YAML file of training keys (optional: overrides alone work)")
    parser.set_defaults(func=run, overrides=[])


def run(args: argparse.Namespace) -> int:
    from ..training import TrainConfig, Trainer, prepare
    from ..training.distributed import init_distributed, shutdown

    config = TrainConfig.from_yaml(args.config, args.overrides)
    config.check_data()
    dist = init_distributed(config.device)
    try:
        run_ = prepare(config)
        result = Trainer(config, run_.model, run_.tokenizer, run_.batches, dist=dist).train()
    finally:
        shutdown(dist)
    if dist.is_main:
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}
        print(json.dumps(shown))
        print(f"checkpoints in {Path(config.out_dir) / 'last'} and {Path(config.out_dir) / 'best'}")
    return 130 if result["stopped"] == "interrupted" else 0

"""What the training microscope costs: the Shakespeare run trained with ``watch: {every: 0}`` (a record
at step 0, at each evaluation and at the end: the default cadence), the time spent recording measured
inside the run, against the run's training time. A second run without the microscope gives the wall
times side by side (noisier: two runs on a possibly busy machine). Prints a Markdown table, writes JSON.

    python benchmarks/bench_microscope.py [--config configs/shakespeare_char.yaml] [--max_steps N] [--out FILE]

Run it from the repository root (the config names its data relative to it). The training time is the
run's wall time less the recording time (evaluations included, as in any run).

The issue's bound: at most 5% of training time at the default cadence (docs/interpret.md#the-training-microscope).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from glassformer.bench.runner import machine
from glassformer.training import TrainConfig, Trainer, prepare_run
from glassformer.training.microscope import Microscope


def timed_run(config_file: Path, overrides: dict, watch: bool) -> dict[str, float]:
    """Train the config once; its wall time, and with ``watch`` the seconds spent in Microscope.record."""
    spent: list[float] = []
    real_record = Microscope.record

    def record(self, model, step):
        start = time.perf_counter()
        try:
            return real_record(self, model, step)
        finally:
            spent.append(time.perf_counter() - start)

    config = TrainConfig.from_yaml(config_file, {**overrides, **({"watch.every": 0} if watch else {})})
    run = prepare_run(config)
    trainer = Trainer(config, run.model, run.tokenizer, run.batches)
    Microscope.record = record
    try:
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
    finally:
        Microscope.record = real_record
    return {"wall_s": wall, "records": len(spent), "record_s": sum(spent),
            "record_each_ms": 1000 * sum(spent) / len(spent) if spent else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("configs/shakespeare_char.yaml"))
    parser.add_argument("--max_steps", type=int, help="shorten the run (its eval_every stays)")
    parser.add_argument("--out", type=Path, default=Path("bench_microscope.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        overrides = {"out_dir": str(Path(tmp) / "run"), "progress": False, "precision": "float32"}
        if args.max_steps:
            overrides["max_steps"] = args.max_steps
        watched = timed_run(args.config, overrides, watch=True)
        plain = timed_run(args.config, overrides, watch=False)
    training_s = watched["wall_s"] - watched["record_s"]
    result = {"config": str(args.config), "watched": watched, "plain": plain,
              "cost_of_training_time": watched["record_s"] / training_s,
              "wall_ratio": watched["wall_s"] / plain["wall_s"], "machine": machine(),
              "torch_threads": torch.get_num_threads()}
    cost = 100 * result["cost_of_training_time"]
    print("| config | records | ms per record | recording s | training s | cost | wall watched / plain |\n"
          "|---|---|---|---|---|---|---|\n"
          f"| {args.config.name} | {watched['records']} | {watched['record_each_ms']:.0f} | "
          f"{watched['record_s']:.2f} | {training_s:.1f} | {cost:.2f}% | {result['wall_ratio']:.3f} |")
    print(f"machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, "
          f"load {result['machine'].get('load_1min', 'n/a')}")
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

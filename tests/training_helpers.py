"""A tiny training run for the trainer's tests: a repeated two-line corpus, a one-layer model."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from glassformer.training import TrainConfig, Trainer, prepare_run

# A heartbeat line (glassformer/io/progress.py), printed only when a step outlasts ~10 s: on a busy machine any
# step may.
HEARTBEAT = re.compile(r"[^|]+: .*(, | in )[\d,]+ s")


def without_heartbeats(lines: list[str]) -> list[str]:
    """``lines`` without heartbeat lines, for a test that reads lines by position."""
    return [line for line in lines if not HEARTBEAT.fullmatch(line)]


CORPUS = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n" * 8


def config(tmp_path, name="run", **changes) -> TrainConfig:
    """A validated TrainConfig writing to ``tmp_path / name`` (``changes`` override any key)."""
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        corpus.write_text(CORPUS, encoding="utf-8")
    base = dict(data=[str(corpus)], block_size=8, batch_size=4, max_steps=6, lr=3e-3, warmup_steps=2, min_lr=3e-4,
                eval_every=3, log_every=1, eval_batch_size=16, seed=5, device="cpu", progress=False,
                out_dir=str(tmp_path / name), model={"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32,
                                                     "dropout": 0.1})
    return TrainConfig.from_dict({**base, **changes})


def train(cfg: TrainConfig) -> tuple[Trainer, dict]:
    """Prepare and run ``cfg``; the trainer and its summary."""
    run = prepare_run(cfg)
    trainer = Trainer(cfg, run.model, run.tokenizer, run.batches)
    return trainer, trainer.train()


def wait_until_training(process: subprocess.Popen, out_dir: Path, records: int = 3, limit_s: float = 600.0) -> None:
    """Return once ``process`` (a ``glassformer train`` writing ``out_dir``) has logged ``records`` records to
    ``out_dir/metrics.jsonl``: its stop handlers are installed, so a signal sent now meets them, however busy
    the machine. The limit only bounds a hung run (it fails the test, never decides it)."""
    metrics = out_dir / "metrics.jsonl"
    deadline = time.monotonic() + limit_s
    while not (metrics.is_file() and metrics.read_text(encoding="utf-8").count("\n") >= records):
        if process.poll() is not None:
            raise AssertionError(f"the run ended (status {process.returncode}) before it logged {records} records: "
                                 f"{process.stderr.read()[-2000:] if process.stderr else ''}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the run logged fewer than {records} records in {limit_s:.0f} s")
        time.sleep(0.05)

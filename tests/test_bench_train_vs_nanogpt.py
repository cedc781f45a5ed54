"""benchmarks/bench_train_vs_nanogpt.py reads each program's per-step times and keeps the same steps
of both (no nanoGPT code is needed: the lines and the records are made up)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_train_vs_nanogpt.py"
spec = importlib.util.spec_from_file_location("bench_train_vs_nanogpt", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_nanogpt_iteration_lines_are_read_in_order():
    lines = [(0.1, "tokens per iteration will be: 768"), (1.0, "step 0: train loss 4.2874, val loss 4.2823"),
             (1.2, "iter 1: loss 4.1000, time 70.50ms, mfu 1.20%"), (1.1, "iter 0: loss 4.2700, time 1314.00ms, "
                                                                    "mfu -100.00%"),
             (1.3, "iter 2: loss nan, time 71.25ms, mfu 1.21%")]
    assert bench.nanogpt_step_ms(lines) == [1314.0, 70.5, 71.25]


def test_glassformer_step_times_come_from_the_rate_of_each_record(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    tokens = bench.BATCH * bench.BLOCK
    records = [{"step": 2, "train_loss": 4.0, "lr": 1e-3, "tokens_per_s": tokens / 0.05},
               {"step": 1, "train_loss": 4.2, "lr": 1e-3, "tokens_per_s": tokens / 0.1},
               {"step": 2, "val_loss": 4.1}]  # an evaluation record has no rate
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert bench.glassformer_step_ms(metrics) == pytest.approx([100.0, 50.0])


def test_the_same_steps_are_kept_and_too_few_is_one_line():
    assert bench.steady([900.0, 10.0, 30.0, 20.0, 99.0], warmup=1, count=3) == 20.0
    with pytest.raises(SystemExit, match="only 2 step times"):
        bench.steady([1.0, 2.0], warmup=5, count=3)

"""torchrun scale-out: 2 CPU processes (DDP over gloo) end where one process ends, at the same global batch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from glassformer import load
from glassformer.commands.overrides import overrides_from_argv
from glassformer.training import DistInfo, TrainConfig, Trainer, prepare_run

CORPUS = "It was the best of times, it was the worst of times, it was the age of wisdom.\n" * 10
# No biases (a key bias's gradient is pure rounding noise that Adam would amplify) and no dropout
# (each process draws its own masks): then the runs differ only by float summation order.
KEYS = ["--block_size", "8", "--batch_size", "8", "--max_steps", "4", "--eval_every", "0", "--warmup_steps", "1",
        "--seed", "3", "--device", "cpu", "--num_threads", "1", "--progress", "false", "--model.d_model", "16",
        "--model.n_heads", "2", "--model.n_layers", "1", "--model.d_ff", "32", "--model.bias", "false"]


def test_two_processes_match_one(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "glassformer.cli", "train", "--data", str(corpus), "--out_dir", str(tmp_path / "ddp"), *KEYS]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count('"stopped": "done"') == 1  # only rank 0 reports
    ddp_model, _ = load(tmp_path / "ddp" / "last")

    args = dict(zip((k[2:] for k in KEYS[::2]), KEYS[1::2], strict=True))
    overrides = [item for key, value in args.items() for item in (f"--{key}", value)]
    argv = ["--data", str(corpus), "--out_dir", str(tmp_path / "one"), *overrides]
    config = TrainConfig.from_yaml(None, overrides_from_argv(argv))
    run = prepare_run(config)
    Trainer(config, run.model, run.tokenizer, run.batches).train()
    single = run.model.state_dict()
    for key, value in ddp_model.state_dict().items():
        torch.testing.assert_close(value, single[key], atol=1e-5, rtol=0, msg=key)
    fresh = prepare_run(config).model.state_dict()
    assert not torch.equal(single["embeddings.tok.weight"], fresh["embeddings.tok.weight"])


def test_batch_must_split_over_processes(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    config = TrainConfig.from_dict({"data": [str(corpus)], "batch_size": 8, "block_size": 8,
                                    "out_dir": str(tmp_path / "o"), "device": "cpu"})
    run = prepare_run(config)
    with pytest.raises(ValueError, match="batch_size=8 must be a multiple of processes x grad_accum = 3 x 1"):
        Trainer(config, run.model, run.tokenizer, run.batches, dist=DistInfo(0, 3, 0, torch.device("cpu")))

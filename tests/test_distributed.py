"""torchrun scale-out: 2 CPU processes (DDP or FSDP2 over gloo) end where one process ends, at the same
global batch, and an FSDP checkpoint is the same file a single process writes (both ways of resuming)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from glassformer import load
from glassformer.cli.commands.overrides import overrides_from_argv
from glassformer.training import DistInfo, TrainConfig, Trainer, load_checkpoint, prepare_run
from glassformer.training.distributed import grad_sync, wrap_for_training

CORPUS = "It was the best of times, it was the worst of times, it was the age of wisdom.\n" * 10
# No biases (a key bias's gradient is pure rounding noise that Adam would amplify) and no dropout (each
# process draws its own masks): then the runs differ only by float summation order. grad_accum 2 takes
# the no-sync path of DDP and FSDP; 2 layers make FSDP gather more than one block. The cosine decay ends
# at step 4 whatever max_steps is, so a run stopped at step 2 or 3 and resumed is the same run.
KEYS = ["--block_size", "8", "--batch_size", "8", "--max_steps", "4", "--eval_every", "0", "--warmup_steps", "1",
        "--seed", "3", "--device", "cpu", "--num_threads", "1", "--progress", "false", "--model.d_model", "16",
        "--model.n_heads", "2", "--model.n_layers", "2", "--model.d_ff", "32", "--model.bias", "false",
        "--log_every", "1", "--lr_decay_steps", "4", "--grad_accum", "2"]
TOL = {"atol": 1e-5, "rtol": 1e-5}


def train_one(corpus: Path, out: Path, *more: str) -> Trainer:
    """Train in this process with KEYS (then ``more``, which wins)."""
    argv = ["--data", str(corpus), "--out_dir", str(out), *KEYS, *more]
    config = TrainConfig.from_yaml(None, overrides_from_argv(argv))
    run = prepare_run(config)
    trainer = Trainer(config, run.model, run.tokenizer, run.batches)
    trainer.train()
    return trainer


def train_two(corpus: Path, out: Path, *more: str) -> None:
    """Train in 2 CPU processes under torchrun with KEYS (then ``more``)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "glassformer", "train", "--json", "--data", str(corpus), "--out_dir", str(out), *KEYS, *more]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count('"stopped": "done"') == 1  # only rank 0 reports


def train_losses(out: Path) -> list[float]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["train_loss"] for r in records if "train_loss" in r]


def assert_same_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for key, value in got.items():
        torch.testing.assert_close(value, want[key], **TOL, msg=key)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    """A folder with the corpus, ``one/`` (4 steps in one process), ``half/`` (its first 2 steps), the corpus's
    lines as documents prepared into ``shards/`` and ``one-shards/`` (4 steps on them in one process)."""
    from glassformer.data.prepare import prepare

    folder = tmp_path_factory.mktemp("single")
    (folder / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    lines = [line for line in CORPUS.split(", ") if line.strip()]
    (folder / "docs.jsonl").write_text("".join(json.dumps({"text": line}) + "\n" for line in lines * 3))
    prepare([str(folder / "docs.jsonl")], folder / "shards", "char", val_fraction=0.2, shard_tokens=64)
    train_one(folder / "shards", folder / "one-shards")
    trainer = train_one(folder / "corpus.txt", folder / "one")
    fresh = prepare_run(trainer.config).model.state_dict()
    assert not torch.equal(trainer.model.state_dict()["embeddings.tok.weight"], fresh["embeddings.tok.weight"])
    train_one(folder / "corpus.txt", folder / "half", "--max_steps", "2")
    return folder


@pytest.mark.parametrize("parallel, data", [("ddp", "shards"), ("fsdp", "corpus.txt")])
def test_two_processes_match_one(single, tmp_path, parallel, data):
    """Each process reads only its rows' windows of a global batch (token shards, prepared once, for DDP; a
    text file, encoded into the run's cache, for FSDP); both end where one process ends."""
    train_two(single / data, tmp_path / parallel, "--parallel", parallel)
    one = "one-shards" if data == "shards" else "one"
    want = train_losses(single / one)
    assert len(want) == 4
    torch.testing.assert_close(train_losses(tmp_path / parallel), want, **TOL)
    # the checkpoint (FSDP: gathered from the shards) loads in one process with the single run's weights
    model, _ = load(tmp_path / parallel / "last")
    one = load_checkpoint(single / one / "last", with_state=True)
    assert_same_weights(model.state_dict(), one.model.state_dict())
    # ... and the optimizer state is torch's own format, as one process writes it
    got = load_checkpoint(tmp_path / parallel / "last", with_state=True).train_state["optimizer"]
    want_state = one.train_state["optimizer"]
    assert [g["params"] for g in got["param_groups"]] == [g["params"] for g in want_state["param_groups"]]
    assert got["param_groups"][0].keys() == want_state["param_groups"][0].keys()
    assert got["state"].keys() == want_state["state"].keys()
    for index, moments in got["state"].items():
        assert moments.keys() == want_state["state"][index].keys()
        for name, value in moments.items():
            torch.testing.assert_close(value, want_state["state"][index][name], **TOL, msg=f"{index} {name}")


def test_fsdp_resumes_one_process_and_one_process_resumes_fsdp(single, tmp_path):
    """One process (steps 1-2), then FSDP (step 3), then one process (step 4) = one process (1-4)."""
    out = tmp_path / "mixed"
    shutil.copytree(single / "half", out, symlinks=True)
    train_two(single / "corpus.txt", out, "--parallel", "fsdp", "--resume", "true", "--max_steps", "3")
    trainer = train_one(single / "corpus.txt", out, "--resume", "true")
    assert trainer.step == 4
    assert_same_weights(trainer.model.state_dict(), load(single / "one" / "last")[0].state_dict())
    torch.testing.assert_close(train_losses(out), train_losses(single / "one"), **TOL)


def test_one_process_ignores_parallel():
    """Without torchrun there is nothing to spread: the model trains as it is, under either choice."""
    model = torch.nn.Linear(2, 2)
    for parallel in ("ddp", "fsdp"):
        assert wrap_for_training(model, DistInfo(), parallel) is model
        with grad_sync(model, sync=False):
            pass
    with pytest.raises(ValueError, match="parallel must be one of \\['ddp', 'fsdp'\\], got 'zero'"):
        TrainConfig(parallel="zero")  # refused where it enters


def test_batch_must_split_over_processes(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    config = TrainConfig.from_dict({"data": [str(corpus)], "batch_size": 8, "block_size": 8,
                                    "out_dir": str(tmp_path / "o"), "device": "cpu"})
    run = prepare_run(config)
    with pytest.raises(ValueError, match="batch_size=8 must be a multiple of processes x grad_accum = 3 x 1"):
        Trainer(config, run.model, run.tokenizer, run.batches, dist=DistInfo(0, 3, 0, torch.device("cpu")))

"""The train loop: schedules, AdamW groups, determinism, accumulation, exact resume, Ctrl-C, NaN, outputs."""

from __future__ import annotations

import json
import math
import os
import signal

import pytest
import torch

import glassformer.training.loop as loop
from glassformer import ModelConfig, build_model
from glassformer.training import (
    TrainConfig,
    Trainer,
    TrainingDiverged,
    load_checkpoint,
    lr_at,
    param_groups,
    prepare_run,
)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)  # tiny models: threads only add synchronisation (and stall on a busy machine)


CORPUS = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n" * 8


def config(tmp_path, name="run", **changes) -> TrainConfig:
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        corpus.write_text(CORPUS, encoding="utf-8")
    base = dict(data=[str(corpus)], block_size=8, batch_size=4, max_steps=6, lr=3e-3, warmup_steps=2, min_lr=3e-4,
                eval_every=3, log_every=1, eval_batch_size=16, seed=5, device="cpu", progress=False,
                out_dir=str(tmp_path / name), model={"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32,
                                                     "dropout": 0.1})
    return TrainConfig.from_dict({**base, **changes})


def train(cfg: TrainConfig) -> tuple[Trainer, dict]:
    run = prepare_run(cfg)
    trainer = Trainer(cfg, run.model, run.tokenizer, run.batches)
    return trainer, trainer.train()


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def assert_identical(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_cosine_schedule_like_nanogpt():
    kw = dict(schedule="cosine", lr=1e-3, warmup_steps=100, decay_steps=2000, min_lr=1e-4)
    assert lr_at(0, **kw) == pytest.approx(1e-3 / 101)
    assert lr_at(100, **kw) == pytest.approx(1e-3)
    assert lr_at(1050, **kw) == pytest.approx(5.5e-4)
    assert lr_at(2000, **kw) == pytest.approx(1e-4) and lr_at(5000, **kw) == pytest.approx(1e-4)


def test_noam_schedule_peaks_at_warmup():
    d, warmup = 512, 4000
    for step in (0, 999, 3999, 9999):
        s = step + 1
        paper = d ** -0.5 * min(s ** -0.5, s * warmup ** -1.5)
        peak = d ** -0.5 * warmup ** -0.5
        assert lr_at(step, "noam", peak, warmup) == pytest.approx(paper)
    assert lr_at(0, "constant", 0.5) == 0.5
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        lr_at(0, "linear", 1.0)


def test_no_weight_decay_on_norms_biases_embeddings():
    model = build_model(ModelConfig.preset("tiny-char", vocab_size=10))
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    decayed = {names[id(p)] for p in decay["params"]}
    assert decayed and all(n.endswith("weight") and "norm" not in n and "embeddings" not in n for n in decayed)
    assert "embeddings.tok.weight" in {names[id(p)] for p in no_decay["params"]}
    assert "head.weight" in decayed
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_training_is_deterministic_and_learns(tmp_path):
    first, result = train(config(tmp_path, "a", max_steps=30, eval_every=15))
    second, _ = train(config(tmp_path, "b", max_steps=30, eval_every=15))
    assert_identical(weights(first.model), weights(second.model))
    history = [h for h in first.history if "val_loss" in h]
    assert history[-1]["val_loss"] < history[0]["val_loss"] < math.log(first.tokenizer.vocab_size) + 1
    assert result["stopped"] == "done" and result["step"] == 30
    assert result["val_bits_per_char"] == pytest.approx(result["val_loss"] / math.log(2))
    val_tokens = len(CORPUS) - int(len(CORPUS) * 0.9) - 1  # every val token but the first is predicted once
    assert result["val_tokens"] == val_tokens


def test_gradient_accumulation_matches_one_batch(tmp_path):
    # No biases: a key bias gets a zero gradient (softmax ignores it) whose rounding noise Adam would amplify.
    model = {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "bias": False}
    one, _ = train(config(tmp_path, "one", batch_size=8, model=model))
    acc, _ = train(config(tmp_path, "acc", batch_size=8, grad_accum=4, model=model))
    for key, value in weights(one.model).items():
        torch.testing.assert_close(weights(acc.model)[key], value, atol=1e-6, rtol=0)


def test_resume_is_bit_identical(tmp_path):
    # 8 steps in one run == 4 steps, then resume for 4 more (the schedule is fixed by lr_decay_steps=8)
    straight, _ = train(config(tmp_path, "straight", max_steps=8, eval_every=4, lr_decay_steps=8))
    train(config(tmp_path, "split", max_steps=4, eval_every=4, lr_decay_steps=8))
    resumed, result = train(config(tmp_path, "split", max_steps=8, eval_every=4, lr_decay_steps=8, resume=True))
    assert result["step"] == 8
    assert_identical(weights(straight.model), weights(resumed.model))
    assert_identical(straight.optimizer.state_dict()["state"][0], resumed.optimizer.state_dict()["state"][0])
    steps = [h["step"] for h in map(json.loads, (tmp_path / "split" / "metrics.jsonl").read_text().splitlines())
             if "train_loss" in h]
    assert steps == list(range(1, 9))


def test_ctrl_c_saves_and_resume_continues_exactly(tmp_path, monkeypatch):
    straight, _ = train(config(tmp_path, "straight", max_steps=8))
    real_step = Trainer.train_step

    def interrupted_step(self):
        loss = real_step(self)
        if self.step == 5:
            os.kill(os.getpid(), signal.SIGINT)  # as if the user pressed Ctrl-C during step 5
        return loss

    monkeypatch.setattr(Trainer, "train_step", interrupted_step)
    _, result = train(config(tmp_path, "stopped", max_steps=8))
    assert result["stopped"] == "interrupted"
    assert int(load_checkpoint(tmp_path / "stopped" / "last", with_state=True).train_state["step"]) == 6
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.setattr(Trainer, "train_step", real_step)
    resumed, result = train(config(tmp_path, "stopped", max_steps=8, resume=True))
    assert result["stopped"] == "done"
    assert_identical(weights(straight.model), weights(resumed.model))


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    real_loss = loop.batch_loss
    calls = {"n": 0}

    def poisoned(model, batch, label_smoothing=0.0, count_correct=True):
        parts = real_loss(model, batch, label_smoothing, count_correct)
        calls["n"] += model.training
        if calls["n"] >= 5 and model.training:  # training step 5 onward
            parts.loss_sum = parts.loss_sum * float("nan")
        return parts

    monkeypatch.setattr(loop, "batch_loss", poisoned)
    with pytest.raises(TrainingDiverged, match="training loss became nan at step 5"):
        train(config(tmp_path, "nan", max_steps=8, eval_every=3))
    kept = load_checkpoint(tmp_path / "nan" / "last", with_state=True)
    assert int(kept.train_state["step"]) == 3
    assert all(torch.isfinite(v).all() for v in kept.model.state_dict().values())


def test_outputs_written(tmp_path):
    trainer, result = train(config(tmp_path, "out", max_steps=6))
    out = tmp_path / "out"
    for name in ("last/model.safetensors", "last/train_state.pt", "last/training.json", "best/model.safetensors",
                 "metrics.jsonl"):
        assert (out / name).is_file(), name
    assert not (out / "best" / "train_state.pt").exists()
    assert not (out / "loss.png").exists()  # the trainer returns its history; callers draw (glassformer train does)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert result["history"] == records == trainer.history
    assert {"step", "train_loss", "lr", "tokens_per_s"} <= records[0].keys()
    evals = [r for r in records if "val_loss" in r]
    assert [r["step"] for r in evals] == [3, 6]
    assert result["best_val_loss"] == min(r["val_loss"] for r in evals)


@pytest.mark.parametrize("objective, extra", [
    ("mlm", {}), ("prefix", {}), ("clm", {"tokenizer": "byte"}),
    ("clm", {"tokenizer": "bpe", "tokenizer_vocab_size": 270}), ("clm", {"dtype": "bfloat16"}),
    ("clm", {"lr_schedule": "noam", "label_smoothing": 0.1})])
def test_objectives_and_options_train(tmp_path, objective, extra):
    trainer, result = train(config(tmp_path, "x", objective=objective, max_steps=3, eval_every=0, **extra))
    assert result["step"] == 3 and math.isfinite(result["val_loss"]) and result["val_tokens"] > 0
    assert trainer.model.config.attn == {"mlm": "bidirectional", "prefix": "prefix"}.get(objective, "causal")


def test_seq2seq_trains(tmp_path):
    (tmp_path / "pairs.tsv").write_text("".join(f"{'ab' * (i % 4 + 1)}\t{'ba' * (i % 3 + 1)}\n" for i in range(24)))
    cfg = config(tmp_path, "s2s", objective="seq2seq", data=[], pairs=str(tmp_path / "pairs.tsv"),
                 val_pairs=str(tmp_path / "pairs.tsv"), max_steps=4, eval_every=0, block_size=16,
                 model={"d_model": 16, "n_heads": 2, "n_enc": 1, "n_dec": 1, "d_ff": 32})
    trainer, result = train(cfg)
    assert trainer.model.config.arch == "encoder-decoder"
    assert result["val_tokens"] == sum((i % 3 + 1) * 2 + 1 for i in range(24))


def test_batch_must_split_evenly(tmp_path):
    with pytest.raises(ValueError, match="batch_size=6 must be divisible by grad_accum=4"):
        config(tmp_path, "x", batch_size=6, grad_accum=4)


def test_recipe_config_given_to_train_says_how_to_run_it():
    from glassformer.training.config import TrainConfig

    with pytest.raises(ValueError, match=r"this is a recipe config .*glassformer recipe FILE"):
        TrainConfig.from_dict({"recipe": {"task": "lm"}, "max_steps": 2})

"""The train loop: schedules, AdamW groups, determinism, accumulation, exact resume, Ctrl-C, NaN, outputs."""

from __future__ import annotations

import json
import math
import os
import shutil
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
    save_checkpoint,
)
from glassformer.training.metrics import read_metrics
from training_helpers import CORPUS, config, train


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)  # tiny models: threads only add synchronisation (and stall on a busy machine)


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


def test_wsd_schedule_holds_then_decays_in_a_line():
    # warmup 10, decay ends at 110: 100 steps after warmup, the last 40% (40 steps, from step 70) decaying
    kw = dict(schedule="wsd", lr=1e-2, warmup_steps=10, decay_steps=110, min_lr=1e-3, cooldown=0.4)
    assert lr_at(0, **kw) == pytest.approx(1e-2 / 11)
    assert lr_at(10, **kw) == lr_at(70, **kw) == pytest.approx(1e-2)
    assert lr_at(80, **kw) == pytest.approx(1e-2 - 0.25 * 9e-3)
    assert lr_at(90, **kw) == pytest.approx(5.5e-3)
    assert lr_at(110, **kw) == lr_at(500, **kw) == pytest.approx(1e-3)
    # cooldown 1: a straight line from the peak right after warmup
    assert lr_at(60, **{**kw, "cooldown": 1.0}) == pytest.approx(5.5e-3)
    with pytest.raises(ValueError, match=r"^cooldown must be a finite number > 0.0 and <= 1.0, got 0.0$"):
        TrainConfig.from_dict({"lr_schedule": "wsd", "cooldown": 0})


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


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_saves_and_resume_continues_exactly(tmp_path, monkeypatch, sig):
    """Ctrl-C (SIGINT) and SIGTERM (schedulers, docker stop) both stop after saving; handlers come back."""
    straight, _ = train(config(tmp_path, "straight", max_steps=8))
    real_step, before = Trainer.train_step, {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def interrupted_step(self):
        loss = real_step(self)
        if self.step == 4:
            os.kill(os.getpid(), sig)  # as if the user pressed Ctrl-C (or the scheduler said stop) during step 4
        return loss

    monkeypatch.setattr(Trainer, "train_step", interrupted_step)
    stopped, result = train(config(tmp_path, "stopped", max_steps=8))
    assert result["stopped"] == "interrupted" and stopped.stop_signal == sig
    assert int(load_checkpoint(tmp_path / "stopped" / "last", with_state=True).train_state["step"]) == 5
    assert os.readlink(tmp_path / "stopped" / "last") == "ckpt-000005"
    assert {s: signal.getsignal(s) for s in before} == before
    monkeypatch.setattr(Trainer, "train_step", real_step)
    resumed, result = train(config(tmp_path, "stopped", max_steps=8, resume=True))
    assert result["stopped"] == "done"
    assert_identical(weights(straight.model), weights(resumed.model))


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    real_loss = loop.batch_loss
    calls = {"n": 0}

    def poisoned(model, batch, label_smoothing=0.0, count_correct=True, **options):
        parts = real_loss(model, batch, label_smoothing, count_correct, **options)
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


def strict_json_lines(path) -> list[dict]:
    """The records of a JSON-lines file, refusing the NaN/Infinity tokens that are not JSON."""
    def refuse(token):
        raise AssertionError(f"{path} holds {token}, which is not JSON")
    return [json.loads(line, parse_constant=refuse) for line in path.read_text(encoding="utf-8").splitlines()]


def test_nan_validation_loss_keeps_the_last_good_checkpoint(tmp_path):
    """The issue's case: lr=1e6 makes the evaluation's loss NaN; the checkpoint of step 2 stays `last`."""
    good, _ = train(config(tmp_path, "blowup", max_steps=2, eval_every=2, lr_decay_steps=6))
    good_weights = weights(good.model)
    with pytest.raises(TrainingDiverged, match="the validation loss became nan at step 4; stopped. The last good "
                                               "checkpoint is kept in .*blowup/last"):
        train(config(tmp_path, "blowup", max_steps=6, eval_every=2, log_every=10, lr=1e6, resume=True))
    out = tmp_path / "blowup"
    kept = load_checkpoint(out / "last", with_state=True)
    assert int(kept.train_state["step"]) == 2 and os.readlink(out / "last") == os.readlink(out / "best")
    assert_identical(good_weights, weights(kept.model))
    assert sorted(p.name for p in out.glob("*ckpt-*")) == ["ckpt-000002"]  # nothing of step 4 was written
    records = strict_json_lines(out / "metrics.jsonl")  # strict JSON: the NaN loss is written as null
    assert records[-1]["step"] == 4 and records[-1]["val_loss"] is None and records[-1]["val_accuracy"] >= 0
    assert math.isnan(read_metrics(out / "metrics.jsonl")[-1]["val_loss"])  # and read back as NaN


def test_divergence_before_any_checkpoint_names_none(tmp_path):
    """With no good checkpoint yet, the stop message must not point at one (there is no `last`)."""
    with pytest.raises(TrainingDiverged, match=r"training loss became nan at step 2; stopped. No checkpoint was "
                                               r"written \(none was good\)") as error:
        train(config(tmp_path, "inf", max_steps=6, eval_every=2, lr=1e30, warmup_steps=0))
    assert "last" not in str(error.value)
    assert not (tmp_path / "inf" / "last").exists() and not list((tmp_path / "inf").glob("*ckpt-*"))
    strict_json_lines(tmp_path / "inf" / "metrics.jsonl")


def test_weights_that_are_not_finite_are_never_saved(tmp_path, monkeypatch):
    """A save is refused when a weight is NaN even if the loss looked fine (e.g. no validation data)."""
    real_step = Trainer.train_step

    def poisoned_step(self):
        loss = real_step(self)
        if self.step == 4:  # after the step's loss was computed (finite), before its save
            with torch.no_grad():
                next(self.model.parameters())[0, 0] = float("inf")
        return loss

    monkeypatch.setattr(Trainer, "train_step", poisoned_step)
    with pytest.raises(TrainingDiverged, match="weights or optimizer state hold NaN/inf at step 4; stopped. The "
                                               "last good checkpoint is kept"):
        train(config(tmp_path, "w", max_steps=6, eval_every=2, log_every=10, val_fraction=0.0))
    assert os.readlink(tmp_path / "w" / "last") == "ckpt-000002"


def test_torn_last_metrics_line_is_dropped_on_resume(tmp_path):
    """A process killed while appending to metrics.jsonl leaves half a line; resume drops it and repairs
    the file. A broken line elsewhere is a one-line error naming the file and the line."""
    train(config(tmp_path, "torn", max_steps=4, eval_every=4, lr_decay_steps=8))
    metrics = tmp_path / "torn" / "metrics.jsonl"
    whole = metrics.read_text()
    metrics.write_text(whole + '{"step": 5, "train_lo')
    _, result = train(config(tmp_path, "torn", max_steps=8, eval_every=4, lr_decay_steps=8, resume=True))
    records = strict_json_lines(metrics)
    assert [r["step"] for r in records if "train_loss" in r] == list(range(1, 9)) and result["step"] == 8
    metrics.write_text('{"step": 1}\n{"step": 2, "train_lo\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl' line 2 is not valid JSON"):
        read_metrics(metrics)


def test_resume_recovers_leftovers_and_a_dangling_pointer(tmp_path):
    """A crash can leave temporary folders and links, an older step folder, a pointer one step behind
    or dangling. Resume continues from the newest complete step folder and cleans up the rest."""
    straight, _ = train(config(tmp_path, "straight", max_steps=8, eval_every=2, lr_decay_steps=8))
    train(config(tmp_path, "crash", max_steps=4, eval_every=2, lr_decay_steps=8))
    out = tmp_path / "crash"
    (out / ".ckpt-000006.tmp-x1y2").mkdir()  # a save in progress
    (out / ".ckpt-000006.tmp-x1y2" / "model.safetensors").write_bytes(b"half")
    os.symlink("ckpt-000006", out / ".last.tmp-4242")  # a pointer in progress
    (out / ".metrics.jsonl.tmp-4242").write_text("{")
    (out / "last").unlink()
    os.symlink("ckpt-000099", out / "last")  # dangling
    (out / "best").unlink()  # a crash before the best pointer was written
    _, result = train(config(tmp_path, "crash", max_steps=8, eval_every=2, lr_decay_steps=8, resume=True))
    assert result["step"] == 8
    assert_identical(weights(straight.model), weights(load_checkpoint(out / "last").model))
    assert os.readlink(out / "last") == "ckpt-000008"
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    assert {p.name for p in out.glob("ckpt-*")} == {"ckpt-000008", os.readlink(out / "best")}


def test_resume_with_nothing_resumable(tmp_path):
    """--resume with no checkpoint at all starts afresh (and says so, in the CLI); with checkpoints that
    cannot be resumed it is an error naming the folder, never a silent restart over the run."""
    cfg = config(tmp_path, "r", max_steps=2, eval_every=2, resume=True)
    out = tmp_path / "r"
    out.mkdir()
    (out / ".ckpt-000002.tmp-abc").mkdir()  # a first save that never finished
    trainer, result = train(cfg)
    assert result["step"] == 2 and not (out / ".ckpt-000002.tmp-abc").exists()

    (out / "ckpt-000004").mkdir()  # newer than the newest complete one, and incomplete
    (out / "ckpt-000004" / "config.json").write_text('{"vocab_size": 8}')  # what a checkpoint's config holds
    with pytest.raises(ValueError, match=r"ckpt-000004' is incomplete \(no tokenizer.json, model.safetensors, "
                                         r"train_state.pt\).*remove it to resume from ckpt-000002"):
        train(cfg)
    for folder in out.glob("ckpt-*"):
        shutil.rmtree(folder)
    with pytest.raises(ValueError, match=r"last' points to 'ckpt-000002', which does not exist"):
        train(cfg)
    assert (out / "metrics.jsonl").read_text()  # the run's metrics were not thrown away


def test_older_layout_resumes(tmp_path):
    """A run saved by the earlier layout (a real last/ folder, or the .last.old-PID that a crash inside
    its two-rename swap left) resumes, and its first save moves it to the new layout."""
    straight, _ = train(config(tmp_path, "straight", max_steps=8, eval_every=4, lr_decay_steps=8))
    for leftover in ("last", ".last.old-123"):
        first, _ = train(config(tmp_path, leftover.strip("."), max_steps=4, eval_every=4, lr_decay_steps=8))
        out = tmp_path / leftover.strip(".")
        for entry in [*out.glob("ckpt-*"), out / "last", out / "best"]:
            entry.unlink() if entry.is_symlink() else shutil.rmtree(entry)
        save_checkpoint(out / leftover, first.model, first.tokenizer, training=first.config.to_dict(),
                        train_state=first.state())
        resumed, result = train(config(tmp_path, leftover.strip("."), max_steps=8, eval_every=4, lr_decay_steps=8,
                                       resume=True))
        assert result["step"] == 8
        assert_identical(weights(straight.model), weights(resumed.model))
        assert os.readlink(out / "last") == "ckpt-000008" and not (out / ".last.old-123").exists()


def test_outputs_written(tmp_path):
    trainer, result = train(config(tmp_path, "out", max_steps=6))
    out = tmp_path / "out"
    for name in ("last/model.safetensors", "last/train_state.pt", "last/training.json", "best/model.safetensors",
                 "metrics.jsonl"):
        assert (out / name).is_file(), name
    assert not (out / "loss.png").exists()  # the trainer returns its history; callers draw (glassformer train does)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert result["history"] == records == trainer.history
    assert {"step", "train_loss", "lr", "tokens_per_s"} <= records[0].keys()
    evals = [r for r in records if "val_loss" in r]
    assert [r["step"] for r in evals] == [3, 6]
    assert result["best_val_loss"] == min(r["val_loss"] for r in evals)
    # Step folders plus pointers; only the folders the pointers need are kept, and nothing else is left.
    best_step = min(evals, key=lambda r: r["val_loss"])["step"]
    assert os.readlink(out / "last") == "ckpt-000006" and os.readlink(out / "best") == f"ckpt-{best_step:06d}"
    assert sorted(p.name for p in out.iterdir() if p.name not in ("cache", "metrics.jsonl")) == sorted(
        {"best", "last", "ckpt-000006", f"ckpt-{best_step:06d}"})


@pytest.mark.parametrize("objective, extra", [
    ("mlm", {}), ("prefix", {}), ("clm", {"tokenizer": "byte"}),
    ("clm", {"tokenizer": "bpe", "tokenizer_vocab_size": 270}), ("clm", {"precision": "bfloat16"}),
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


def test_prefix_objective_needs_two_tokens_a_window_before_any_data_is_read(tmp_path):
    with pytest.raises(ValueError, match=r"^block_size must be >= 2 for objective 'prefix', got 1$"):
        config(tmp_path, "x", objective="prefix", block_size=1)
    assert not (tmp_path / "x").exists()


def test_recipe_config_given_to_train_says_how_to_run_it():
    from glassformer.training.config import TrainConfig

    with pytest.raises(ValueError, match=r"this is a recipe config .*glassformer recipe FILE"):
        TrainConfig.from_dict({"recipe": {"task": "lm"}, "max_steps": 2})

"""Precision as a choice: float32, bfloat16/float16 under autocast, and "auto" decided by measurement.

The choice logic is tested with scripted outcomes (no time is asserted): "auto" keeps float32 on a
CPU without bfloat16 instructions, measures this model's work once where they exist and remembers it,
and the measurement leaves the training run exactly as float32 would have left it. Training under
autocast keeps float32 master weights and a float32 loss; the choice is recorded in the results and
the checkpoint.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from glassformer.errors import GlassformerError
from glassformer.recipes import load_recipe
from glassformer.runtime import kernel_choice
from glassformer.runtime.precision import Precision, check_precision, resolve_precision
from glassformer.training import TrainConfig, Trainer, load_checkpoint, prepare_run
from training_helpers import config as base_config
from training_helpers import train


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """A throw-away choice cache per test, forgotten in memory too."""
    monkeypatch.setenv("GLASSFORMER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(kernel_choice, "_choices", None)


def bf16_cpu(monkeypatch, has: bool) -> None:
    """Pretend the CPU has (or lacks) bfloat16 instructions."""
    monkeypatch.setattr(kernel_choice, "cpu_features", lambda: ["avx2", "avx512_bf16"] if has else ["avx2"])


def outcome(monkeypatch, bf16_faster: bool) -> list[int]:
    """Script the measurement: both ways are run once (as the real one does), then the verdict."""
    runs = []

    def faster(plain, special, pairs=kernel_choice.PAIRS):
        plain(), special()
        runs.append(pairs)
        return bf16_faster

    monkeypatch.setattr(kernel_choice, "faster", faster)
    return runs


def config(tmp_path, name="run", **changes) -> TrainConfig:
    return base_config(tmp_path, name, **{"max_steps": 4, "eval_every": 0, **changes})


@pytest.mark.parametrize("value", ["fp16", "bf16", "", None, 16, "FLOAT32"])
def test_bad_precision_is_one_line_naming_it(value):
    with pytest.raises(GlassformerError, match=r"precision must be one of \['auto', 'float32', 'bfloat16', "
                                               r"'float16'\], got " + repr(value).replace("(", r"\(")):
        check_precision(value)
    with pytest.raises((GlassformerError, TypeError), match="precision"):
        TrainConfig.from_dict({"precision": value})


def test_auto_keeps_float32_without_bf16_instructions(monkeypatch):
    bf16_cpu(monkeypatch, False)
    runs = outcome(monkeypatch, True)
    chosen = resolve_precision("auto", "cpu", lambda: (print, print), "case")
    assert chosen == Precision("float32", "auto", chosen.reason) and "no bfloat16 instructions" in chosen.reason
    assert runs == []  # nothing measured


@pytest.mark.parametrize("bf16_faster, expected", [(True, "bfloat16"), (False, "float32")])
def test_auto_measures_once_and_remembers(monkeypatch, bf16_faster, expected):
    bf16_cpu(monkeypatch, True)
    runs = outcome(monkeypatch, bf16_faster)
    ways = []

    def measure():
        ways.append(1)
        return (lambda: None), (lambda: None)

    first = resolve_precision("auto", "cpu", measure, "model A | batch 4x8")
    again = resolve_precision("auto", "cpu", measure, "model A | batch 4x8")
    assert first.name == again.name == expected and first.asked == "auto"
    assert len(ways) == 1 and len(runs) == 1  # the second call read the remembered answer
    assert kernel_choice.choices() == {"precision bfloat16 | model A | batch 4x8": bf16_faster}
    resolve_precision("auto", "cpu", measure, "model B | batch 4x8")  # another model is measured anew
    assert len(ways) == 2


def test_explicit_precision_is_taken_as_asked(monkeypatch):
    bf16_cpu(monkeypatch, False)
    runs = outcome(monkeypatch, True)
    chosen = resolve_precision("bfloat16", "cpu", lambda: (print, print), "case")
    assert chosen.name == "bfloat16" and chosen.dtype == torch.bfloat16 and "slow here" in chosen.reason
    assert resolve_precision("float32", "cpu").describe() == "precision: float32 (as asked)"
    assert runs == []


def test_bfloat16_training_keeps_float32_master_weights_and_loss(tmp_path):
    run = prepare_run(config(tmp_path, precision="bfloat16"))
    trainer = Trainer(config(tmp_path, precision="bfloat16"), run.model, run.tokenizer, run.batches)
    seen = {}
    linear = next(m for m in trainer.model.modules() if isinstance(m, torch.nn.Linear))
    linear.register_forward_hook(lambda m, i, out: seen.update(out=out.dtype))
    loss = trainer.train_step()
    assert seen["out"] == torch.bfloat16  # the matrix products ran in bfloat16
    assert loss.dtype == torch.float64 and math.isfinite(loss.item())
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    assert {v.dtype for s in trainer.optimizer.state.values() for v in s.values() if v.dim()} == {torch.float32}


def test_bfloat16_loss_follows_float32(tmp_path):
    _, full = train(config(tmp_path, "f32", precision="float32"))
    trainer, half = train(config(tmp_path, "bf16", precision="bfloat16"))
    assert half["precision"] == "bfloat16" and full["precision"] == "float32"
    assert half["val_loss"] != full["val_loss"]  # it did run differently ...
    assert abs(half["val_loss"] - full["val_loss"]) < 0.02 * full["val_loss"]  # ... to within bf16's rounding
    state = torch.load(trainer.out / "last" / "train_state.pt", weights_only=True)
    assert state["precision"] == "bfloat16"


def test_auto_measurement_leaves_the_run_as_float32_would(tmp_path, monkeypatch):
    """The measured steps run forward and backward on rank 0's first micro-batch with dropout on; the
    weights, gradients and random state must come out as they went in."""
    bf16_cpu(monkeypatch, True)
    runs = outcome(monkeypatch, False)
    plain, plain_result = train(config(tmp_path, "plain", precision="float32"))
    auto, auto_result = train(config(tmp_path, "auto", precision="auto"))
    assert runs == [kernel_choice.GRAD_PAIRS] and auto_result["precision"] == "float32"
    assert "measured not clearly faster" in auto_result["precision_reason"]
    assert auto_result["val_loss"] == plain_result["val_loss"]
    for key, value in plain.model.state_dict().items():
        assert torch.equal(value, auto.model.state_dict()[key]), key


def test_auto_choosing_bfloat16_trains_in_it(tmp_path, monkeypatch, capsys):
    bf16_cpu(monkeypatch, True)
    outcome(monkeypatch, True)
    trainer, result = train(config(tmp_path, precision="auto"))
    assert result["precision"] == "bfloat16" and trainer.precision.reduced
    assert "precision: bfloat16 (auto: the CPU has avx512_bf16" in capsys.readouterr().err


def test_float16_uses_a_grad_scaler_and_resumes(tmp_path):
    trainer, result = train(config(tmp_path, precision="float16", max_steps=2))
    assert result["precision"] == "float16" and math.isfinite(result["val_loss"])
    assert trainer.scaler.is_enabled()
    state = torch.load(trainer.out / "last" / "train_state.pt", weights_only=True)
    assert state["scaler"]["scale"] == trainer.scaler.get_scale()
    resumed, again = train(config(tmp_path, precision="float16", max_steps=3, resume=True))
    assert again["step"] == 3 and resumed.scaler.is_enabled()
    assert load_checkpoint(trainer.out / "last").model.config == trainer.model.config


def test_recipes_default_to_auto_and_precision_overrides():
    spec = {"recipe": {"task": "lm"}, "data": ["x.txt"], "max_steps": 1}
    assert load_recipe(dict(spec)).train.precision == "auto"
    assert load_recipe(dict(spec), [("precision", "float32")]).train.precision == "float32"
    assert load_recipe({**spec, "precision": "bfloat16"}).train.precision == "bfloat16"


def cli(capsys, *args: str) -> SimpleNamespace:
    """``glassformer args`` in this process (glassformer.cli.main): returncode, stdout, stderr."""
    from glassformer.cli import main

    capsys.readouterr()
    try:
        status = main(list(args))
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    return SimpleNamespace(returncode=status, stdout=captured.out, stderr=captured.err)


def test_commands_take_precision(tmp_path, capsys):
    trainer, _ = train(config(tmp_path, max_steps=1))
    ckpt, data = str(trainer.out / "last"), str(tmp_path / "corpus.txt")
    full = cli(capsys, "eval", ckpt, "--data", data)
    assert full.returncode == 0, full.stderr
    full = json.loads(full.stdout)
    half = cli(capsys, "eval", ckpt, "--data", data, "--precision", "bfloat16")
    assert half.returncode == 0 and "precision: bfloat16 (as asked" in half.stderr
    half = json.loads(half.stdout)
    assert full["precision"] == "float32" and half["precision"] == "bfloat16"
    assert half["loss"] != full["loss"] and abs(half["loss"] - full["loss"]) < 0.05
    bad = cli(capsys, "generate", ckpt, "--prompt", "To be", "--precision", "half")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "glassformer: error: --precision must be one of ['auto', 'float32', 'bfloat16', 'float16'], got 'half'"]

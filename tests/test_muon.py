"""optimizer: muon — Muon on the blocks' weight matrices, AdamW on the rest, stepped and saved as one."""

from __future__ import annotations

import math

import pytest
import torch

from glassformer import ModelConfig, build_model
from glassformer.errors import GlassformerError
from glassformer.training import TrainConfig, lr_at, make_optimizer
from glassformer.training.optim import Optimizers, muon_params
from training_helpers import config as base_config
from training_helpers import train


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)  # tiny models: threads only add synchronisation (and stall on a busy machine)


def config(tmp_path, name="run", **changes) -> TrainConfig:
    return base_config(tmp_path, name, **{"optimizer": "muon", **changes})


def names_of(model, params) -> list[str]:
    names = {id(p): n for n, p in model.named_parameters()}  # a shared parameter: its first name
    return [names[id(p)] for p in params]


def split(model) -> tuple[list[str], list[str]]:
    """(names of Muon's parameters, names of AdamW's) of make_optimizer(kind="muon")."""
    optimizer = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), kind="muon")
    assert isinstance(optimizer, Optimizers) and set(optimizer.parts) == {"adamw", "muon"}
    muon, adamw = ([p for g in optimizer.parts[k].param_groups for p in g["params"]] for k in ("muon", "adamw"))
    return names_of(model, muon), names_of(model, adamw)


@pytest.mark.parametrize("arch, tie", [("lm", True), ("lm", False), ("encoder-decoder", True)])
def test_muon_takes_exactly_the_blocks_weight_matrices(arch, tie):
    model = build_model(ModelConfig.preset("tiny-char", vocab_size=10, arch=arch, tie=tie))
    muon, adamw = split(model)
    blocks = ("enc.", "dec.") if arch == "encoder-decoder" else ("blocks.",)
    expected = [n for n, p in model.named_parameters() if n.startswith(blocks) and p.dim() == 2]
    assert muon == expected and all(n.endswith(("qkv.weight", "o_proj.weight", "up.weight", "down.weight"))
                                    for n in muon)
    assert "embeddings.tok.weight" in adamw and ("head.weight" in adamw) == (not tie)
    assert all(n.endswith("bias") or "norm" in n for n in adamw if n.startswith(blocks))
    # every trainable parameter in exactly one optimizer (a tied matrix once)
    assert len(muon) + len(adamw) == len(set(muon + adamw)) == len(list(model.parameters()))


def test_a_shared_matrix_is_counted_once():
    model = build_model(ModelConfig.preset("tiny-char", vocab_size=10))
    model.blocks[1].ffn.up.weight = model.blocks[0].ffn.up.weight  # shared between blocks: Muon's, once
    model.head.weight = model.blocks[0].ffn.down.weight  # shared with the head (outside the blocks): AdamW's
    muon, adamw = split(model)
    assert muon.count("blocks.0.ffn.up.weight") == 1 and "blocks.0.ffn.down.weight" in adamw
    assert "blocks.0.ffn.down.weight" not in muon
    assert len(muon) + len(adamw) == len(set(muon + adamw)) == len(list(model.parameters()))
    assert [p.dim() for p in muon_params(model)] == [2] * len(muon)


def test_adamw_stays_the_default_and_bad_kinds_are_refused():
    model = build_model(ModelConfig.preset("tiny-char", vocab_size=10))
    assert isinstance(make_optimizer(model, 1e-3, 0.1, (0.9, 0.99)), torch.optim.AdamW)
    with pytest.raises(GlassformerError, match=r"^optimizer must be one of \['adamw', 'muon'\], got 'sgd'$"):
        make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), kind="sgd")
    with pytest.raises(GlassformerError, match=r"^optimizer must be one of \['adamw', 'muon'\], got 'sgd'$"):
        TrainConfig.from_dict({"optimizer": "sgd"})


def test_training_with_muon_learns_and_schedules_both(tmp_path):
    trainer, result = train(config(tmp_path, max_steps=20, eval_every=10))
    assert isinstance(trainer.optimizer, Optimizers)
    val = [h["val_loss"] for h in trainer.history if "val_loss" in h]
    train_loss = [h["train_loss"] for h in trainer.history if "train_loss" in h]
    assert val[-1] < val[0] < math.log(trainer.tokenizer.vocab_size) + 1 and train_loss[-1] < train_loss[0]
    assert result["step"] == 20 and result["stopped"] == "done"
    assert trainer.optimizer.parts["muon"].state  # Muon's momentum buffers exist: it stepped
    # the schedule set every group of both optimizers (the last step's lr: step 19 of a cosine to 20)
    cfg = trainer.config
    last = lr_at(19, cfg.lr_schedule, cfg.lr, cfg.warmup_steps, cfg.max_steps, cfg.min_lr)
    for part in trainer.optimizer.parts.values():
        assert [g["lr"] for g in part.param_groups] == [last] * len(part.param_groups)


def test_muon_resume_is_bit_identical(tmp_path):
    # 4 steps in one run == 2 steps, then resume for 2 more (the schedule is fixed by lr_decay_steps=4)
    straight, _ = train(config(tmp_path, "straight", max_steps=4, eval_every=2, lr_decay_steps=4))
    train(config(tmp_path, "split", max_steps=2, eval_every=2, lr_decay_steps=4))
    resumed, result = train(config(tmp_path, "split", max_steps=4, eval_every=2, lr_decay_steps=4, resume=True))
    assert result["step"] == 4
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    saved, loaded = straight.optimizer.state_dict(), resumed.optimizer.state_dict()
    assert set(saved) == {"adamw", "muon"}
    for kind in saved:
        assert saved[kind]["param_groups"] == loaded[kind]["param_groups"]
        for index, state in saved[kind]["state"].items():
            assert all(torch.equal(v, loaded[kind]["state"][index][k]) for k, v in state.items())


@pytest.mark.parametrize("first, then", [("muon", "adamw"), ("adamw", "muon")])
def test_resuming_with_the_other_optimizer_is_one_line(tmp_path, first, then):
    train(config(tmp_path, "run", max_steps=2, eval_every=2, optimizer=first))
    with pytest.raises(GlassformerError, match=f"it was trained with optimizer '{first}', this run uses '{then}'"):
        train(config(tmp_path, "run", max_steps=4, eval_every=2, optimizer=then, resume=True))


def test_muon_state_of_another_optimizer_is_refused():
    model = build_model(ModelConfig.preset("tiny-char", vocab_size=10))
    adamw = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99))
    muon = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), kind="muon")
    with pytest.raises(GlassformerError, match=r"optimizer state must hold the states of \['adamw', 'muon'\], got "
                                               r"\['param_groups', 'state'\]"):
        muon.load_state_dict(adamw.state_dict())


def _backward(model, scaler: torch.amp.GradScaler) -> None:
    ids = torch.arange(8).remainder(10)[None]
    scaler.scale(model(ids).float().square().mean()).backward()


def test_grad_scaler_drives_the_combined_optimizer():
    """float16's GradScaler takes Optimizers like any optimizer, as Trainer.train_step calls it: unscale_
    gives every parameter of both optimizers its true gradient, and step is skipped for both when one
    gradient overflowed."""
    torch.manual_seed(0)
    model = build_model(ModelConfig.preset("tiny-char", vocab_size=10)).eval()  # eval: no dropout
    twin = build_model(ModelConfig.preset("tiny-char", vocab_size=10)).eval()
    twin.load_state_dict(model.state_dict())
    optimizer = make_optimizer(model, 1e-2, 0.1, (0.9, 0.99), kind="muon")
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    _backward(model, scaler)
    _backward(twin, torch.amp.GradScaler("cpu", enabled=False))
    scaler.unscale_(optimizer)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    scaler.step(optimizer)
    scaler.update()
    assert not torch.equal(model.blocks[0].ffn.up.weight, twin.blocks[0].ffn.up.weight)  # Muon stepped
    assert not torch.equal(model.embeddings.tok.weight, twin.embeddings.tok.weight)  # AdamW stepped
    optimizer.zero_grad(set_to_none=True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    _backward(model, scaler)
    model.blocks[0].ffn.up.weight.grad[0, 0] = math.inf  # an overflow in one of Muon's matrices
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # neither optimizer stepped
    scaler.update()
    assert scaler.get_scale() == 2.0 ** 9  # and the scale backed off


def test_float16_training_with_muon(tmp_path):
    """The trainer's GradScaler (on for float16) works with Muon: the run trains and saves."""
    trainer, result = train(config(tmp_path, precision="float16", max_steps=4, eval_every=2))
    assert result["precision"] == "float16" and trainer.scaler.is_enabled()
    assert math.isfinite(result["val_loss"]) and trainer.optimizer.parts["muon"].state
    assert (tmp_path / "run" / "last").exists()


def test_a_torch_without_muon_is_one_line(monkeypatch):
    monkeypatch.delattr(torch.optim, "Muon")
    model = build_model(ModelConfig.preset("tiny-char", vocab_size=10))
    with pytest.raises(GlassformerError, match=r"needs torch.optim.Muon, which torch .* does not have"):
        make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), kind="muon")

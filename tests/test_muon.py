"""optimizer: muon — Muon on the blocks' weight matrices, AdamW on the rest, stepped and saved as one."""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import pytest
import torch

from glassformer import ModelConfig, build_model
from glassformer.errors import GlassformerError
from glassformer.training import TrainConfig, lr_at, make_optimizer
from glassformer.training.muon import Muon, newton_schulz, ns_case, resolve_ns_precision
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


def test_the_training_package_imports_on_a_torch_without_muon():
    """torch < 2.9 has no torch.optim.Muon (pyproject allows torch >= 2.4): importing training still works, and
    AdamW training with it; only asking for Muon is refused."""
    code = ("import torch; del torch.optim.Muon\n"
            "from glassformer.training import Trainer, TrainConfig\n"
            "from glassformer.training.optim import make_optimizer\n"
            "from glassformer import ModelConfig; from glassformer.models import build_model\n"
            "m = build_model(ModelConfig.preset('tiny-char', vocab_size=10))\n"
            "make_optimizer(m, 1e-3, 0.1, (0.9, 0.99), kind='adamw')\n"
            "try:\n    make_optimizer(m, 1e-3, 0.1, (0.9, 0.99), kind='muon')\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("GlassformerError optimizer 'muon' needs torch.optim.Muon")


# glassformer's Muon: torch's step with the Newton-Schulz precision chosen for the machine

SHAPES = [(24, 8), (8, 24), (16, 16)]  # tall, wide, square: both orientations of the iteration


def _matrices(seed: int = 0) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=generator)) for s in SHAPES]


def _steps(optimizer, params, steps: int = 3, seed: int = 1) -> None:
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=generator)
        optimizer.step()


@pytest.mark.parametrize("options", [{}, {"nesterov": False, "adjust_lr_fn": "match_rms_adamw"},
                                     {"adjust_lr_fn": "original", "weight_decay": 0.0, "momentum": 0.9}])
def test_muon_in_bfloat16_is_torchs_muon_to_the_bit(options):
    ours, theirs = _matrices(), _matrices()
    _steps(Muon(ours, ns_precision="bfloat16", lr=0.02, **options), ours)
    reference = torch.optim.Muon(theirs, lr=0.02, **options)
    _steps(reference, theirs)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


@pytest.mark.parametrize("options", [{}, {"nesterov": False, "adjust_lr_fn": "match_rms_adamw"}])
def test_muon_in_float32_is_torchs_iteration_in_float32(monkeypatch, options):
    """torch's Muon with its bfloat16 cast made a float32 copy is the float32 reference; nesterov=False
    also shows the iteration leaves the momentum buffer (its input, not copied by a cast in float32) alone."""
    ours, theirs = _matrices(), _matrices()
    optimizer = Muon(ours, ns_precision="float32", lr=0.02, **options)
    _steps(optimizer, ours)
    assert optimizer.ns_dtype == torch.float32
    monkeypatch.setattr(torch.Tensor, "bfloat16", lambda self: self.to(torch.float32, copy=True))
    reference = torch.optim.Muon(theirs, lr=0.02, **options)
    _steps(reference, theirs)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(optimizer.state[a]["momentum_buffer"], reference.state[b]["momentum_buffer"])


def test_float32_and_bfloat16_iterations_agree_to_bfloat16_precision():
    update = torch.randn(32, 96, generator=torch.Generator().manual_seed(0))
    coefficients = (3.4445, -4.7750, 2.0315)
    fp32, bf16 = (newton_schulz(update, coefficients, 5, 1e-7, d) for d in (torch.float32, torch.bfloat16))
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.bfloat16 and fp32.shape == (32, 96)
    torch.testing.assert_close(bf16.float(), fp32, rtol=0.05, atol=0.05)
    singular = torch.linalg.svdvals(fp32)  # orthogonalised: singular values near 1 (Muon's ~0.5-1.5)
    assert singular.min() > 0.5 and singular.max() < 1.5


def test_checkpoints_of_torchs_muon_and_ours_load_into_each_other():
    ours, theirs = _matrices(), _matrices()
    mine, reference = Muon(ours, ns_precision="bfloat16", lr=0.02), torch.optim.Muon(theirs, lr=0.02)
    _steps(reference, theirs, steps=2)
    for a, b in zip(ours, theirs):
        a.data.copy_(b.data)
    mine.load_state_dict(copy.deepcopy(reference.state_dict()))  # a copy: as if read from a file
    assert mine.state_dict()["param_groups"] == reference.state_dict()["param_groups"]
    _steps(mine, ours, seed=5)
    _steps(reference, theirs, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    reference.load_state_dict(copy.deepcopy(mine.state_dict()))  # and back: same keys, same tensors
    assert all(torch.equal(reference.state[b]["momentum_buffer"], mine.state[a]["momentum_buffer"])
               for a, b in zip(ours, theirs))


def test_auto_precision_follows_the_hardware_and_the_measurement(monkeypatch):
    from glassformer.runtime import kernel_choice
    monkeypatch.setattr(kernel_choice, "cpu_features", lambda: ["avx2"])
    name, why = resolve_ns_precision("auto", "cpu", SHAPES)
    assert name == "float32" and "no bfloat16 instructions" in why
    monkeypatch.setattr(kernel_choice, "cpu_features", lambda: ["avx2", "amx_bf16"])
    asked = []
    for verdict, expected in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(kernel_choice, "choose", lambda case, ways, v=verdict: asked.append(case) or v)
        assert resolve_ns_precision("auto", "cpu", SHAPES)[0] == expected
    assert asked == [ns_case(SHAPES)] * 2 and asked[0] == "muon newton-schulz bfloat16 | 8x24 16x16"
    assert resolve_ns_precision("bfloat16", "cpu", SHAPES) == ("bfloat16", "as asked")


def test_the_trainers_muon_resolves_its_precision_once(monkeypatch):
    from glassformer.runtime import kernel_choice
    monkeypatch.setattr(kernel_choice, "cpu_features", lambda: ["avx2", "amx_bf16"])
    calls = []
    monkeypatch.setattr(kernel_choice, "choose", lambda case, ways: calls.append(ways) or False)
    model = build_model(ModelConfig.preset("tiny-char", vocab_size=10))
    muon = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), kind="muon").parts["muon"]
    assert isinstance(muon, Muon) and muon.ns_precision == "auto" and not calls  # nothing measured yet
    _steps(muon, muon_params(model), steps=2)
    assert muon.ns_dtype == torch.float32 and len(calls) == 1 and "measured not clearly faster" in muon.ns_reason
    plain, special = calls[0]()  # the ways timed: float32 and bfloat16 iterations of the model's shapes
    assert {m.dtype for m in plain()} == {torch.float32} and {m.dtype for m in special()} == {torch.bfloat16}


def test_a_bad_ns_precision_is_one_line():
    with pytest.raises(GlassformerError, match=r"^ns_precision must be one of \['auto', 'float32', 'bfloat16'\], "
                                               r"got 'float16'$"):
        Muon(_matrices(), ns_precision="float16")

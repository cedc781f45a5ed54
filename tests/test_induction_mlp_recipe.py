"""The induction recipe with MLPs that join late (recipe.mlp_from_step, configs/induction_heads_mlp.yaml): the
MLPs stay exactly zero and unchanged before the switch step and train after it, a run resumed before, across and
after the switch ends bit-identical to one run straight through, and bad values are refused naming the option."""

from __future__ import annotations

import pytest
import torch

from glassformer.config import ModelConfig
from glassformer.errors import GlassformerError
from glassformer.models import build_model
from glassformer.recipes import find_recipe, load_recipe, run_recipe
from glassformer.recipes.induction import MLPsJoinLate, RepeatedSegments, hold_mlps_at_zero
from glassformer.training import TrainConfig, load_checkpoint

SWITCH = 3


def _mlp(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if ".ffn." in k}


def _train(out, steps: int, resume: bool = False) -> torch.nn.Module:
    """A 1-layer model with MLPs trained to ``steps`` into ``out`` (MLPs joining at SWITCH), built from seed 0."""
    task = RepeatedSegments(vocab=8, block_size=16, min_len=2, max_len=4, seed=0, eval_rows=8)
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=task.tokenizer.vocab_size, d_model=16, n_heads=2, n_layers=1,
                                    d_ff=32, max_len=16, pos="rope", tie=False))
    hold_mlps_at_zero(model)
    config = TrainConfig.from_dict({"block_size": 16, "batch_size": 4, "max_steps": steps, "lr": 1e-2,
                                    "warmup_steps": 0, "lr_schedule": "constant", "weight_decay": 0.1,
                                    "eval_every": 0, "eval_batches": 1, "eval_batch_size": 8, "progress": False,
                                    "precision": "float32", "num_threads": 1, "seed": 0, "out_dir": str(out),
                                    "resume": resume})
    MLPsJoinLate(config, model, task.tokenizer, task, mlp_from_step=SWITCH).train()
    return model


def test_mlps_zero_and_unchanged_before_the_switch_then_trained(tmp_path):
    torch.set_num_threads(1)
    straight = _train(tmp_path / "straight", 7)
    before = _train(tmp_path / "resumed", 2)  # stopped before the switch
    held = _mlp(before)
    assert all(float(held[k].abs().max()) == 0 for k in held if ".down." in k)  # the MLPs add exactly 0
    torch.manual_seed(0)
    initial = build_model(before.config).state_dict()
    assert all(torch.equal(held[k], initial[k]) for k in held if ".up." in k)  # untouched, weight decay too
    assert all(not torch.equal(v, initial[k]) for k, v in before.state_dict().items()
               if ".self_attn." in k and k.endswith("weight"))  # while attention trained
    across = _train(tmp_path / "resumed", 5, resume=True)  # resumed before the switch, stopped after it
    after = _mlp(across)
    assert all(not torch.equal(after[k], held[k]) for k in held)  # all trained (up: from step 2 on)
    end = _train(tmp_path / "resumed", 7, resume=True)  # resumed after the switch
    for key, value in straight.state_dict().items():
        assert torch.equal(value, end.state_dict()[key]), key  # bit-identical to the run straight through
    assert all(p.requires_grad for p in end.parameters())


@pytest.mark.parametrize("value, expected", [(-1, "an int >= 0"), (2.5, "an int >= 0"), (True, "an int >= 0"),
                                             ("500", "an int >= 0")])
def test_bad_mlp_from_step_is_refused(value, expected):
    with pytest.raises(GlassformerError, match=f"recipe.mlp_from_step must be {expected}"):
        load_recipe(find_recipe("induction_heads_mlp"), {"recipe.mlp_from_step": value})


@pytest.mark.parametrize("overrides, expected", [
    ({"model.attn_only": True}, "recipe.mlp_from_step=500 holds the MLPs back, but the model has none"),
    ({"max_steps": 400}, "recipe.mlp_from_step=500 must be at most max_steps=400")])
def test_mlp_from_step_needs_mlps_and_a_switch_inside_the_run(tmp_path, overrides, expected):
    recipe = load_recipe(find_recipe("induction_heads_mlp"), {**overrides, "out_dir": str(tmp_path / "run")})
    with pytest.raises(GlassformerError, match=expected) as caught:
        run_recipe(recipe)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "run" / "with_mlps").exists() and not (tmp_path / "run" / "attn_only").exists()


@pytest.mark.parametrize("late", [0, 2])
def test_the_recipe_holds_its_mlps_until_the_step(tmp_path, late):
    torch.set_num_threads(1)
    recipe = load_recipe(find_recipe("induction_heads_mlp"), {
        "max_steps": 2, "recipe.mlp_from_step": late, "recipe.measure_every": 1, "recipe.probe_length": 8,
        "recipe.probe_batch": 4, "recipe.control_lengths": [8], "block_size": 24, "batch_size": 4,
        "model.d_model": 16, "model.n_heads": 2, "model.d_ff": 32, "out_dir": str(tmp_path / "run")})
    run = run_recipe(recipe)["runs"]["with_mlps"]
    down = load_checkpoint(tmp_path / "run" / "with_mlps" / "model").model.blocks[0].ffn.down.weight.detach()
    if late:  # held to the end of this run: the MLPs still add exactly 0
        assert run["mlp_from_step"] == 2 and float(down.abs().max()) == 0
    else:  # 0: a plain run, nothing held back
        assert "mlp_from_step" not in run and float(down.abs().max()) > 0

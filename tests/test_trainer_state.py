"""The Trainer owns its state (issue 31, point 5): resume.py saves and restores a small state object
with pure functions; it writes no attribute of a trainer and does not import the loop (no cycle)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import torch

import glassformer.training.resume as resume
from glassformer.training.resume import TrainState, restore, state_to_dict
from training_helpers import config, train

RESUME = Path(resume.__file__)


def _assigned_attributes(tree: ast.AST) -> list[str]:
    """``name.attr`` of every attribute assignment target (plain, augmented, annotated, tuple)."""
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute):
                    found.append(f"{ast.unparse(part.value)}.{part.attr}")
    return found


def test_resume_assigns_no_attribute_of_anything_it_is_given():
    tree = ast.parse(RESUME.read_text(encoding="utf-8"))
    assert _assigned_attributes(tree) == []
    # the checker itself finds what it should: the old code's `trainer.step, trainer.best_val = ...`
    old = ast.parse("trainer.step, trainer.best_val = 1, 2.0\ntrainer.tokens_seen += 3\n")
    assert _assigned_attributes(old) == ["trainer.step", "trainer.best_val", "trainer.tokens_seen"]


def test_resume_does_not_import_the_loop():
    tree = ast.parse(RESUME.read_text(encoding="utf-8"))
    modules = [(node.module or "", node.level) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    modules += [(alias.name, 0) for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert modules and not [m for m, _ in modules if m.split(".")[-1] == "loop"]
    assert "Trainer" not in {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}  # not even a hint


def test_trainer_state_round_trips_through_a_checkpoint(tmp_path):
    first, _ = train(config(tmp_path, "a", max_steps=4, eval_every=2))
    assert isinstance(first.run_state, TrainState)
    assert first.run_state.step == first.step == 4 and first.tokens_seen == 4 * 4 * 8
    assert math.isfinite(first.best_val) and first.best_step in (2, 4)
    saved = state_to_dict(first.run_state, first.model, first.optimizer, first.scaler, "float32",
                          torch.device("cpu"))
    assert (saved["step"], saved["best_val"], saved["best_step"], saved["tokens_seen"]) == \
        (4, first.best_val, first.best_step, 4 * 4 * 8)
    # restored into a fresh trainer's model and optimizer; the trainer itself is untouched by restore()
    second, _ = train(config(tmp_path, "b", max_steps=1, eval_every=1))
    before = second.run_state
    found = restore(None, first.out, first.config, second.model, second.optimizer, second.scaler,
                    torch.device("cpu"))
    assert found is not None and found.state == first.run_state and found.state is not first.run_state
    assert second.run_state is before and second.step == 1
    assert found.checkpoint == first.out / "ckpt-000004"
    assert [h["step"] for h in found.history] == [h["step"] for h in first.history]
    for name, tensor in first.model.state_dict().items():
        assert torch.equal(tensor, second.model.state_dict()[name]), name


def test_restore_with_nothing_to_resume_returns_none(tmp_path):
    trainer, _ = train(config(tmp_path, "a", max_steps=1, eval_every=1))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert restore(None, empty, trainer.config, trainer.model, trainer.optimizer, trainer.scaler,
                   torch.device("cpu")) is None
    assert trainer.resume(tmp_path / "missing") is False and trainer.step == 1

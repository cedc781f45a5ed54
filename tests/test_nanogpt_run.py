"""bench.nanogpt's training-run helpers: a checkout is checked, its command is the README's, its
evaluation lines are read (no nanoGPT code is needed: the lines and the folder are made up)."""

from __future__ import annotations

from pathlib import Path

import pytest

from glassformer.bench.nanogpt import README_CPU_ARGS, nanogpt_checkout, nanogpt_command, nanogpt_evals
from glassformer.errors import GlassformerError


def test_evaluation_lines_are_read_with_their_time():
    lines = [(0.1, "tokens per iteration will be: 768"), (1.5, "step 0: train loss 4.2874, val loss 4.2823"),
             (2.0, "iter 0: loss 4.2700, time 120.00ms, mfu -100.00%"),
             (99.0, "step 2000: train loss 1.7626, val loss 1.8857")]
    assert nanogpt_evals(lines) == [
        {"step": 0, "train_loss": 4.2874, "val_loss": 4.2823, "at_s": 1.5},
        {"step": 2000, "train_loss": 1.7626, "val_loss": 1.8857, "at_s": 99.0}]


def test_a_folder_that_is_not_a_checkout_is_one_line(tmp_path):
    (tmp_path / "model.py").write_text("")
    with pytest.raises(GlassformerError, match="lacks train.py, configurator.py"):
        nanogpt_checkout(tmp_path)


def test_the_command_is_the_readme_cpu_run_with_overrides_last(tmp_path):
    for name in ("train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py",
                 "data/shakespeare_char/prepare.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    checkout = nanogpt_checkout(tmp_path)
    command = nanogpt_command(checkout, extra=("--max_iters=20",), python="python")
    assert command[:3] == ["python", str(tmp_path.resolve() / "train.py"),
                           str(Path(tmp_path.resolve(), "config", "train_shakespeare_char.py"))]
    assert tuple(command[3:-1]) == README_CPU_ARGS and command[-1] == "--max_iters=20"
    assert "--device=cpu" in command and "--compile=False" in command

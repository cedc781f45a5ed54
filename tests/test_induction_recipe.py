"""The induction-head recipe end to end at a toy size: it trains, measures heads, draws, and its GPT-2
part goes through a Hugging Face folder and back (the full run and its figures: docs/results.md)."""

from __future__ import annotations

import json

import torch

from glassformer.recipes import find_recipe, load_recipe, run_recipe
from glassformer.recipes.induction import RepeatedSegments, phase_change_step


def test_rows_repeat_their_segments():
    task = RepeatedSegments(vocab=10, block_size=32, min_len=3, max_len=5, seed=1)
    batch = task.global_batch(0, 4)
    assert batch["ids"].shape == (4, 32) and torch.equal(batch["ids"][:, 1:], batch["labels"][:, :-1])
    assert (batch["ids"][:, 0] == task.bos).all() and int(batch["ids"][:, 1:].min()) >= task.low
    assert torch.equal(task.global_batch(0, 4)["ids"], batch["ids"])  # a step's batch depends on (seed, step)
    row = batch["ids"][0].tolist()[1:]
    n = next(n for n in range(3, 6) if row[:n] == row[n:2 * n])  # the first segment, then its copy
    assert row[:n] == row[n:2 * n]


def test_phase_change_step():
    values = (4.0, 3.9, 4.0, 3.95, 3.9, 3.0, 1.0, 0.4, 0.3, 0.25, 0.2, 0.2)
    history = [{"step": 10 * i, "loss_repeat": v} for i, v in enumerate(values)]
    assert phase_change_step(history) == 60
    assert phase_change_step([{"step": 0, "loss_repeat": 4.0}, {"step": 10, "loss_repeat": 3.8}]) is None
    # a run without a phase change whose one noisy record dips below halfway (the old rule said 840)
    noisy = [{"step": s, "loss_repeat": 4.1 - 0.002 * (s % 60)} for s in range(0, 1000, 20)]
    noisy[42]["loss_repeat"] = 1.9
    assert phase_change_step(noisy) is None


def test_recipe_runs_end_to_end(tmp_path):
    torch.set_num_threads(1)
    recipe = load_recipe(find_recipe("induction_heads"), {
        "max_steps": 12, "recipe.gpt2_steps": 6, "recipe.measure_every": 6, "recipe.probe_length": 8,
        "recipe.probe_batch": 4, "block_size": 24, "batch_size": 8, "model.d_model": 16, "model.n_heads": 2,
        "out_dir": str(tmp_path / "run")})
    results = run_recipe(recipe)
    runs = results["runs"]
    assert set(runs) == {"attn_only", "gpt2"}
    history = runs["attn_only"]["history"]
    assert [r["step"] for r in history] == [0, 6, 12]
    assert len(history[-1]["induction"]) == 2 and len(history[-1]["induction"][0]) == 2
    for name in ("attn_only", "gpt2"):
        for png in ("phase_change.png", "head_scores.png"):
            assert (tmp_path / "run" / name / png).read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "run" / "gpt2" / "hf" / "config.json").is_file()
    # the GPT-2 read back from its Hugging Face folder scores exactly as the model that wrote it
    gpt2 = runs["gpt2"]
    assert gpt2["loaded_through_interop"]["induction"] == gpt2["final"]["induction"]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["task"] == "induction"
    assert (tmp_path / "run" / "attn_only" / "model" / "config.json").is_file()
    assert set(runs["attn_only"]["by_probe_length"]) == {8}  # the control lengths that fit block_size 24

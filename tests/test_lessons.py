"""Lesson 2's experiments show what they claim, and the example scripts run."""

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from glassformer.lessons import lesson2

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_attention_matches_torch():
    found = lesson2.attention_vs_torch()
    assert found["max_out_diff"] < 1e-5 and found["max_weight_diff"] < 1e-5


def test_unscaled_softmax_saturates_and_scaled_does_not():
    rows = lesson2.why_scale(widths=(4, 256), trials=100)
    small, large = rows
    assert large["max_weight_unscaled"] > 0.85 > small["max_weight_unscaled"]
    assert large["grad_norm_unscaled"] < 0.5 * small["grad_norm_unscaled"]
    assert abs(large["max_weight_scaled"] - small["max_weight_scaled"]) < 0.05


def test_permutation_equivariance_finding():
    found = lesson2.permutation_equivariance()
    assert found["max_diff_pos_none"] < 1e-5 < found["max_diff_pos_sinusoidal"]


def test_positions_make_the_order_task_learnable():
    rows = {r["pos"]: r["accuracy"] for r in lesson2.positions_on_an_order_task(schemes=("none", "rope"), steps=150)}
    assert rows["rope"] > 0.9 and rows["none"] < 0.4


@pytest.mark.parametrize("script", ["01_attention_vs_torch.py", "02_why_scale.py", "03_permutation_equivariance.py"])
def test_example_scripts_run(script, capsys):
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    assert capsys.readouterr().out.strip()


def test_positions_example_runs():
    out = subprocess.run([sys.executable, str(EXAMPLES / "04_positions.py"), "--steps", "5"], capture_output=True,
                         text=True, check=True, timeout=600).stdout
    assert "rope" in out and "accuracy" in out

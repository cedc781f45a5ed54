"""Lesson 2's experiments show what they claim, and the example scripts run."""

import runpy
import sys
from pathlib import Path

import torch

from glassformer.lessons import lesson2, tiny_char

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


def _run_example(script: str, capsys) -> list[str]:
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    return capsys.readouterr().out.splitlines()


def test_attention_example_prints_the_measured_differences(capsys):
    found = lesson2.attention_vs_torch()
    assert max(found.values()) < 1e-5
    assert _run_example("01_attention_vs_torch.py", capsys) == [
        f"max |output difference|  = {found['max_out_diff']:.2e}",
        f"max |weights difference| = {found['max_weight_diff']:.2e}",
        "equal to float32 rounding"]


def test_why_scale_example_prints_the_saturation_table(capsys):
    rows = lesson2.why_scale()
    lines = _run_example("02_why_scale.py", capsys)
    printed = [[float(v) for v in line.split()] for line in lines[1:]]
    assert [r[0] for r in printed] == [r["d"] for r in rows] == [4, 16, 64, 256, 1024]
    for numbers, row in zip(printed, rows, strict=True):
        assert numbers[1:] == [round(row["max_weight_unscaled"], 3), round(row["max_weight_scaled"], 3),
                               round(row["grad_norm_unscaled"], 4), round(row["grad_norm_scaled"], 4)]
    unscaled_max = [r[1] for r in printed]
    assert unscaled_max == sorted(unscaled_max) and unscaled_max[-1] > 0.9  # saturates as d grows
    assert max(r[2] for r in printed) - min(r[2] for r in printed) < 0.05  # scaled: the same at every width
    assert printed[-1][3] < 0.25 * printed[0][3]  # the unscaled gradient vanishes


def test_permutation_example_prints_both_findings(capsys):
    found = lesson2.permutation_equivariance()
    assert found["max_diff_pos_none"] < 1e-5 < 0.1 < found["max_diff_pos_sinusoidal"]
    assert _run_example("03_permutation_equivariance.py", capsys) == [
        f"pos='none':       max |f(Px) - P f(x)| = {found['max_diff_pos_none']:.2e}  (equivariant)",
        f"pos='sinusoidal': max |f(Px) - P f(x)| = {found['max_diff_pos_sinusoidal']:.2e}  (order matters)"]


def test_lesson2_summary_reports_the_findings():
    findings = {"attention_vs_torch": {"max_out_diff": 1.5e-7, "max_weight_diff": 6e-8},
                "why_scale": [{"d": 64, "max_weight_unscaled": 0.838, "max_weight_scaled": 0.25,
                               "grad_norm_unscaled": 0.1598, "grad_norm_scaled": 0.2925}],
                "permutation_equivariance": {"max_diff_pos_none": 9.5e-7, "max_diff_pos_sinusoidal": 1.7},
                "positions": [{"pos": "rope", "accuracy": 0.984, "chance": 0.0625}]}
    text = lesson2.summary(findings)
    for shown in ("max |out diff| = 1.50e-07, max |weight diff| = 6.00e-08", "0.838", "0.1598",
                  "pos='none': 9.50e-07   pos='sinusoidal': 1.70e+00", "rope        0.984   (chance 0.062)"):
        assert shown in text, shown


def test_tiny_char_lesson_findings_and_summary(tmp_path):
    torch.set_num_threads(1)
    result = tiny_char.run(tmp_path, steps=20, progress=False)
    assert result["causality"]["max_leak"] == 0.0 < result["causality"]["max_visible_change"]
    assert result["checkpoint"]["reload_max_logit_diff"] == 0.0
    assert result["shapes"]["embeddings"] == [2, tiny_char.CONTEXT, 32] and result["window_count"] == 24
    assert [h["step"] for h in result["history"]] == [0, 20]
    assert result["history"][1]["train_loss"] < result["history"][0]["train_loss"]
    text = tiny_char.summary(result)
    c, history = result["configuration"], result["history"]
    for shown in (f"{c['parameters']:,} parameters",
                  f"final train token accuracy: {result['final_train_token_accuracy']:.3f}",
                  f"generated: {result['generation']['text']!r}",
                  f"{result['causality']['checks']} (token, position) pairs",
                  f"0:{history[0]['train_loss']:.3f}  20:{history[1]['train_loss']:.3f}"):
        assert shown in text, shown
    for name in ("results.json", "loss_curve.png", "attention_layer1.png", "attention_layer2.png", "run/loss.png",
                 "tiny-char-lm/model.safetensors"):
        assert (tmp_path / name).is_file(), name


def test_positions_example_runs(capsys, monkeypatch):
    """The script with its option, in this process (tests/test_docs.py runs it as a command, as documented)."""
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / "04_positions.py"), "--steps", "5"])
    out = "\n".join(_run_example("04_positions.py", capsys))
    assert "rope" in out and "accuracy" in out

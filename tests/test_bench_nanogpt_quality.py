"""benchmarks/bench_nanogpt_quality.py's --nanogpt_result: an earlier output's nanoGPT runs are reused, and a
file without them is one line naming it (no nanoGPT code is needed: the JSON is made up)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_nanogpt_quality.py"
spec = importlib.util.spec_from_file_location("bench_nanogpt_quality", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

MACHINE = {"nanogpt": "/x/nanoGPT", "date": "2026-12-06T05:00:00Z", "cpu": "AMD EPYC (avx512_bf16)", "smoke": False}


def test_an_earlier_output_gives_its_nanogpt_runs(tmp_path):
    runs = [{"wall_s": 110.0, "val_loss": 1.8857}, {"wall_s": 116.0, "val_loss": 1.8857}]
    path = tmp_path / "quality.json"
    path.write_text(json.dumps({"machine": MACHINE, "runs": {"nanogpt": runs, "glassformer": []}}), encoding="utf-8")
    assert bench.reused_nanogpt_runs(path) == {"runs": runs, "checkout": "/x/nanoGPT",
                                               "when": "2026-12-06T05:00:00Z, AMD EPYC (avx512_bf16)"}


@pytest.mark.parametrize("content", ["not json", json.dumps({"machine": MACHINE, "runs": {"nanogpt": []}}),
                                     json.dumps({"machine": {**MACHINE, "smoke": True},
                                                 "runs": {"nanogpt": [{"wall_s": 3.0}]}})])
def test_a_file_without_full_nanogpt_runs_is_one_line(tmp_path, content):
    path = tmp_path / "quality.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(SystemExit, match=rf"^--nanogpt_result {path}: not an output of this script with nanoGPT runs"):
        bench.reused_nanogpt_runs(path)

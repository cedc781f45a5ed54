"""benchmarks/gpu_check.sh end to end on the CPU (--device cpu: tiny sizes, a few steps), as CI runs it:
every stage passes and the one JSON and one Markdown summary hold each stage's figures; a stage that
overruns its budget is stopped and the summary is still written."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["env", "tests", "speedrun", "bench_baby", "bench_gpt2", "decode", "decode_graphs", "decode_compiled"]


def env() -> dict[str, str]:
    """This interpreter, the source tree first on the path."""
    variables = dict(os.environ, PYTHON=sys.executable)
    variables["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    variables.pop("OUT", None)
    return variables


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_dry_run_on_the_cpu_writes_the_summaries(tmp_path):
    out = tmp_path / "gpu-check"
    # aot_eager: torch.compile traces the step (graph breaks included) without minutes of C++ compiling.
    # The budgets x5 (whole run and each stage): ~190 s with two other busy processes against 470 s was a margin
    # a busier machine could spend; here they guard against a hang, never decide the test.
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu", "--out", str(out),
                           "--compile-backend", "aot_eager", "--budget-scale", "5"], cwd=ROOT,
                          env={**env(), "GPU_CHECK_TOTAL_S": "2400"}, capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "gpu_check.json").read_text())
    assert summary["device"] == "cpu" and summary["dry_run"] is True and summary["finished"]
    assert list(summary["stages"]) == STAGES
    assert {name: s["status"] for name, s in summary["stages"].items()} == dict.fromkeys(STAGES, "ok")
    # "ok" already says each stage ended inside its budget: the harness kills one at its budget ("timeout")
    stages = {name: s["result"] for name, s in summary["stages"].items()}
    assert stages["env"]["torch"] and stages["env"]["flash_sdpa"] == "n/a on CPU"
    assert stages["tests"]["rc"] in (0, 5) and stages["tests"]["failed"] == 0
    speed = stages["speedrun"]
    assert speed["compile"] is True and speed["precision_ran"] == "bfloat16" and speed["steps"] == speed["max_steps"]
    vals = [e["val_loss"] for e in speed["evals"]]
    assert len(vals) >= 2 and all(math.isfinite(v) for v in vals) and vals[-1] < vals[0]
    assert [e["train_s"] for e in speed["evals"]] == sorted(e["train_s"] for e in speed["evals"])
    for name in ("bench_baby", "bench_gpt2"):
        bench = stages[name]
        # MFU is the compiled rate's FLOPs over the measured peak: its formula is checked, not its size
        # (both are timings: on a busy machine a depressed peak measurement can put MFU above 1)
        assert bench["peak_flops"] > 0 and bench["mfu_compiled"] > 0 and math.isfinite(bench["mfu_compiled"])
        assert bench["mfu_compiled"] == pytest.approx(bench["tokens_per_s"]["glassformer-compiled"]
                                                      * bench["flops_per_token"]["glassformer"] / bench["peak_flops"])
        assert {"glassformer", "hf", "glassformer-compiled"} <= set(bench["tokens_per_s"])
    decode = stages["decode"]
    assert set(decode["cases"]["B1-P1-N16"]) == {"bfloat16", "float32"} and decode["ratio_b1_bfloat16"] > 0
    graphs = stages["decode_graphs"]  # the fixed-shape steps ran (no graph on a CPU)
    assert set(graphs["cases"]) == {"B1-P1-N16"} and graphs["ratio_b1_bfloat16"] > 0 and graphs["graphs_captured"] == 0
    assert stages["decode_compiled"]["gain"] > 0 and stages["decode_compiled"]["first_call_s"] > 0
    # the sync goal needs the CUDA tests, skipped on a CPU: not measured
    assert [g["met"] is not None for g in summary["goals"]] == [True, True, True, False]
    md = (out / "gpu_check.md").read_text()
    for heading in ("# glassformer GPU check (CPU dry run", "## Goals (issue 32)", "## Stages",
                    "## Greedy decoding, fixed-shape steps as a CUDA graph",
                    "## Shakespeare-char speed run", "## Training throughput: gpt2", "## Greedy decoding",
                    "## Compiled decoding"):
        assert heading in md
    assert (out / "logs" / "speedrun.log").is_file() and (out / "logs" / "setup.log").is_file()


def test_a_stage_over_its_budget_is_stopped_and_the_summary_written(tmp_path):
    # 8 s in all: the speed run gets them (a stage needs 5; 3 s to spare before it starts), hangs in its
    # compile until stopped, and leaves the decode stage under 5 s: skipped, however fast the machine
    out = tmp_path / "short"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--out",
                           str(out), "--stages", "speedrun,decode", "--total-s", "8", "--compile-backend", "hang"],
                          cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1
    summary = json.loads((out / "gpu_check.json").read_text())
    speed, decode = summary["stages"]["speedrun"], summary["stages"]["decode"]
    assert speed["status"] == "timeout" and speed["rc"] is not None and speed["rc"] < 0 and "log_tail" in speed
    assert decode["status"] == "skipped" and "total budget" in decode["reason"]
    assert [g["met"] for g in summary["goals"]][1:] == [None, None, None]  # not run: not measured
    md = (out / "gpu_check.md").read_text()
    assert "| speedrun | timeout |" in md and "not measured" in md


def test_the_speed_run_trains_eagerly_when_compiling_fails(tmp_path):
    out = tmp_path / "nocompile"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--out",
                           str(out), "--stages", "speedrun", "--compile-backend", "fail"], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (out / "logs" / "speedrun.log").read_text()[-3000:]
    speed = json.loads((out / "gpu_check.json").read_text())["stages"]["speedrun"]["result"]
    assert "on purpose" in speed["compile_error"] and speed["compile"] is False
    assert speed["steps"] == speed["max_steps"] and math.isfinite(speed["evals"][-1]["val_loss"])


def test_the_follow_up_measurements_run_on_the_cpu(tmp_path):
    """benchmarks/gpu_followup.py (first generate in fresh processes; MFU at another batch) at tiny sizes."""
    script = str(ROOT / "benchmarks" / "gpu_followup.py")
    for args in (["first-call"], ["mfu", "--batch", "2", "--compile-backend", "aot_eager"]):
        done = subprocess.run([sys.executable, script, *args, "--device", "cpu", "--out", str(tmp_path)], cwd=ROOT,
                              env=env(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first = json.loads((tmp_path / "gpu_followup_first-call.json").read_text())
    assert [r["policy"] for r in first["rows"]] == ["torch", "glassformer"]
    assert all(r[k] > 0 for r in first["rows"] for k in ("first_s", "second_s", "third_s", "new_prompt_length_s"))
    trained = json.loads((tmp_path / "gpu_followup_mfu.json").read_text())
    assert trained["size"]["batch"] == 2 and set(trained["mfu"]) == {"eager", "compiled"}
    assert all(v > 0 and math.isfinite(v) for v in trained["mfu"].values())  # the formula, not the timing's size:
    assert trained["mfu"] == {name: pytest.approx(tps * trained["flops_per_token"] / trained["peak_flops"])
                              for name, tps in trained["tokens_per_s"].items()}


@pytest.mark.parametrize("args, message", [
    (["first-call", "--device", "tpu"], "--device must be cuda or cpu, got 'tpu'"),
    (["mfu", "--batch", "0"], "--batch must be an int >= 1, got 0")])
def test_the_follow_up_refuses_bad_options_in_one_line(args, message):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_followup.py"), *args], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr

"""The prepared GPU run (issue 32's goals; first written for issue 27): one command, a bounded time, one
JSON and one Markdown summary.

    python benchmarks/gpu_check.py [--device cuda] [--out DIR]      (benchmarks/gpu_check.sh wraps it)
    python benchmarks/gpu_check.py --device cpu --out /tmp/dry      (the CI-sized dry run: tiny sizes)

Each stage runs in its own Python process under its own time budget (killed, process group and all,
when it overruns), so a hang, a crash or a slow compile in one stage costs only that stage. A stage
saves what it has measured as it goes (``stages/NAME.json``), so even a stage that was stopped leaves
its figures; the summary (``gpu_check.json``, ``gpu_check.md``) is rewritten after every stage and
when the run is interrupted. Stages, in order:

    env        torch/CUDA versions, nvidia-smi, the GPU, whether flash SDPA runs
    tests      pytest -m cuda tests/test_gpu_path.py (they skip without CUDA)
    speedrun   configs/shakespeare_char_gpu.yaml through the library's Trainer: time to nanoGPT's val 1.4697
    bench_baby training tokens/s and MFU of nanoGPT's baby GPT, bfloat16, eager vs compiled, vs Hugging Face
    bench_gpt2 the same for GPT-2 small (124M)
    decode     batch-1 greedy decoding of GPT-2 small, glassformer vs Hugging Face generate
    decode_graphs  the same first case with fixed-shape steps replayed as a CUDA graph
               (runtime.decode.set_static_steps("graphs"); the CPU dry run takes the same steps without one)
    decode_compiled  the same decoding with glassformer's step compiled (dynamic shapes), as time allows

The orchestrating process imports no torch: it only starts stages, keeps time and writes summaries.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPEEDRUN_CONFIG = ROOT / "configs" / "shakespeare_char_gpu.yaml"
CORPUS = ROOT / "src" / "glassformer" / "recipes" / "data" / "tinyshakespeare" / "input.txt"
TARGET_VAL = 1.4697  # nanoGPT's README: val loss of its shakespeare_char run (~3 min on an A100)
GOALS = {"speedrun_s": 15.0, "gpt2_mfu": 0.55, "decode_vs_hf": 2.0}  # issue 32 point 6
SYNC_TESTS = ("test_a_training_step_does_not_wait_for_the_gpu", "test_decoding_steps_do_not_wait_for_the_gpu")
TOTAL_S = 470.0  # the stages together (gpu_check.sh passes what is left of its 480 s after setting up)
# Stage -> seconds on a GPU, seconds in the CPU dry run.
STAGES: dict[str, tuple[float, float]] = {
    "env": (20, 60), "tests": (50, 90), "speedrun": (100, 120), "bench_baby": (55, 120), "bench_gpt2": (80, 120),
    "decode": (80, 120), "decode_graphs": (50, 120), "decode_compiled": (35, 120)}
JSON_NAME, MD_NAME = "gpu_check.json", "gpu_check.md"


# ---------------------------------------------------------------------------------------------- orchestration
def now_iso() -> str:
    """The current UTC time, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a reader never sees half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; {} when it is missing or unreadable."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def tail(path: Path, chars: int = 3000) -> str:
    """The last ``chars`` characters of a log file ("" when missing)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def run_stage(name: str, budget: float, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Run stage ``name`` in a child process (its own process group) for at most ``budget`` seconds.

    Returns {"status": "ok" | "failed" | "timeout" | "skipped", "seconds", "budget_s", "rc",
    "result": what the stage saved (possibly partial), "log": the log's path, "log_tail" on failure}.
    """
    log = out / "logs" / f"{name}.log"
    stage_file = out / "stages" / f"{name}.json"
    stage_file.unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--device", args.device,
               "--out", str(out), "--budget", f"{budget:.1f}"]
    if args.compile_backend:
        command += ["--compile-backend", args.compile_backend]
    env = dict(os.environ)
    src = str(ROOT / "src")
    if src not in env.get("PYTHONPATH", "").split(os.pathsep):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    start = time.perf_counter()
    status, rc = "ok", None
    print(f"[gpu_check] {now_iso()} stage {name}: budget {budget:.0f} s", flush=True)
    with open(log, "w", encoding="utf-8") as handle:
        child = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=ROOT, env=env, start_new_session=True)
        try:
            rc = child.wait(timeout=budget)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            status = "timeout"
            kill_group(child)
            rc = child.returncode
        except BaseException:  # Ctrl-C / SIGTERM of the whole run: stop the stage, then pass it on
            kill_group(child)
            raise
    saved = read_json(stage_file)
    record = {"status": status, "seconds": round(time.perf_counter() - start, 1), "budget_s": budget, "rc": rc,
              "result": saved.get("result", {}), "log": str(log.relative_to(out))}
    if saved.get("error"):
        record["error"] = saved["error"]
    if status != "ok":
        record["log_tail"] = tail(log)
    print(f"[gpu_check] stage {name}: {status} in {record['seconds']} s", flush=True)
    return record


def kill_group(child: subprocess.Popen) -> None:
    """SIGTERM the child's process group (compile workers included), SIGKILL what is left after 3 s."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(child.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            child.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def orchestrate(args: argparse.Namespace) -> int:
    """Run the chosen stages within the total budget, writing the summary after each; 0 when all passed."""
    out = Path(args.out).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "stages").mkdir(parents=True, exist_ok=True)
    names = [s.strip() for s in args.stages.split(",") if s.strip()] if args.stages else list(STAGES)
    unknown = [s for s in names if s not in STAGES]
    if unknown:
        raise SystemExit(f"unknown stage(s) {unknown}; expected some of {list(STAGES)}")
    dry = args.device == "cpu"
    summary: dict[str, Any] = {
        "format": 1, "started": now_iso(), "finished": None, "device": args.device, "dry_run": dry,
        "total_budget_s": args.total_s,
        "stages": {n: {"status": "not run", "budget_s": STAGES[n][dry] * args.budget_scale} for n in names}}
    deadline = time.perf_counter() + args.total_s

    def finish(*_: object) -> None:
        summary["finished"] = now_iso()
        write_summary(out, summary)

    def on_term(signum: int, _frame: object) -> None:
        summary["interrupted"] = signal.Signals(signum).name
        finish()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    write_summary(out, summary)
    try:
        for name in names:
            left = deadline - time.perf_counter()
            budget = min(STAGES[name][dry] * args.budget_scale, left)
            if budget < 5:
                summary["stages"][name] = {"status": "skipped", "budget_s": 0.0,
                                           "reason": f"the total budget of {args.total_s:.0f} s was spent"}
                continue
            summary["stages"][name] = run_stage(name, budget, args, out)
            write_summary(out, summary)
    except KeyboardInterrupt:
        summary["interrupted"] = "SIGINT"
    finally:
        finish()
    print(f"[gpu_check] summary: {out / JSON_NAME} and {out / MD_NAME}", flush=True)
    return 0 if all(s["status"] == "ok" for s in summary["stages"].values()) else 1


# ---------------------------------------------------------------------------------------------- summary
def goals(stages: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's four GPU goals, each with its measured figure (None when not measured) and whether it was met."""
    speed = stages.get("speedrun", {}).get("result", {})
    reached = speed.get("target_reached_train_s")
    gpt2 = stages.get("bench_gpt2", {}).get("result", {})
    mfu = gpt2.get("mfu_compiled")
    decode = stages.get("decode_graphs", {}).get("result", {}) or stages.get("decode", {}).get("result", {})
    ratio = decode.get("ratio_b1_bfloat16", decode.get("ratio_b1_float32"))
    tests = stages.get("tests", {}).get("result", {})
    sync_failed = [name for name in SYNC_TESTS if name in tests.get("failing", [])]
    sync_ran = bool(tests.get("passed")) and tests.get("device_tests_ran")
    rows = [
        {"goal": f"Shakespeare-char val <= {TARGET_VAL} in <= {GOALS['speedrun_s']:.0f} s of training",
         "figure": speedrun_figure(speed), "best": speed.get("best_val_loss"),
         "met": None if not speed.get("evals") else (reached is not None and reached <= GOALS["speedrun_s"])},
        {"goal": f"GPT-2 small bfloat16 training MFU >= {GOALS['gpt2_mfu']:.0%} with compile",
         "figure": None if mfu is None else f"{mfu:.1%}", "met": None if mfu is None else mfu >= GOALS["gpt2_mfu"]},
        {"goal": f"batch-1 decoding of GPT-2 small >= {GOALS['decode_vs_hf']}x Hugging Face generate (CUDA graphs)",
         "figure": None if ratio is None else f"{ratio:.2f}x",
         "met": None if ratio is None else ratio >= GOALS["decode_vs_hf"]},
        {"goal": "no host synchronisation in a training step or 32 decoding steps (set_sync_debug_mode('error'))",
         "figure": None if not sync_ran else ("failed: " + ", ".join(sync_failed) if sync_failed else "none"),
         "met": None if not sync_ran else not sync_failed},
    ]
    return rows


def speedrun_figure(speed: dict[str, Any]) -> str | None:
    """The speed run's figure in words: when the target was reached, else the best val and when (None
    before any evaluation)."""
    if speed.get("target_reached_train_s") is not None:
        return f"{speed['target_reached_train_s']:.1f} s (val {speed['target_reached_val']:.4f}, step " \
               f"{speed['target_reached_step']})"
    evals = [e for e in speed.get("evals", []) if e.get("val_loss") is not None]
    if not evals:
        return None
    best = min(evals, key=lambda e: e["val_loss"])
    return f"not reached: best val {best['val_loss']:.4f} after {best['train_s']:.1f} s (step {best['step']})"


def _fmt(value: Any, spec: str = ",.0f") -> str:
    """A number formatted with ``spec``; "-" for None or a non-number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return format(value, spec)
    return "-"


def markdown(summary: dict[str, Any]) -> str:
    """The summary as Markdown: the machine, the goals, the stages, then each stage's figures."""
    stages = summary["stages"]
    env = stages.get("env", {}).get("result", {})
    dry = " (CPU dry run: tiny sizes, the figures mean nothing)" if summary.get("dry_run") else ""
    lines = [f"# glassformer GPU check{dry}", "",
             f"- started {summary['started']}, finished {summary.get('finished') or 'still running'}; "
             f"device {summary['device']}; total budget {summary['total_budget_s']:.0f} s",
             f"- machine: {env.get('gpu_name') or env.get('cpu') or 'unknown'}; torch {env.get('torch', '?')}, "
             f"CUDA {env.get('cuda_runtime', '-')}, driver {env.get('driver', '-')}, "
             f"transformers {env.get('transformers', '-')}, triton {env.get('triton', '-')}, C compiler "
             f"{env.get('c_compiler', '-')}, flash SDPA {env.get('flash_sdpa', '-')}"]
    if summary.get("interrupted"):
        lines.append(f"- interrupted by {summary['interrupted']}")
    lines += ["", "## Goals (issue 32)", "", "| goal | measured | met |", "| --- | --- | --- |"]
    for g in goals(stages):
        met = "not measured" if g["met"] is None else ("yes" if g["met"] else "no")
        lines.append(f"| {g['goal']} | {g['figure'] or 'not measured'} | {met} |")
    lines += ["", "## Stages", "", "| stage | status | seconds | budget s | note |", "| --- | --- | --- | --- | --- |"]
    for name, s in stages.items():
        note = s.get("error") or s.get("reason") or ""
        lines.append(f"| {name} | {s['status']} | {_fmt(s.get('seconds'), '.1f')} | {_fmt(s.get('budget_s'), '.0f')} "
                     f"| {str(note)[:160].replace('|', '/')} |")
    lines.append("")
    tests = stages.get("tests", {}).get("result", {})
    if tests:
        lines += ["## CUDA tests", "", f"passed {tests.get('passed')}, failed {tests.get('failed')}, skipped "
                  f"{tests.get('skipped')}, errors {tests.get('errors')}"
                  + (f"; failing: {', '.join(tests.get('failing', []))}" if tests.get("failing") else ""), ""]
    speed = stages.get("speedrun", {}).get("result", {})
    if speed:
        lines += ["## Shakespeare-char speed run (configs/shakespeare_char_gpu.yaml)", "",
                  f"compile + first step {_fmt(speed.get('compile_s'), '.1f')} s; step "
                  f"{_fmt(speed.get('step_ms'), '.1f')} ms ({_fmt(speed.get('tokens_per_s'))} tokens/s); "
                  f"{speed.get('max_steps')} steps planned; target {TARGET_VAL} reached after "
                  f"{_fmt(speed.get('target_reached_train_s'), '.1f')} s of training "
                  f"(step {speed.get('target_reached_step', '-')}); best val {_fmt(speed.get('best_val_loss'), '.4f')}",
                  "", "| step | val loss | training s (compile excluded) |", "| --- | --- | --- |"]
        lines += [f"| {e['step']} | {_fmt(e['val_loss'], '.4f')} | {_fmt(e['train_s'], '.1f')} |"
                  for e in speed.get("evals", [])]
        lines.append("")
    for name in ("bench_baby", "bench_gpt2"):
        r = stages.get(name, {}).get("result", {})
        if not r:
            continue
        size = r.get("size", {})
        lines += [f"## Training throughput: {name[6:]} ({size.get('n_layers')} layers, d {size.get('d_model')}, "
                  f"block {size.get('block')}, batch {size.get('batch')}, vocab {size.get('vocab_size')}), bfloat16",
                  "", f"matmul peak (measured): {_fmt((r.get('peak_flops') or 0) / 1e12, ',.1f')} TFLOP/s", "",
                  "| contender | tokens/s | MFU |", "| --- | --- | --- |"]
        for contender, tps in r.get("tokens_per_s", {}).items():
            lines.append(f"| {contender} | {_fmt(tps)} | {_fmt(r.get('mfu', {}).get(contender), '.1%')} |")
        if "compile_first_call_s" in r:
            lines.append(f"\ncompile: first call {_fmt(r['compile_first_call_s'], '.1f')} s, paired gain "
                         f"{_fmt(r.get('compile_gain'), '.2f')}x over eager")
        lines.append("")
    for stage_name, title in (("decode", "Greedy decoding, KV cache"),
                              ("decode_graphs", "Greedy decoding, fixed-shape steps as a CUDA graph")):
        dec = stages.get(stage_name, {}).get("result", {})
        if not dec:
            continue
        graphs = f"; graphs captured: {dec['graphs_captured']}" if "graphs_captured" in dec else ""
        lines += [f"## {title} ({dec.get('size_name')}{graphs})", "",
                  "| case | precision | glassformer tokens/s | hf tokens/s | vs hf |",
                  "| --- | --- | --- | --- | --- |"]
        for case, by_precision in dec.get("cases", {}).items():
            for precision, c in by_precision.items():
                tps = c.get("tokens_per_s", {})
                lines.append(f"| {case} | {precision} | {_fmt(tps.get('glassformer'))} | {_fmt(tps.get('hf'))} | "
                             f"{_fmt(c.get('ratio'), '.2f')}x |")
        lines.append("")
    comp = stages.get("decode_compiled", {}).get("result", {})
    if comp.get("tokens_per_s"):
        lines += [f"## Compiled decoding ({comp.get('case')}, {comp.get('precision')})", "",
                  f"first call {_fmt(comp.get('first_call_s'), '.1f')} s (compiling included); "
                  f"{_fmt(comp['tokens_per_s'].get('compiled'))} tokens/s compiled, "
                  f"{_fmt(comp['tokens_per_s'].get('eager'))} eager: {_fmt(comp.get('gain'), '.2f')}x", ""]
    lines += ["Logs of every stage: logs/NAME.log; raw figures: gpu_check.json.", ""]
    return "\n".join(lines)


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    """Write gpu_check.json and gpu_check.md into ``out`` (the goals included)."""
    full = {**summary, "goals": goals(summary["stages"])}
    write_atomic(out / JSON_NAME, json.dumps(full, indent=2, default=str) + "\n")
    write_atomic(out / MD_NAME, markdown(summary))


# ---------------------------------------------------------------------------------------------- stages
class Stage:
    """What a stage process knows: device, output folder, budget; :meth:`save` keeps partial results."""

    def __init__(self, name: str, device: str, out: Path, budget: float, compile_backend: str | None):
        self.name, self.device, self.out, self.budget = name, device, out, budget
        self.tiny = device == "cpu"
        self.compile_backend = compile_backend
        self.started = time.perf_counter()
        self.result: dict[str, Any] = {}

    def left(self) -> float:
        """Seconds left of this stage's budget."""
        return self.budget - (time.perf_counter() - self.started)

    def save(self, error: str | None = None) -> None:
        """Write what was measured so far to stages/NAME.json (atomically)."""
        data: dict[str, Any] = {"result": self.result}
        if error:
            data["error"] = error
        write_atomic(self.out / "stages" / f"{self.name}.json", json.dumps(data, indent=1, default=_jsonable) + "\n")


def _jsonable(value: Any) -> Any:
    """JSON for what json cannot write: dtypes, devices, paths... as strings."""
    return str(value)


def sync(device: str) -> None:
    """Wait for the GPU's queued work (nothing on a CPU)."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def stage_env(stage: Stage) -> None:
    """Versions, the GPU and its driver, and whether flash SDPA runs a bfloat16 causal attention."""
    import platform

    import torch

    r = stage.result
    r.update({"python": platform.python_version(), "torch": torch.__version__, "cuda_build": torch.version.cuda,
              "cuda_available": torch.cuda.is_available(), "cpu": platform.processor() or platform.machine(),
              "cores": os.cpu_count()})
    try:
        import transformers
        r["transformers"] = transformers.__version__
    except ImportError:
        r["transformers"] = None
    try:
        r["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                         timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        r["git_commit"] = None
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        r["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
        if smi.returncode == 0 and smi.stdout.strip():
            r["driver"] = smi.stdout.strip().splitlines()[0].split(",")[1].strip()
    except (OSError, subprocess.SubprocessError) as error:
        r["nvidia_smi"] = f"not available ({error.__class__.__name__})"
    import shutil

    r["c_compiler"] = next((shutil.which(c) for c in ("cc", "gcc", "clang") if shutil.which(c)), None)  # Triton's
    try:
        import triton
        r["triton"] = triton.__version__
    except ImportError:
        r["triton"] = None
    stage.save()
    if stage.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda but torch.cuda.is_available() is False")
        props = torch.cuda.get_device_properties(0)
        r.update({"gpu_name": props.name, "gpu_memory_gib": round(props.total_memory / 2 ** 30, 1),
                  "capability": f"{props.major}.{props.minor}", "sms": props.multi_processor_count,
                  "cuda_runtime": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                  "bf16_supported": torch.cuda.is_bf16_supported(),
                  "flash_sdp_enabled": torch.backends.cuda.flash_sdp_enabled(),
                  "mem_efficient_sdp_enabled": torch.backends.cuda.mem_efficient_sdp_enabled()})
        stage.save()
    r["flash_sdpa"] = flash_attention_runs(stage.device)
    stage.save()


def flash_attention_runs(device: str) -> str:
    """Whether the flash SDPA kernel takes a bfloat16 causal attention on ``device`` ("yes", or why not)."""
    import torch
    import torch.nn.functional as F

    if not device.startswith("cuda"):
        return "n/a on CPU"
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(2, 4, 128, 64, device=device, dtype=torch.bfloat16)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
        sync(device)
        return "yes"
    except RuntimeError as error:
        return f"no ({str(error).splitlines()[0][:120]})"


def stage_tests(stage: Stage) -> None:
    """pytest -m cuda on tests/test_gpu_path.py; counts and failing tests from its JUnit XML."""
    import xml.etree.ElementTree as ET

    xml = stage.out / "logs" / "tests-junit.xml"
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-rfEs", "-p", "no:cacheprovider",
               f"--junitxml={xml}", "tests/test_gpu_path.py"]
    stage.result["command"] = " ".join(command[1:])
    stage.save()
    done = subprocess.run(command, cwd=ROOT, timeout=max(stage.left() - 5, 5), stdin=subprocess.DEVNULL)
    stage.result["rc"] = done.returncode
    try:
        root = ET.parse(xml).getroot()
        suite = root if root.tag == "testsuite" else root.find("testsuite")
        assert suite is not None
        tests, failed, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        failing = [f"{case.get('name')}" for case in suite.iter("testcase")
                   if case.find("failure") is not None or case.find("error") is not None]
        stage.result.update({"passed": tests - failed - errors - skipped, "failed": failed, "errors": errors,
                             "skipped": skipped, "failing": failing,
                             "device_tests_ran": any(case.find("skipped") is None for case in suite.iter("testcase")
                                                     if case.get("name") in SYNC_TESTS)})
    except (OSError, ET.ParseError, AssertionError) as error:
        stage.result["junit"] = f"unreadable ({error})"
    stage.save()
    if done.returncode not in (0, 5):  # 5: nothing collected (no CUDA-marked test selected)
        raise RuntimeError(f"pytest exited with {done.returncode}")


def patch_compile(backend: str | None) -> None:
    """Make every ``torch.compile`` in this process use ``backend`` (the dry run's "aot_eager": tracing
    and graph breaks are exercised without a C++ compiler's minutes; "fail": a backend that raises, to
    test what a stage does when compiling fails; "hang": one that never returns, to test a stage that
    overruns its budget whatever the machine's speed and compile cache)."""
    if not backend:
        return
    import functools

    import torch

    def fail(graph: Any, example_inputs: Any) -> Any:
        raise RuntimeError("compiling failed on purpose (--compile-backend fail)")

    def hang(graph: Any, example_inputs: Any) -> Any:
        time.sleep(3600)

    chosen = {"fail": fail, "hang": hang}.get(backend, backend)
    torch.compile = functools.partial(torch.compile, backend=chosen)


def stage_speedrun(stage: Stage) -> None:
    """nanoGPT's Shakespeare-char baby GPT through the library's Trainer, as configs/shakespeare_char_gpu.yaml
    says. After compiling (the first step) and timing 20 steps, max_steps is set so that training fits
    the budget (at most the config's 5000); evaluations (the whole val split) are timed apart, so the
    reported training seconds exclude compile and evaluation. Checkpoints are written only at the end."""
    import torch

    from glassformer.training import TrainConfig, Trainer, prepare_run

    overrides: dict[str, Any] = {"data": [str(CORPUS)], "out_dir": str(stage.out / "speedrun"),
                                 "device": stage.device, "progress": False}
    train_budget = 52.0  # seconds of training: under the goal's 60 with room for the step-time estimate
    calibration = 20
    if stage.tiny:
        overrides.update({"model.n_layers": 2, "model.n_heads": 2, "model.d_model": 32, "model.d_ff": 64,
                          "model.max_len": 32, "block_size": 32, "batch_size": 8, "max_steps": 14,
                          "warmup_steps": 5, "eval_every": 5, "eval_batches": 2, "eval_batch_size": 16,
                          "log_every": 5, "fused_adamw": None})
        train_budget, calibration = 5.0, 2
    config = TrainConfig.from_yaml(SPEEDRUN_CONFIG, overrides)
    r = stage.result
    r.update({"config": str(SPEEDRUN_CONFIG.relative_to(ROOT)), "target_val": TARGET_VAL,
              "batch_size": config.batch_size, "block_size": config.block_size, "precision": config.precision,
              "compile": config.compile, "optimizer": config.optimizer, "evals": []})
    run = prepare_run(config)
    trainer = Trainer(config, run.model, run.tokenizer, run.batches)
    r["n_params"] = sum(p.numel() for p in trainer.model.parameters())
    r["fused_adamw"] = bool(getattr(trainer.optimizer, "defaults", {}).get("fused"))
    stage.save()
    start = time.perf_counter()
    try:
        trainer.train_step()
        sync(stage.device)
    except Exception as error:  # noqa: BLE001 - compiling failed (no C compiler, an inductor bug...): run eager
        if not config.compile:
            raise
        import traceback

        traceback.print_exc()
        r["compile_error"] = f"{error.__class__.__name__}: {str(error)[:300]}"
        r["compile"] = config.compile = False
        stage.save()
        run = prepare_run(config)
        trainer = Trainer(config, run.model, run.tokenizer, run.batches)
        start = time.perf_counter()
        trainer.train_step()
        sync(stage.device)
    r["compile_s"] = time.perf_counter() - start
    trainer.train_step()  # one more: allocator and autotuning settle
    sync(stage.device)
    start = time.perf_counter()
    for _ in range(calibration):
        trainer.train_step()
    sync(stage.device)
    step_s = (time.perf_counter() - start) / calibration
    done = calibration + 2
    # what is left of the stage after a slow compile, less room for evaluations and the final checkpoint
    train_budget = max(min(train_budget, stage.left() - (5 if stage.tiny else 25)), 1.0)
    planned = min(config.max_steps, done + int(max(train_budget - done * step_s, 0) / step_s))
    if stage.tiny:
        planned = config.max_steps  # the dry run's few steps, whatever the load on the machine
    trainer.config.max_steps = max(planned, done + 1)
    r.update({"step_ms": step_s * 1e3, "tokens_per_s": config.batch_size * config.block_size / step_s,
              "max_steps": trainer.config.max_steps})
    stage.save()
    # Training seconds so far, compile excluded: the calibration and the settling step at the measured pace.
    clock = {"train_s": step_s * (done - 1), "since": time.perf_counter()}
    evaluate_and_save, checked_save = trainer._evaluate_and_save, trainer._checked_save

    def timed_eval() -> None:
        clock["train_s"] += time.perf_counter() - clock["since"]  # the log line before synchronised
        evaluate_and_save()
        val = next((h["val_loss"] for h in reversed(trainer.history) if h.get("step") == trainer.step
                    and "val_loss" in h), None)
        r["evals"].append({"step": trainer.step, "val_loss": val, "train_s": clock["train_s"]})
        if val is not None and val <= TARGET_VAL and "target_reached_train_s" not in r:
            r.update({"target_reached_train_s": clock["train_s"], "target_reached_step": trainer.step,
                      "target_reached_val": val})
        r["best_val_loss"] = min(e["val_loss"] for e in r["evals"] if e["val_loss"] is not None) if any(
            e["val_loss"] is not None for e in r["evals"]) else None
        stage.save()
        clock["since"] = time.perf_counter()

    def save_at_end(val_loss: float | None = None, best: bool = False) -> None:
        if trainer.step >= trainer.config.max_steps:
            checked_save(val_loss, best)

    trainer._evaluate_and_save = timed_eval  # type: ignore[method-assign]
    trainer._checked_save = save_at_end  # type: ignore[method-assign]
    outcome = trainer.train()
    r.update({"steps": outcome["step"], "final_val_loss": outcome.get("val_loss"),
              "train_loss": outcome.get("train_loss"), "precision_ran": outcome.get("precision"),
              "train_s_total": clock["train_s"], "peak_memory_gib": (
                  torch.cuda.max_memory_allocated() / 2 ** 30 if stage.device.startswith("cuda") else None)})
    stage.save()


def bench_size(name: str, tiny: bool) -> Any:
    """The benchmark Size: nanoGPT's baby GPT at its training batch (64), or GPT-2 small (124M: 12 layers,
    768 wide, block 1024, batch 16, biases, vocabulary padded to 50304 as nanoGPT does); tiny ones in the dry run."""
    from glassformer.bench.setups import Size

    if tiny:
        return Size(f"{name}-tiny", n_layers=2, n_heads=2, d_model=32, block=32, batch=4)
    if name == "baby":
        return Size("baby-gpu", n_layers=6, n_heads=6, d_model=384, block=256, batch=64)
    return Size("gpt2-small", n_layers=12, n_heads=12, d_model=768, block=1024, batch=16, vocab_size=50304,
                bias=True)


def has_transformers() -> bool:
    """Whether the Hugging Face contender can run."""
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


def stage_bench(stage: Stage, size_name: str) -> None:
    """Training tokens/s and MFU in bfloat16 (glassformer and Hugging Face, eager), then glassformer
    compiled vs eager; MFU against the measured bfloat16 matmul peak."""
    from glassformer.bench.train import bench_train, bench_train_compile

    size = bench_size(size_name, stage.tiny)
    rounds, calls = (1, 1) if stage.tiny else (3, 3)
    contenders = ("glassformer", *(("hf",) if has_transformers() else ()))
    r = stage.result
    r["size"] = size.__dict__
    stage.save()
    matmul_n = 256 if stage.tiny else 8192
    try:
        row = bench_train(size, rounds=rounds, calls=calls, contenders=contenders, precisions=("bfloat16",),
                          matmul_n=matmul_n, device=stage.device)["bfloat16"]
    except Exception as error:  # noqa: BLE001 - without Hugging Face's model, glassformer's figures still count
        if "hf" not in contenders:
            raise
        r["hf_error"] = f"{error.__class__.__name__}: {str(error)[:300]}"
        stage.save()
        row = bench_train(size, rounds=rounds, calls=calls, contenders=("glassformer",), precisions=("bfloat16",),
                          matmul_n=matmul_n, device=stage.device)["bfloat16"]
    r.update({"peak_flops": row["peak_flops"], "flops_per_token": row["flops_per_token"],
              "tokens_per_s": dict(row["tokens_per_s"]), "mfu": dict(row["mfu"]), "peak_mb": row["peak_mb"],
              "ratio_vs_hf": row.get("ratio_vs_hf")})
    stage.save()
    compiled = bench_train_compile(size, rounds=rounds, calls=calls, device=stage.device, precision="bfloat16")
    tps = compiled["tokens_per_s"]["compiled"]
    r["tokens_per_s"]["glassformer-compiled"] = tps
    r["mfu"]["glassformer-compiled"] = tps * row["flops_per_token"]["glassformer"] / row["peak_flops"]
    r.update({"mfu_compiled": r["mfu"]["glassformer-compiled"], "compile_first_call_s": compiled["first_call_s"],
              "compile_gain": compiled["gain"], "compile_eager_tokens_per_s": compiled["tokens_per_s"]["eager"]})
    stage.save()


def stage_decode(stage: Stage, graphs: bool = False) -> None:
    """Batch-1 greedy decoding of GPT-2 small with the KV cache, glassformer vs Hugging Face generate, in
    bfloat16 and float32. With ``graphs`` the first case only, glassformer's one-token steps fixed-shape
    and replayed as a CUDA graph (``set_static_steps("graphs")``; on the CPU the same steps, no graph)."""
    from glassformer.bench.generate import bench_generate
    from glassformer.runtime.decode import StaticSteps, set_static_steps

    size = bench_size("gpt2", stage.tiny)
    cases = ((1, 1, 16),) if stage.tiny else ((1, 1, 256), (1, 200, 56))
    if graphs:
        cases = cases[:1]
        set_static_steps("graphs")
    hf = has_transformers()
    r = stage.result
    r.update({"size_name": size.name, "cases": {}})
    errors = []
    # one precision and case at a time, saved as it comes: a failure or the budget's end keeps what was measured
    for precision in ("bfloat16", "float32"):
        for case in cases:
            started = time.perf_counter()
            try:
                gen = bench_generate(size, cases=(case,), rounds=2 if stage.tiny else 3, calls=1, hf=hf, plain=False,
                                     device=stage.device, precisions=(precision,))
            except Exception as error:  # noqa: BLE001
                import traceback

                traceback.print_exc()
                errors.append(f"{precision} {case}: {error.__class__.__name__}: {str(error)[:200]}")
                r["errors"] = errors
                stage.save()
                continue
            r["size"] = gen["size"]
            for name, by_precision in gen["cases"].items():
                r["cases"].setdefault(name, {}).update(by_precision)
                figures = by_precision[precision]
                print(f"[decode] {name} {precision}: {figures.get('tokens_per_s')} tokens/s, "
                      f"ratio {figures.get('ratio')}, {time.perf_counter() - started:.1f} s", flush=True)
                if case == cases[0]:
                    r[f"ratio_b1_{precision}"] = by_precision[precision].get("ratio")
            if graphs:
                r["graphs_captured"] = StaticSteps.captured  # 0 on the CPU; one per generate call on a GPU
            stage.save()
    if errors:
        raise RuntimeError("; ".join(errors))


def stage_decode_compiled(stage: Stage) -> None:
    """The first decoding case again, glassformer eager vs ``generate(..., compile=True)`` (each step the
    model's forward compiled on a static cache: one compile per shape), bfloat16."""
    from glassformer.bench.generate import bench_decode_compile

    size = bench_size("gpt2", stage.tiny)
    batch, prompt, new = (1, 1, 16) if stage.tiny else (1, 1, 256)
    stage.result.update(bench_decode_compile(size, batch=batch, prompt=prompt, new=new, rounds=2,
                                             device=stage.device, precision="bfloat16"))


STAGE_FUNCTIONS: dict[str, Callable[[Stage], None]] = {
    "env": stage_env, "tests": stage_tests, "speedrun": stage_speedrun,
    "bench_baby": lambda s: stage_bench(s, "baby"), "bench_gpt2": lambda s: stage_bench(s, "gpt2"),
    "decode": stage_decode, "decode_graphs": lambda s: stage_decode(s, graphs=True),
    "decode_compiled": stage_decode_compiled}


def run_one(args: argparse.Namespace) -> int:
    """The child process of one stage: run it, save its result (and the error, if any)."""
    import traceback

    out = Path(args.out).resolve()
    stage = Stage(args.stage, args.device, out, args.budget, args.compile_backend)
    if hasattr(signal, "alarm"):
        signal.alarm(int(args.budget) + 15)  # a watchdog, should the orchestrator die without stopping this stage
    # a stage about to be stopped for its budget says where it was (in its log): the next run knows what to fix
    faulthandler.dump_traceback_later(max(args.budget - 3, 1), exit=False)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.stage != "tests":
        import torch

        patch_compile(args.compile_backend)
        if stage.tiny:
            torch.set_num_threads(min(2, torch.get_num_threads()))
        else:
            torch.backends.cuda.matmul.allow_tf32 = True  # float32 rows (decode) use TF32 as nanoGPT does
            torch.backends.cudnn.allow_tf32 = True
    try:
        STAGE_FUNCTIONS[args.stage](stage)
    except Exception as error:  # noqa: BLE001 - a stage's failure is a result, recorded with what it had measured
        traceback.print_exc()
        stage.save(error=f"{error.__class__.__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}")
        return 1
    stage.save()
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (the real run) or cpu (a dry run at tiny sizes)")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "gpu-check-output"),
                        help="output folder (default: $OUT, else ./gpu-check-output)")
    parser.add_argument("--stages", default="", help=f"comma-separated subset of {','.join(STAGES)}")
    parser.add_argument("--total-s", type=float, default=TOTAL_S, help="time budget of the whole run (s)")
    parser.add_argument("--compile-backend", default=None,
                        help="torch.compile backend for every stage (the dry run's test uses aot_eager)")
    parser.add_argument("--budget-scale", type=float, default=1.0,
                        help="multiply every stage's budget (the suite's dry run on a busy machine: a hang guard)")
    parser.add_argument("--stage", default=None, help=argparse.SUPPRESS)  # internal: run one stage
    parser.add_argument("--budget", type=float, default=60.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not (math.isfinite(args.budget_scale) and args.budget_scale > 0):
        parser.error(f"--budget-scale must be a finite number > 0, got {args.budget_scale}")
    if args.device not in ("cpu", "cuda") and not args.device.startswith("cuda:"):
        parser.error(f"--device must be cuda or cpu, got {args.device!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Orchestrate the stages, or (internally) run one."""
    args = parse(argv)
    if args.stage:
        return run_one(args)
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())

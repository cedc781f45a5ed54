"""Time to quality on the CPU: glassformer's Shakespeare recipe against a real nanoGPT checkout's train.py.

nanoGPT's README trains a character model on tinyshakespeare on a CPU (4 layers, 128 wide, block 64,
batch 12, 2000 steps) to val loss 1.8857. This script runs *your checkout's own* train.py with exactly
that command (config/train_shakespeare_char.py and the README's CPU arguments) in a scratch folder
(the checkout is not written to; its prepare.py makes the data from the shipped tinyshakespeare), and
``glassformer recipe shakespeare_char_fast``, in alternation, on the same cores with the same thread
count, and prints both losses and wall times and their ratio (the goal: glassformer reaches 1.8857 in
at most 0.2x nanoGPT's wall time). Wall time is the whole process, start to exit, for both: imports,
data, every step, their evaluations and checkpoints (and the recipe's precision probe and samples).
nanoGPT's loss is its own estimate (20 random batches), glassformer's is over the whole val split.

    python benchmarks/bench_nanogpt_quality.py --nanogpt ~/nanoGPT                  # 1 pair of runs
    python benchmarks/bench_nanogpt_quality.py --nanogpt ~/nanoGPT --repeats 2 --out runs/quality.json
    python benchmarks/bench_nanogpt_quality.py --nanogpt ~/nanoGPT --smoke          # seconds: wiring only
    python benchmarks/bench_nanogpt_quality.py --nanogpt_result runs/quality.json -- --max_steps 250

``--nanogpt_result FILE`` reuses the nanoGPT runs of an earlier output of this script and runs the recipe
alone (for trying recipe variants; the ratio is then against those runs, not paired: quote only paired
figures).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from glassformer.bench.nanogpt import (  # noqa: E402 (after the path is set)
    NANOGPT_TARGET,
    nanogpt_checkout,
    nanogpt_command,
    nanogpt_evals,
    prepare_nanogpt_workdir,
)
from glassformer.bench.timing import cpu_line  # noqa: E402
from glassformer.runtime.threads import usable_cpus  # noqa: E402

TEXT = ROOT / "data" / "tinyshakespeare" / "input.txt"


def timed_run(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, list[tuple[float, str]]]:
    """Run ``command``; return its wall seconds and its output lines, each with when it came (seconds)."""
    start = time.perf_counter()
    lines = []
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as process:
        for line in process.stdout:
            lines.append((time.perf_counter() - start, line.rstrip("\n")))
        code = process.wait()
    wall = time.perf_counter() - start
    if code != 0:
        tail = "\n".join(line for _, line in lines[-15:])
        raise SystemExit(f"{command[1]} failed with status {code}:\n{tail}")
    return wall, lines


def run_nanogpt(checkout: Path, workdir: Path, env: dict[str, str], extra: tuple[str, ...]) -> dict:
    """One nanoGPT training run: wall seconds, its evaluations, the final val loss."""
    wall, lines = timed_run(nanogpt_command(checkout, extra=(f"--out_dir={workdir / 'out'}", *extra)), workdir, env)
    evals = nanogpt_evals(lines)
    if not evals:
        raise SystemExit("nanoGPT printed no 'step N: train loss X, val loss Y' line")
    return {"wall_s": wall, "val_loss": evals[-1]["val_loss"], "steps": evals[-1]["step"], "evals": evals,
            "final_eval_at_s": evals[-1]["at_s"]}


def run_glassformer(recipe: str, out: Path, env: dict[str, str], overrides: list[str]) -> dict:
    """One ``glassformer recipe`` run: wall seconds (whole process), the training loop's, the val loss."""
    command = [sys.executable, "-m", "glassformer", "recipe", recipe, "--out_dir", str(out), *overrides]
    wall, _ = timed_run(command, ROOT, env)
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    training = results["training"]
    return {"wall_s": wall, "val_loss": training["val_loss"], "steps": training["step"],
            "loop_wall_s": training["wall_s"], "precision": training["precision"],
            "tokens_per_s": training["tokens_per_s"]}


def reused_nanogpt_runs(path: Path) -> dict:
    """The nanoGPT runs of an earlier output of this script: {"runs", "checkout", "when"}; exits naming ``path``
    when it holds none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        runs, machine = data["runs"]["nanogpt"], data["machine"]
        if not runs or not all(isinstance(r["wall_s"], (int, float)) for r in runs) or machine.get("smoke"):
            raise ValueError("no full nanoGPT run")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SystemExit(f"--nanogpt_result {path}: not an output of this script with nanoGPT runs ({error})") from None
    return {"runs": runs, "checkout": machine["nanogpt"], "when": f"{machine['date']}, {machine['cpu']}"}


def main() -> None:
    """Parse the options, run nanoGPT and glassformer in alternation, print the table, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nanogpt", type=Path, default=os.environ.get("NANOGPT_DIR"),
                        help="a checkout of karpathy/nanoGPT (default: $NANOGPT_DIR)")
    parser.add_argument("--recipe", default="shakespeare_char_fast", help="glassformer recipe name or YAML file")
    parser.add_argument("--repeats", type=int, default=1, help="pairs of runs (order flipped every other pair)")
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for both (default: torch's)")
    parser.add_argument("--smoke", action="store_true", help="20 nanoGPT steps and 10 recipe steps: wiring only")
    parser.add_argument("--nanogpt_result", type=Path, default=None,
                        help="reuse the nanoGPT runs of this earlier output JSON (not paired)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-output" / "nanogpt_quality.json")
    parser.add_argument("overrides", nargs="*", help="extra recipe overrides, after --: -- --max_steps 250")
    args = parser.parse_args()
    reused = reused_nanogpt_runs(args.nanogpt_result) if args.nanogpt_result else None
    if args.nanogpt is None and reused is None:
        parser.error("--nanogpt PATH (a checkout of karpathy/nanoGPT) or --nanogpt_result FILE is needed")
    checkout = nanogpt_checkout(args.nanogpt) if reused is None else Path(reused["checkout"])
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "KMP_BLOCKTIME", "OMP_NUM_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["GLASSFORMER_THREADS"] = "fixed"  # the same threads as nanoGPT: torch's defaults
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    nano_extra: tuple[str, ...] = ("--max_iters=20", "--lr_decay_iters=20", "--eval_interval=10") if args.smoke else ()
    overrides = ["--max_steps", "10", *args.overrides] if args.smoke else list(args.overrides)
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {"nanogpt": [], "glassformer": []}
    with tempfile.TemporaryDirectory(prefix="nanogpt-quality-") as scratch:
        workdir = prepare_nanogpt_workdir(checkout, Path(scratch) / "nanogpt", TEXT) if reused is None else None
        for r in range(args.repeats):
            for name in ("nanogpt", "glassformer") if r % 2 == 0 else ("glassformer", "nanogpt"):
                if name == "nanogpt" and reused is not None:
                    continue
                if name == "nanogpt":
                    result = run_nanogpt(checkout, workdir, env, nano_extra)
                else:
                    result = run_glassformer(args.recipe, Path(scratch) / f"glassformer-{r}", env, overrides)
                runs[name].append(result)
                print(f"bench_nanogpt_quality: {name} val {result['val_loss']:.4f} in {result['wall_s']:.1f} s",
                      file=sys.stderr, flush=True)
    if reused is not None:
        runs["nanogpt"] = reused["runs"]
        nano_wall = statistics.median(r["wall_s"] for r in reused["runs"])
        pairs = [g["wall_s"] / nano_wall for g in runs["glassformer"]]
    else:
        pairs = [g["wall_s"] / n["wall_s"] for g, n in zip(runs["glassformer"], runs["nanogpt"])]
    summary = {name: {"wall_s": statistics.median(r["wall_s"] for r in rs),
                      "val_loss": statistics.median(r["val_loss"] for r in rs)} for name, rs in runs.items()}
    summary["time_ratio"] = statistics.median(pairs)
    summary["reached_target"] = summary["glassformer"]["val_loss"] <= NANOGPT_TARGET
    summary["paired"] = reused is None
    machine = {"cpu": cpu_line(), "cpus": usable_cpus(), "threads": args.threads or "torch default",
               "load_before": load_before, "load_after": os.getloadavg()[0],
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "nanogpt": str(checkout),
               "recipe": args.recipe, "overrides": overrides, "smoke": args.smoke,
               "nanogpt_result": str(args.nanogpt_result) if reused is not None else None}
    print(f"machine: {machine['cpu']}, {machine['cpus']} CPUs, threads {machine['threads']}; load "
          f"{load_before:.1f} before, {machine['load_after']:.1f} after; {args.repeats} pair(s) of runs, medians\n")
    if reused is not None:
        print(f"nanoGPT: the {len(reused['runs'])} run(s) of {args.nanogpt_result} ({reused['when']}), NOT paired\n")
    print("| run | steps | val loss | wall time | vs nanoGPT |")
    print("| --- | --- | --- | --- | --- |")
    nano, glass = runs["nanogpt"][-1], runs["glassformer"][-1]
    print(f"| nanoGPT train.py, README CPU settings ({checkout}) | {nano['steps']} | "
          f"{summary['nanogpt']['val_loss']:.4f} (20-batch estimate) | {summary['nanogpt']['wall_s']:.1f} s | 1.00x |")
    print(f"| glassformer recipe {args.recipe} ({glass['precision']}) | {glass['steps']} | "
          f"{summary['glassformer']['val_loss']:.4f} (whole val split) | {summary['glassformer']['wall_s']:.1f} s | "
          f"**{summary['time_ratio']:.2f}x** |")
    print(f"\ntarget {NANOGPT_TARGET} {'reached' if summary['reached_target'] else 'NOT reached'}; time ratio "
          f"(glassformer / nanoGPT wall, median of {'pairs' if reused is None else 'runs, not paired'}) "
          f"{summary['time_ratio']:.2f}x (goal <= 0.20x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "summary": summary, "runs": runs}, indent=2) + "\n",
                        encoding="utf-8")
    print(f"results written to {args.out}")


if __name__ == "__main__":
    main()

"""Per-step speed of the whole trainer: ``glassformer train`` against a real nanoGPT checkout's train.py.

Issue 32, point 3: the trainer should cost no more than the model, i.e. ``glassformer train`` at least
1.0x nanoGPT's ``train.py`` in float32 on the same configuration. Both programs run as whole processes,
in alternation (order flipped every other pair), on the same threads:

- nanoGPT: ``train.py config/train_shakespeare_char.py`` with its README's CPU arguments (4 layers, 4
  heads, width 128, block 64, batch 12, dropout 0, no bias), ``--dtype=float32``, ``--max_iters=N``,
  ``--log_interval=1`` and an evaluation interval beyond the run (it evaluates at iteration 0 only,
  20 batches a split); run in a scratch folder whose data its own ``prepare.py`` makes from the
  shipped tinyshakespeare (nothing is fetched, nothing is written into the checkout).
- glassformer: ``glassformer train --config configs/shakespeare_char.yaml`` (nanoGPT's configuration)
  with ``max_steps N``, ``log_every 1`` (a record and a line every step, as nanoGPT prints one) and one
  evaluation of 20 batches of 12 at the end.

A step's time is what each program reports per step: nanoGPT's ``iter N: ..., time X ms`` lines and
glassformer's ``tokens_per_s`` in ``metrics.jsonl`` (batch x block tokens over the time since the
previous record). Both cover the whole loop between two log points (data, forward, backward, clipping,
AdamW, logging). The first ``--warmup`` steps of each run (nanoGPT's first includes its evaluation)
are left out, then the median over the same number of steps. Each pair's ratio is nanoGPT's median
over glassformer's (above 1: glassformer is faster); the table shows the median of the pairs.

    python benchmarks/bench_train_vs_nanogpt.py --nanogpt ~/nanoGPT                 # 3 pairs, 200 steps
    python benchmarks/bench_train_vs_nanogpt.py --nanogpt ~/nanoGPT --pairs 5 --steps 300 --threads 2
    python benchmarks/bench_train_vs_nanogpt.py --nanogpt ~/nanoGPT --threads 0    # each program's own threads
    python benchmarks/bench_train_vs_nanogpt.py --nanogpt ~/nanoGPT --passive --threads 2 --pairs 10
    python benchmarks/bench_train_vs_nanogpt.py --nanogpt ~/nanoGPT --smoke         # seconds: wiring only

``--threads 0`` runs both as a user would: nanoGPT with torch's thread count, glassformer with its
thread policy (runtime/threads.py) and the config's ``num_threads``. ``--passive`` runs ``glassformer
train`` against itself with ``OMP_WAIT_POLICY=PASSIVE`` in nanoGPT's place (what glassformer's thread
policy sets in a busy moment), at ``--threads``: the cost of threads that sleep between the step's
parallel regions (the ratio is then passive time over default time).

``--loop`` measures instead what the loop adds, in one process (``--threads`` torch threads): the
Trainer's ``train_step``, a bare step on the same model, optimizer and batches (``batch_loss``,
backward, clipping, AdamW, ``zero_grad``) and a step of nanoGPT's own model with its own
``configure_optimizers`` and random windows as its ``get_batch`` draws them; ``--pairs`` alternated
rounds of 20 steps each, CPU time of the process (the other programs' share of the cores does not
count), and the median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_nanogpt_quality import timed_run  # noqa: E402 (after the path is set)

from glassformer.bench.nanogpt import nanogpt_checkout, nanogpt_command, prepare_nanogpt_workdir  # noqa: E402
from glassformer.bench.timing import cpu_line  # noqa: E402
from glassformer.runtime.threads import usable_cpus  # noqa: E402

TEXT = ROOT / "data" / "tinyshakespeare" / "input.txt"
CONFIG = ROOT / "configs" / "shakespeare_char.yaml"
BATCH, BLOCK = 12, 64  # nanoGPT's README CPU settings, also those of configs/shakespeare_char.yaml
EVAL_BATCHES = 20  # nanoGPT's --eval_iters of the README CPU command
_ITER_LINE = re.compile(r"^iter (\d+): loss [-0-9.naif]+, time ([0-9.]+)ms")


def nanogpt_step_ms(lines: list[tuple[float, str]]) -> list[float]:
    """nanoGPT's per-iteration times (ms), in iteration order, from its ``iter N: ..., time X ms`` lines."""
    found = [_ITER_LINE.match(line.strip()) for _, line in lines]
    return [float(m[2]) for m in sorted((m for m in found if m), key=lambda m: int(m[1]))]


def glassformer_step_ms(metrics: Path) -> list[float]:
    """glassformer's per-step times (ms), in step order, from ``metrics.jsonl`` records logged every step."""
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    steps = sorted((r["step"], r["tokens_per_s"]) for r in records if r.get("tokens_per_s"))
    return [1000.0 * BATCH * BLOCK / rate for _, rate in steps]


def run_nanogpt(checkout: Path, workdir: Path, env: dict[str, str], steps: int) -> dict:
    """One nanoGPT run of ``steps`` iterations after iteration 0: wall seconds and per-step times."""
    extra = (f"--out_dir={workdir / 'out'}", "--dtype=float32", f"--max_iters={steps}", f"--lr_decay_iters={steps}",
             "--log_interval=1", f"--eval_iters={EVAL_BATCHES}", f"--eval_interval={10 * steps + 1000}")
    wall, lines = timed_run(nanogpt_command(checkout, extra=extra), workdir, env)
    return {"wall_s": wall, "step_ms": nanogpt_step_ms(lines)}


def run_glassformer(out: Path, env: dict[str, str], steps: int, threads: int) -> dict:
    """One ``glassformer train`` run of ``steps`` steps: wall seconds and per-step times."""
    overrides = {"max_steps": steps, "lr_decay_steps": steps, "log_every": 1, "eval_every": 0,
                 "eval_batches": EVAL_BATCHES, "eval_batch_size": BATCH, "out_dir": out,
                 "cache_dir": out.parent / "glassformer-cache"}
    if threads:
        overrides["num_threads"] = threads
    command = [sys.executable, "-m", "glassformer", "train", "--config", str(CONFIG)]
    for key, value in overrides.items():
        command += [f"--{key}", str(value)]
    wall, _ = timed_run(command, ROOT, env)
    return {"wall_s": wall, "step_ms": glassformer_step_ms(out / "metrics.jsonl")}


def steady(step_ms: list[float], warmup: int, count: int) -> float:
    """The median of ``count`` step times after the first ``warmup``."""
    kept = step_ms[warmup:warmup + count]
    if not kept:
        raise SystemExit(f"only {len(step_ms)} step times were reported; need more than --warmup {warmup}")
    return statistics.median(kept)


def loop_cost(checkout: Path, rounds: int, threads: int, steps: int = 20) -> dict:
    """CPU ms per step of the Trainer's step, a bare step and nanoGPT's model step, alternated in ``rounds``."""
    import torch

    from glassformer.bench.nanogpt import load_nanogpt
    from glassformer.training import TrainConfig, Trainer, prepare_run
    from glassformer.training.objectives import batch_loss

    torch.set_num_threads(threads)
    scratch = tempfile.mkdtemp(prefix="train-loop-")  # the run's token cache, kept while the steps read it
    config = TrainConfig.from_yaml(CONFIG, {"max_steps": 10**6, "num_threads": threads, "out_dir": scratch,
                                            "progress": False})
    run = prepare_run(config)
    trainer = Trainer(config, run.model, run.tokenizer, run.batches)
    module = load_nanogpt(checkout)
    torch.manual_seed(0)
    nano = module.GPT(module.GPTConfig(block_size=BLOCK, vocab_size=run.tokenizer.vocab_size, n_layer=4, n_head=4,
                                       n_embd=128, dropout=0.0, bias=False))
    nano_optimizer = nano.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    train_ids = torch.from_numpy(run.batches.train.astype("int64"))

    def bare() -> None:
        batch = run.batches.global_batch(trainer.run_state.step, BATCH)
        parts = batch_loss(trainer.model, batch, 0.0, count_correct=False, check_ids=False)
        (parts.loss_sum / batch["labels"].numel()).backward()
        torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), 1.0)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.run_state.step += 1

    def nanogpt() -> None:
        starts = torch.randint(len(train_ids) - BLOCK, (BATCH,))
        x = torch.stack([train_ids[i:i + BLOCK] for i in starts])
        y = torch.stack([train_ids[i + 1:i + 1 + BLOCK] for i in starts])
        nano(x, y)[1].backward()
        torch.nn.utils.clip_grad_norm_(nano.parameters(), 1.0)
        nano_optimizer.step()
        nano_optimizer.zero_grad(set_to_none=True)

    kinds = {"trainer": lambda: float(trainer.train_step()), "bare": bare, "nanogpt": nanogpt}
    for step in kinds.values():  # warm-up
        for _ in range(5):
            step()
    cpu_ms: dict[str, list[float]] = {name: [] for name in kinds}
    for r in range(rounds):
        for name in kinds if r % 2 == 0 else reversed(kinds):
            start = time.process_time()
            for _ in range(steps):
                kinds[name]()
            cpu_ms[name].append(1000 * (time.process_time() - start) / steps)
    shutil.rmtree(scratch, ignore_errors=True)
    return {"cpu_ms": cpu_ms, **{f"trainer_vs_{other}": statistics.median(
        t / o for t, o in zip(cpu_ms["trainer"], cpu_ms[other])) for other in ("bare", "nanogpt")}}


def print_loop_cost(result: dict, machine: str) -> None:
    """The table of :func:`loop_cost`'s result."""
    print(f"{machine}\n")
    print("| step | CPU ms/step (median of rounds) | trainer's time / this one's (median of rounds) |")
    print("| --- | --- | --- |")
    names = {"trainer": "glassformer Trainer.train_step", "bare": "bare step, same model and optimizer",
             "nanogpt": "nanoGPT's model and configure_optimizers"}
    for name, label in names.items():
        ratio = "1.00" if name == "trainer" else f"{result[f'trainer_vs_{name}']:.3f}"
        print(f"| {label} | {statistics.median(result['cpu_ms'][name]):.2f} | {ratio} |")


def main() -> None:
    """Parse the options, run the pairs, print the table, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nanogpt", type=Path, default=os.environ.get("NANOGPT_DIR"),
                        help="a checkout of karpathy/nanoGPT (default: $NANOGPT_DIR)")
    parser.add_argument("--pairs", type=int, default=3, help="pairs of runs (order flipped every other pair)")
    parser.add_argument("--steps", type=int, default=200, help="training steps a run")
    parser.add_argument("--warmup", type=int, default=10, help="first steps of each run left out")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for both (OMP_NUM_THREADS); 0: each program's own choice")
    parser.add_argument("--smoke", action="store_true", help="1 pair of 15 steps, 5 left out: wiring only")
    parser.add_argument("--loop", action="store_true", help="in one process: what the loop adds (see above)")
    parser.add_argument("--passive", action="store_true",
                        help="glassformer with OMP_WAIT_POLICY=PASSIVE in nanoGPT's place (see above)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-output" / "train_vs_nanogpt.json")
    args = parser.parse_args()
    if args.nanogpt is None:
        parser.error("--nanogpt PATH (a checkout of karpathy/nanoGPT) is needed")
    if args.smoke:
        args.pairs, args.steps, args.warmup = 1, 15, 5
    least = int(args.loop or args.passive)  # threads: 0 (each program's own) only for the two programs
    if min(args.pairs, args.steps) < 1 or args.threads < least or not 0 <= args.warmup < args.steps:
        parser.error("--pairs and --steps must be at least 1, --threads at least 0 (1 with --loop or --passive), "
                     "and --warmup below --steps")
    checkout = nanogpt_checkout(args.nanogpt)
    if args.loop:
        result = loop_cost(checkout, args.pairs, args.threads, steps=3 if args.smoke else 20)
        result["machine"] = {"cpu": cpu_line(), "cpus": usable_cpus(), "threads": args.threads,
                             "load": os.getloadavg()[0], "rounds": args.pairs}
        print_loop_cost(result, f"machine: {cpu_line()}, {args.threads} thread(s), load {os.getloadavg()[0]:.1f}; "
                                f"{args.pairs} alternated round(s), CPU time")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"\nresults written to {args.out}")
        return
    unset = ("OMP_WAIT_POLICY", "KMP_BLOCKTIME", "OMP_NUM_THREADS", "GLASSFORMER_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    if args.threads:
        env["GLASSFORMER_THREADS"] = "fixed"  # the threads asked, no load following: the same as nanoGPT
        env["OMP_NUM_THREADS"] = str(args.threads)
    count = args.steps - args.warmup  # nanoGPT reports steps 0..N (N+1), glassformer 1..N: the same count kept
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {"nanogpt": [], "glassformer": []}
    with tempfile.TemporaryDirectory(prefix="train-vs-nanogpt-") as scratch:
        workdir = prepare_nanogpt_workdir(checkout, Path(scratch) / "nanogpt", TEXT)
        for pair in range(args.pairs):
            for name in ("nanogpt", "glassformer") if pair % 2 == 0 else ("glassformer", "nanogpt"):
                if name == "nanogpt" and args.passive:
                    result = run_glassformer(Path(scratch) / f"passive-{pair}", {**env, "OMP_WAIT_POLICY": "PASSIVE"},
                                             args.steps, args.threads)
                elif name == "nanogpt":
                    result = run_nanogpt(checkout, workdir, env, args.steps)
                else:
                    result = run_glassformer(Path(scratch) / f"glassformer-{pair}", env, args.steps, args.threads)
                result["median_ms"] = steady(result["step_ms"], args.warmup, count)
                result["load_after"] = os.getloadavg()[0]  # the 1-minute load average as the run ended
                runs[name].append(result)
                print(f"bench_train_vs_nanogpt: pair {pair + 1} {name} {result['median_ms']:.2f} ms/step "
                      f"({result['wall_s']:.1f} s whole process)", file=sys.stderr, flush=True)
    ratios = [n["median_ms"] / g["median_ms"] for n, g in zip(runs["nanogpt"], runs["glassformer"])]
    summary = {name: {"median_ms": statistics.median(r["median_ms"] for r in rs),
                      "wall_s": statistics.median(r["wall_s"] for r in rs)} for name, rs in runs.items()}
    summary["speed_ratio"] = statistics.median(ratios)
    summary["pair_ratios"] = ratios
    machine = {"cpu": cpu_line(), "cpus": usable_cpus(), "threads": args.threads, "load_before": load_before,
               "load_after": os.getloadavg()[0], "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "nanogpt": str(checkout), "passive": args.passive, "steps": args.steps, "warmup": args.warmup,
               "pairs": args.pairs}
    shown_threads = f"{args.threads} thread(s) each" if args.threads else "each program's own threads"
    print(f"machine: {machine['cpu']}, {machine['cpus']} CPUs, {shown_threads}; load "
          f"{load_before:.1f} before, {machine['load_after']:.1f} after; {args.pairs} pair(s) of {args.steps} steps, "
          f"first {args.warmup} left out\n")
    print("| run | ms/step (median of runs) | whole process | speed vs the first row (pairs) |")
    print("| --- | --- | --- | --- |")
    rival = "glassformer train, OMP_WAIT_POLICY=PASSIVE" if args.passive else \
        "nanoGPT train.py, float32, README CPU settings"
    print(f"| {rival} | {summary['nanogpt']['median_ms']:.2f} | "
          f"{summary['nanogpt']['wall_s']:.1f} s | 1.00x |")
    shown = ", ".join(f"{r:.2f}" for r in ratios)
    print(f"| glassformer train, configs/shakespeare_char.yaml, float32 | {summary['glassformer']['median_ms']:.2f} | "
          f"{summary['glassformer']['wall_s']:.1f} s | **{summary['speed_ratio']:.2f}x** ({shown}) |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "summary": summary, "runs": runs}, indent=2) + "\n",
                        encoding="utf-8")
    print(f"\nresults written to {args.out}")


if __name__ == "__main__":
    main()

"""How torch's OpenMP threads should wait: spinning (OpenMP's default), sleeping (``OMP_WAIT_POLICY=PASSIVE``)
or spinning a little (``GOMP_SPINCOUNT=N``), beside other programs' load.

glassformer's thread plan (``glassformer.runtime.threads``) sets ``PASSIVE`` when a command starts on a busy
machine; OpenMP reads the policy once, so it holds for the whole run. This measures that choice in two ways:

* ``--loads`` (steady): ``glassformer train --config configs/shakespeare_char.yaml`` with ``--threads`` fixed
  (2: what that config asks for), once per wait policy in ``--policies``, beside each background load: ``none``,
  ``half`` (one process busy half of every 10 ms), ``one`` / ``two`` (one or two processes busy all the time).
  Each run's median step time (ms) after the first ``--warmup`` steps; policies alternate, ``--rounds`` times.
* ``--fluctuate ON,OFF`` (a load that comes and goes): one process busy ON seconds, idle OFF seconds, while the
  same training runs with glassformer's own thread plan (the count follows the load), once starting
  passive (what the plan chose on a busy machine before) and once spinning (what it chooses now for a
  count that follows the load); the whole process's wall time, ``--rounds`` alternated pairs.
* ``--busy-start S``: the same pairs, each run started beside a busy process that stops after S seconds.

    python benchmarks/bench_wait_policy.py                                 # steady loads, 2 rounds
    python benchmarks/bench_wait_policy.py --loads none,one --policies spin,passive,spin:1000 --rounds 3
    python benchmarks/bench_wait_policy.py --loads '' --fluctuate 10,10 --rounds 4 --steps 600
    python benchmarks/bench_wait_policy.py --loads '' --busy-start 8 --rounds 4 --steps 600

Prints a table per part and writes JSON (``--out``). Linux with GNU libgomp (torch's wheels): the
``spin:N`` policies set ``GOMP_SPINCOUNT``, which other OpenMP runtimes ignore. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_nanogpt_quality import timed_run  # noqa: E402 (after the path is set)
from bench_train_vs_nanogpt import CONFIG, glassformer_step_ms, steady  # noqa: E402

from glassformer.bench.timing import cpu_line  # noqa: E402
from glassformer.runtime.threads import SWITCH, THREAD_VARS, WAIT_VARS  # noqa: E402

LOADS = {"none": (), "half": (0.5,), "one": (1.0,), "two": (1.0, 1.0)}  # busy share of each background process
POLICY_VARS = (*WAIT_VARS, *THREAD_VARS, SWITCH)  # every variable by which a run's threads are fixed
PERIOD_S = 0.010  # a "half" process is busy for half of each period


def policy_env(policy: str) -> dict[str, str]:
    """The variables of one wait policy: "spin" (none), "passive", or "spin:N" (GOMP_SPINCOUNT=N)."""
    if policy == "spin":
        return {}
    if policy == "passive":
        return {"OMP_WAIT_POLICY": "PASSIVE"}
    if policy.startswith("spin:") and policy[5:].isdigit():
        return {"GOMP_SPINCOUNT": policy[5:]}
    raise argparse.ArgumentTypeError(f"a policy is spin, passive or spin:N (N a whole number), got {policy!r}")


def busy(share: float, stop: multiprocessing.synchronize.Event, on_s: float = 0.0, off_s: float = 0.0) -> None:
    """A competing program: busy ``share`` of every 10 ms; with ``on_s``/``off_s``, busy for ``on_s`` seconds then
    idle for ``off_s``, over and over, until ``stop`` is set."""
    start = time.monotonic()
    while not stop.is_set():
        if on_s and (time.monotonic() - start) % (on_s + off_s) >= on_s:
            time.sleep(0.02)
            continue
        t = time.perf_counter()
        while time.perf_counter() - t < share * PERIOD_S:
            pass
        if share < 1:
            time.sleep((1 - share) * PERIOD_S)


class Background:
    """The background load of a ``with`` block: one process per entry of ``shares``."""

    def __init__(self, shares: tuple[float, ...], on_s: float = 0.0, off_s: float = 0.0) -> None:
        self.stop = multiprocessing.Event()
        self.processes = [multiprocessing.Process(target=busy, args=(s, self.stop, on_s, off_s), daemon=True)
                          for s in shares]

    def __enter__(self) -> Background:
        for p in self.processes:
            p.start()
        if self.processes:
            time.sleep(1.0)  # let them take their cores
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for p in self.processes:
            p.join(5)


def train(out: Path, env: dict[str, str], steps: int, threads: int) -> dict:
    """One ``glassformer train`` run of the configuration (``threads`` 0: glassformer's own thread plan), through
    this script's ``--cli`` so that a passive start can be forced while glassformer keeps choosing the count."""
    overrides = {"max_steps": steps, "lr_decay_steps": steps, "log_every": 1, "eval_every": 0, "eval_batches": 2,
                 "out_dir": out, "cache_dir": out.parent / "glassformer-cache", "num_threads": threads}
    command = [sys.executable, __file__, "--cli", "train", "--config", str(CONFIG)]
    for key, value in overrides.items():
        command += [f"--{key}", str(value)]
    wall, _ = timed_run(command, ROOT, env)
    return {"wall_s": wall, "step_ms": glassformer_step_ms(out / "metrics.jsonl")}


def cli(argv: list[str]) -> int:
    """``glassformer`` with argv, started passive (``BENCH_WAIT=passive``, as the thread plan starts on a busy
    machine) or spinning (``BENCH_WAIT=spin``: the plan's passive start turned off), whatever the load at start;
    the plan still chooses the thread count and follows the load."""
    from glassformer.runtime import threads

    if os.environ.get("BENCH_WAIT") == "passive":  # marked as glassformer's own, so not taken for the user's
        os.environ["OMP_WAIT_POLICY"] = threads._ours["OMP_WAIT_POLICY"] = "PASSIVE"
    elif os.environ.get("BENCH_WAIT") == "spin":
        threads.set_wait_policy = lambda *args, **kwargs: False
    from glassformer.cli import main

    return main(argv)


def clean_env() -> dict[str, str]:
    """This environment without any thread or wait setting, with the source tree on the path."""
    env = {k: v for k, v in os.environ.items() if k not in POLICY_VARS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    return env


def steady_loads(loads: list[str], policies: list[str], rounds: int, steps: int, warmup: int, threads: int,
                 scratch: Path) -> dict:
    """Median step ms per (load, policy, round) and each policy's ratio to "spin" (or the first policy)."""
    results: dict = {}
    for load in loads:
        with Background(LOADS[load]):
            for r in range(rounds):
                for policy in policies if r % 2 == 0 else policies[::-1]:
                    env = {**clean_env(), "OMP_NUM_THREADS": str(threads), **policy_env(policy)}
                    run = train(scratch / f"{load}-{policy.replace(':', '')}-{r}", env, steps, threads)
                    ms = steady(run["step_ms"], warmup, steps - warmup)
                    results.setdefault(load, {}).setdefault(policy, []).append(ms)
                    print(f"bench_wait_policy: {load} {policy} round {r + 1}: {ms:.1f} ms", file=sys.stderr, flush=True)
    return results


def fluctuating(on_s: float, off_s: float, rounds: int, steps: int, scratch: Path, per_run: bool = False) -> dict:
    """Wall seconds of the run with glassformer's own plan, starting passive or spinning, per alternated pair;
    ``per_run``: each run gets its own background process, started with it (busy ``on_s``, then idle)."""
    results: dict[str, list[float]] = {"spin": [], "passive": []}
    shared = contextlib.nullcontext() if per_run else Background((1.0,), on_s, off_s)
    with shared:
        for r in range(rounds):
            for start in ("spin", "passive") if r % 2 == 0 else ("passive", "spin"):
                own = Background((1.0,), on_s, off_s) if per_run else contextlib.nullcontext()
                with own:
                    run = train(scratch / f"fluct-{start}-{r}", {**clean_env(), "BENCH_WAIT": start}, steps, 0)
                results[start].append(run["wall_s"])
                print(f"bench_wait_policy: {start} start, pair {r + 1}: {run['wall_s']:.1f} s",
                      file=sys.stderr, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", default="none,half,one,two", help=f"comma-separated, of {', '.join(LOADS)}")
    parser.add_argument("--policies", default="spin,passive,spin:1000,spin:10000",
                        help="comma-separated wait policies: spin, passive, spin:N")
    parser.add_argument("--fluctuate", default="", metavar="ON,OFF",
                        help="also a load busy ON seconds, idle OFF seconds (e.g. 10,10)")
    parser.add_argument("--busy-start", type=float, default=0.0, metavar="S",
                        help="also runs that start beside a busy process which stops after S seconds")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=80, help="training steps a run")
    parser.add_argument("--warmup", type=int, default=10, help="first steps of each run left out (steady loads)")
    parser.add_argument("--threads", type=int, default=2, help="threads of the steady-load runs")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-output" / "bench_wait_policy.json")
    parser.add_argument("--cli", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cli is not None:
        sys.exit(cli(args.cli))
    loads = [x for x in args.loads.split(",") if x]
    if set(loads) - set(LOADS):
        parser.error(f"--loads: expected some of {', '.join(LOADS)}, got {args.loads!r}")
    try:
        policies = [p for p in args.policies.split(",") if p]
        for policy in policies:
            policy_env(policy)  # raises for a policy it does not know
        fluctuate = [float(x) for x in args.fluctuate.split(",")] if args.fluctuate else []
    except (argparse.ArgumentTypeError, ValueError) as error:
        parser.error(f"--policies / --fluctuate: {error}")
    if fluctuate and (len(fluctuate) != 2 or not all(0 < x < 3600 for x in fluctuate)):
        parser.error(f"--fluctuate: expected ON,OFF seconds, both in (0, 3600), got {args.fluctuate!r}")
    if not 0 <= args.busy_start < 3600:  # (NaN fails too)
        parser.error(f"--busy-start: expected seconds in [0, 3600), got {args.busy_start!r}")
    if min(args.rounds, args.threads) < 1 or not 0 <= args.warmup < args.steps or not (policies or not loads):
        parser.error("--rounds and --threads must be at least 1, --warmup below --steps, --policies not empty")
    machine = {"cpu": cpu_line(), "load_before": os.getloadavg()[0],
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    scratch = Path(tempfile.mkdtemp(prefix="bench-wait-"))
    results: dict = {"machine": machine, "steps": args.steps, "threads": args.threads}
    if loads:
        results["steady"] = steady_loads(loads, policies, args.rounds, args.steps, args.warmup, args.threads, scratch)
    if fluctuate:
        results["fluctuating"] = {"on_s": fluctuate[0], "off_s": fluctuate[1],
                                  "wall_s": fluctuating(*fluctuate, args.rounds, args.steps, scratch)}
    if args.busy_start:
        results["busy_start"] = {"busy_s": args.busy_start, "wall_s": fluctuating(
            args.busy_start, 1e6, args.rounds, args.steps, scratch, per_run=True)}
    machine["load_after"] = os.getloadavg()[0]
    print(f"machine: {machine['cpu']}; load {machine['load_before']:.1f} before, {machine['load_after']:.1f} after")
    if loads:
        base = "spin" if "spin" in policies else policies[0]
        print(f"\nsteady loads: {args.threads} threads, median ms per step (steps {args.warmup + 1}-{args.steps}) "
              f"over {args.rounds} rounds, and / {base}")
        print("| load | " + " | ".join(policies) + " |\n| --- |" + " --- |" * len(policies))
        for load, by_policy in results["steady"].items():
            ref = statistics.median(by_policy[base])
            cells = [f"{statistics.median(by_policy[p]):.1f} ({statistics.median(by_policy[p]) / ref:.2f})"
                     for p in policies]
            print(f"| {load} | " + " | ".join(cells) + " |")
    parts = {"fluctuating": f"load busy {fluctuate[0]:g} s / idle {fluctuate[1]:g} s" if fluctuate else "",
             "busy_start": f"one process busy for the first {args.busy_start:g} s of each run, then idle"}
    for part, title in parts.items():
        if part not in results:
            continue
        wall = results[part]["wall_s"]
        ratios = [p / s for p, s in zip(wall["passive"], wall["spin"])]
        results[part]["passive_over_spin"] = ratios
        print(f"\n{title}; glassformer's own thread count, {args.steps} steps, whole-process wall seconds per pair")
        print("| start | wall s (each pair) | median |\n| --- | --- | --- |")
        for start in ("spin", "passive"):
            print(f"| {start} | {', '.join(f'{w:.1f}' for w in wall[start])} | {statistics.median(wall[start]):.1f} |")
        print(f"passive / spin per pair: {', '.join(f'{r:.2f}' for r in ratios)}; "
              f"median {statistics.median(ratios):.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"results written to {args.out}")


if __name__ == "__main__":
    main()

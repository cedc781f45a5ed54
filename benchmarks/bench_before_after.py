"""Paired before/after: the same ``glassformer bench`` run from two source trees, alternated.

A change that restructures the core (issue 31: one boundary, checks moved out of the hot path) must
keep every benchmark figure. This runs ``python -m glassformer bench ARGS`` with ``PYTHONPATH`` pointing
at the *before* tree's ``src`` and at the *after* tree's, in alternated pairs (the order flipped every
other pair, so a machine that grows busier does not favour one side), reads each run's JSON and prints,
for every throughput figure both runs report (each ``tokens_per_s``), the medians and the median of
the per-pair ratios after / before (above 1: the after tree is faster). The CPU (``lscpu`` model name
and the flags that decide kernel speed) and the load before and after head the table; everything is
written to ``--out`` as JSON.

Make the *before* tree with git, e.g. ``git worktree add ../before f369972``; both trees run in this
Python (its torch and libraries)::

    python benchmarks/bench_before_after.py --before ../before/src --pairs 3 \\
        -- --quick --only train,gen --no_hf --precision float32 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from glassformer.bench.timing import cpu_line  # noqa: E402 (after the path is set): the CPU as every figure names it
from glassformer.runtime.kernel_choice import effective  # noqa: E402 (whether a kept choice takes the special way)


def throughputs(results: Any, path: str = "") -> dict[str, float]:
    """Every throughput in a bench JSON, by its path: a number under a key ending in ``tokens_per_s``
    (``train/baby/float32/tokens_per_s/glassformer``), but the bound (``bound_tokens_per_s``, the machine's
    bandwidth, not the code's speed)."""
    found: dict[str, float] = {}
    if isinstance(results, dict):
        for key, value in results.items():
            found.update(throughputs(value, f"{path}/{key}" if path else str(key)))
    elif isinstance(results, list):
        for i, value in enumerate(results):
            found.update(throughputs(value, f"{path}[{i}]"))
    elif isinstance(results, (int, float)) and not isinstance(results, bool):
        keys = [key.split("[")[0] for key in path.split("/")]
        if any(k.endswith("tokens_per_s") for k in keys) and "bound_tokens_per_s" not in keys:
            found[path] = float(results)
    return found


def run_bench(src: Path, bench_args: list[str], out: Path, cache: Path) -> dict[str, float]:
    """One ``glassformer bench`` run of the tree ``src``, its kernel choices kept in ``cache`` (one folder per
    tree: a tree never takes a choice the other measured); its throughput figures."""
    env = {**os.environ, "PYTHONPATH": str(src), "GLASSFORMER_THREADS": "fixed", "GLASSFORMER_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "glassformer", "bench", *bench_args, "--out", str(out)]
    done = subprocess.run(command, env=env, cwd=out.parent, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench failed for {src}:\n{done.stderr[-2000:]}")
    return throughputs(json.loads(out.read_text()))


def kept_choices(cache: Path) -> dict[str, bool]:
    """The kernel choices one tree's runs kept in ``cache`` (measured by its first run, read by the later ones):
    {case: special way taken}, every machine and thread count of the file together."""
    try:
        machines = json.loads((cache / "kernel-choices.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {case: effective(entry) for cases in machines.values() if isinstance(cases, dict)
            for case, entry in cases.items()}  # the file is one these runs wrote: records or bools


def main(argv: list[str] | None = None) -> int:
    """Run the pairs, print the table, write the JSON; 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the before tree's src folder")
    parser.add_argument("--after", type=Path, default=ROOT / "src", help="the after tree's src (default: this one)")
    parser.add_argument("--pairs", type=int, default=3, help="alternated pairs (default 3)")
    parser.add_argument("--out", type=Path, default=Path("bench-output/before_after.json"))
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="after --: glassformer bench's arguments")
    args = parser.parse_args(argv)
    bench_args = [a for a in args.bench_args if a != "--"] or ["--quick", "--no_hf", "--precision", "float32"]
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            order = ("before", "after") if pair % 2 == 0 else ("after", "before")
            for side in order:
                src = (args.before if side == "before" else args.after).resolve()
                cache = Path(tmp) / f"{side}-cache"
                cache.mkdir(exist_ok=True)
                runs[side].append(run_bench(src, bench_args, Path(tmp) / f"{side}-{pair}.json", cache))
                print(f"pair {pair + 1}/{args.pairs}: {side} done", file=sys.stderr)
        choices = {side: kept_choices(Path(tmp) / f"{side}-cache") for side in runs}
    rows = []
    for key in sorted(set(runs["before"][0]) & set(runs["after"][0])):
        before = [r[key] for r in runs["before"]]
        after = [r[key] for r in runs["after"]]
        ratios = [a / b for a, b in zip(after, before) if b > 0]
        rows.append({"figure": key, "before": statistics.median(before), "after": statistics.median(after),
                     "ratio": statistics.median(ratios) if ratios else None, "pair_ratios": ratios})
    load = f"load {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    header = (f"CPU: {cpu_line()}, {os.cpu_count()} CPUs; {load}; {args.pairs} alternated pairs; "
              f"bench {' '.join(bench_args)}")
    print(header)
    for side, taken in choices.items():
        print(f"{side}: special way taken for {sum(taken.values())} of {len(taken)} kernel choices "
              f"({', '.join(case for case, on in taken.items() if on) or 'none'})")
    print("| figure | before | after | after / before, median (each pair) |")
    print("| --- | ---: | ---: | --- |")
    for row in rows:
        pairs = ", ".join(f"{r:.2f}" for r in row["pair_ratios"])
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"
        print(f"| {row['figure']} | {row['before']:,.0f} | {row['after']:,.0f} | {ratio} ({pairs}) |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"cpu": cpu_line(), "header": header, "rows": rows, "runs": runs,
                                           "choices": choices}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Batch-1 greedy decoding of *baby*: glassformer (default), ``generate(..., compile=True)`` and Hugging Face
``generate``, in alternated rounds; at one thread timed in the process's CPU time (a busy machine's time-sharing
does not enter it), else in wall time.

    python benchmarks/bench_decode_vs_hf.py --threads 1 --new 128 --rounds 8 --compile --out decode_vs_hf.json

Prints each contender's median milliseconds per token and tokens/s, the paired ratio Hugging Face / each
glassformer contender (per round and median), the bound (copy bandwidth / weight bytes: a step reads every
weight once) and, with ``--compile``, the first compiled call's seconds (compiling included). See
docs/benchmarks.md, "decoding at twice Hugging Face".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from glassformer.bench.generate import generation_size, hf_generate, memory_bandwidth, weight_bytes
from glassformer.bench.setups import SIZES, glass_model, hf_model
from glassformer.bench.timing import cpu_line
from glassformer.generation import generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new", type=int, default=128, help="new tokens per call (default 128)")
    parser.add_argument("--rounds", type=int, default=8, help="alternated rounds (default 8)")
    parser.add_argument("--compile", action="store_true", help="add generate(..., compile=True), compiled first")
    parser.add_argument("--out", type=Path, default=Path("bench-output/decode_vs_hf.json"))
    args = parser.parse_args()
    for name in ("threads", "new", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    torch.set_num_threads(args.threads)
    size = generation_size(SIZES["baby"])
    model, reference = glass_model(size).eval(), hf_model(size).eval()
    ids, new = torch.zeros(1, 1, dtype=torch.long), args.new
    contenders = {"glassformer": lambda: generate(model, ids, new), "hf": lambda: hf_generate(reference, ids, new)}
    first = None
    if args.compile:
        start = time.perf_counter()
        generate(model, ids, new, compile=True)
        first = time.perf_counter() - start
        contenders["glassformer-compiled"] = lambda: generate(model, ids, new, compile=True)
    for run in contenders.values():
        run()
    clock = time.process_time if args.threads == 1 else time.perf_counter
    ms: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(args.rounds):
        for name in list(contenders) if r % 2 == 0 else list(contenders)[::-1]:
            start = clock()
            contenders[name]()
            ms[name].append((clock() - start) / new * 1e3)
    bandwidth = memory_bandwidth()
    bound = bandwidth / weight_bytes(model)
    results = {"cpu": cpu_line(), "threads": args.threads, "clock": clock.__name__, "new": new,
               "load": os.getloadavg(), "ms_per_token": ms, "bandwidth_gb_s": bandwidth / 1e9,
               "bound_tokens_per_s": bound, "first_compiled_call_s": first}
    print(f"{cpu_line()}, {args.threads} threads, {clock.__name__}, load {os.getloadavg()[0]:.1f}; bound "
          f"{bound:.0f} tokens/s ({bandwidth / 1e9:.1f} GB/s copy)")
    for name, values in ms.items():
        median = statistics.median(values)
        print(f"{name:22s} {median:.2f} ms/token  {1e3 / median:.0f} tokens/s")
    for name in (n for n in ms if n != "hf"):
        ratios = [h / g for h, g in zip(ms["hf"], ms[name], strict=True)]
        results[f"hf_over_{name}"] = statistics.median(ratios)
        print(f"hf / {name}: {statistics.median(ratios):.2f}x (per round {', '.join(f'{r:.2f}' for r in ratios)})")
    if first is not None:
        print(f"first compiled call: {first:.1f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"results written to {args.out}")


if __name__ == "__main__":
    main()

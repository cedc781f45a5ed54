"""Few-row products: how fast the weights of a whole model stream through ``F.linear`` and the route.

    python benchmarks/bench_matvec.py                       # baby's 24 matrices (42.5 MB), rows 1..16
    python benchmarks/bench_matvec.py --d 768 --layers 12 --threads 1 --rows 1,4 --out matvec.json

Decoding multiplies a few rows (one per sequence) by every weight matrix of the model, one matrix
after the other, so the weights come from memory, not cache. This times exactly that: x (rows, in)
times each of the model's matrices in turn (qkv, output projection, feed-forward up and down per
layer), for ``F.linear``, for ``glassformer.runtime.linear.linear`` (the route where it applies, chosen as streamed)
and, for reference, for the transposed weight layout Hugging Face's GPT-2 uses (``x @ Wt``). It
times the three in paired rounds (``glassformer.bench.timing.paired``: A B C, C B A, ...), prints
each one's median milliseconds per pass over all matrices, the implied GB/s and the paired ratio of
``F.linear`` to the route, and writes JSON.
See docs/benchmarks.md, "Decoding: the few-row route".
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch
import torch.nn.functional as F

from glassformer.bench.timing import paired, paired_ratio
from glassformer.runtime.linear import FEW_ROWS, _blocked_matvec, linear


def model_matrices(d: int, layers: int) -> list[torch.Tensor]:
    """The weight matrices of a GPT-style model of width d (d_ff = 4d), as ``nn.Linear`` stores them."""
    torch.manual_seed(0)
    shapes = [(3 * d, d), (d, d), (4 * d, d), (d, 4 * d)] * layers
    return [torch.randn(*shape) for shape in shapes]


def row_counts(text: str) -> list[int]:
    """``--rows``: comma-separated positive integers."""
    try:
        rows = [int(r) for r in text.split(",")]
    except ValueError:
        rows = []
    if not rows or min(rows) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers such as 1,2,4, got {text!r}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d", type=int, default=384, help="model width (default 384: baby)")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--rows", type=row_counts, default=[1, 2, 4, 8, 16], help="comma-separated row counts")
    parser.add_argument("--rounds", type=int, default=20, help="paired rounds per row count")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--blocks", type=row_counts, default=[],
                        help="also time the route's product with these block counts (it uses 4), e.g. 2,8,16")
    parser.add_argument("--out", default="bench-output/matvec.json")
    args = parser.parse_args()
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    weights = model_matrices(args.d, args.layers)
    transposed = [w.t().contiguous() for w in weights]
    megabytes = sum(w.numel() for w in weights) * 4 / 1e6
    results = {"machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
                           "threads": torch.get_num_threads()},
               "d": args.d, "layers": args.layers, "megabytes": megabytes, "rows": {}}
    print(f"{len(weights)} matrices, {megabytes:.1f} MB, {torch.get_num_threads()} threads; "
          f"median ms per pass over all of them (GB/s); the route applies up to {FEW_ROWS} rows")
    extra = "".join(f" {n} blocks (bmm) |" for n in args.blocks)
    print(f"| rows | F.linear | glassformer linear | x @ Wt (in, out) |{extra} route speed-up |")
    print("|" + " --- |" * (5 + len(args.blocks)))
    with torch.inference_mode():
        for rows in args.rows:
            inputs = {n: torch.randn(rows, n) for n in (args.d, 4 * args.d)}
            ways = {
                "F.linear": lambda x=inputs: [F.linear(x[w.shape[1]], w) for w in weights],
                "linear": lambda x=inputs: [linear(x[w.shape[1]], w, streamed=True) for w in weights],
                "x @ Wt": lambda x=inputs: [x[w.shape[0]] @ w for w in transposed],
            }
            for n in args.blocks:
                ways[f"{n} blocks"] = lambda x=inputs, n=n: [_blocked_matvec(x[w.shape[1]], w, n) for w in weights]
            timings = paired(ways, rounds=args.rounds, calls=1, warmup=3)
            ms = {name: t.median * 1e3 for name, t in timings.items()}
            speed_up = paired_ratio(timings["F.linear"], timings["linear"])
            results["rows"][rows] = {"ms": ms, "gb_per_s": {k: megabytes / v for k, v in ms.items()},
                                     "route_speed_up": speed_up}
            cells = [f"{ms[k]:.2f} ({megabytes / ms[k]:.1f})" for k in ways]
            print(f"| {rows} | " + " | ".join(cells) + f" | {speed_up:.2f}x |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"results written to {out}")


if __name__ == "__main__":
    main()

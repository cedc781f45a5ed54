"""bfloat16 attention on the bfloat16 units (issue 46 point 1): the blocked kernel against torch's, paired.

Three tables, every contender alternated in each round (a slow moment of a shared machine hits all alike),
medians and per-round ratios:

1. the products alone: ``bmm`` at attention's shapes (B·h x T x hd) and a square matmul, float32 and bfloat16;
2. attention forward + backward (causal) at *baby*'s shape (8 x 6 heads x 256 x 64) and the Shakespeare
   recipe's (32 x 4 x 64 x 32): torch's kernel in float32 and bfloat16, the blocked bfloat16 kernel;
3. a whole training step (forward, backward, clip, AdamW) of the bench's *baby* and of the recipe's model:
   float32, bfloat16 with torch's kernel, bfloat16 with the blocked kernel (forced: no measured choice).

    python benchmarks/bench_bf16_attention.py                  # all three, 7 rounds, JSON to bench-output/
    python benchmarks/bench_bf16_attention.py --only attention --rounds 9 --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from glassformer.bench.timing import cpu_line
from glassformer.runtime import attention as bf16_attention

PARTS = ("products", "attention", "step")
SHAPES = {"baby": (8, 6, 256, 64), "recipe": (32, 4, 64, 32)}  # (B, h, T, hd)


def alternated(ways: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each way, one sample per round, the ways called in turn within each round."""
    for fn in ways.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, fn in ways.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def table(title: str, times: dict[str, list[float]], against: str, unit: Callable[[str, float], str]) -> dict:
    """Print a Markdown table (median, what ``unit`` makes of it, median per-round ratio to ``against``)."""
    print(f"\n{title}\n\n| contender | median ms | {unit('', 0)} | / {against} (per-round range) |")
    print("| --- | --- | --- | --- |")
    rows = {}
    for name, samples in times.items():
        ratios = [a / b for a, b in zip(samples, times[against], strict=True)]
        rows[name] = {"median_s": statistics.median(samples), "ratio": statistics.median(ratios),
                      "ratios": ratios, "samples": samples}
        print(f"| {name} | {statistics.median(samples) * 1e3:.2f} | {unit(name, statistics.median(samples))} | "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
    return rows


def products(rounds: int) -> dict:
    """bmm at attention's shapes and a 1024² matmul, float32 against bfloat16."""
    B, h, T, d = SHAPES["baby"]
    ways, flops = {}, {}
    for dtype, name in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
        q, k, p = torch.randn(B * h, T, d, dtype=dtype), torch.randn(B * h, T, d, dtype=dtype), torch.randn(
            B * h, T, T, dtype=dtype)
        a, b = torch.randn(1024, 1024, dtype=dtype), torch.randn(1024, 1024, dtype=dtype)
        ways[f"q kᵀ {name}"] = lambda q=q, k=k: torch.bmm(q, k.transpose(1, 2))
        ways[f"p v {name}"] = lambda p=p, k=k: torch.bmm(p, k)
        ways[f"mm 1024 {name}"] = lambda a=a, b=b: a @ b
        flops |= {f"q kᵀ {name}": 2 * B * h * T * T * d, f"p v {name}": 2 * B * h * T * T * d,
                  f"mm 1024 {name}": 2 * 1024 ** 3}
    times = alternated(ways, rounds)
    return table(f"products at attention's shapes ({B * h} x {T} x {d}), GFLOP/s", times, "q kᵀ float32",
                 lambda n, s: "GFLOP/s" if not n else f"{flops[n] / s / 1e9:.0f}")


def attention(rounds: int) -> dict:
    """Causal attention forward + backward: torch's kernel (float32, bfloat16) against the blocked kernel."""
    out = {}
    for shape_name, (B, h, T, d) in SHAPES.items():
        def qkv(dtype: torch.dtype, shape: tuple[int, ...] = (B, h, T, d)) -> list[torch.Tensor]:
            return [torch.randn(shape, dtype=dtype, requires_grad=True) for _ in range(3)]

        def fwd_bwd(fn: Callable[..., torch.Tensor], tensors: list[torch.Tensor]) -> Callable[[], None]:
            def run() -> None:
                o = fn(*tensors)
                o.backward(torch.ones_like(o))
            return run

        torch_kernel = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        ways = {"torch float32": fwd_bwd(torch_kernel, qkv(torch.float32)),
                "torch bfloat16": fwd_bwd(torch_kernel, qkv(torch.bfloat16)),
                "blocked bfloat16": fwd_bwd(lambda q, k, v: bf16_attention.blocked_attention(q, k, v, is_causal=True),
                                            qkv(torch.bfloat16))}
        out[shape_name] = table(f"attention fwd+bwd, {shape_name} ({B} x {h} heads x {T} x {d}), causal",
                                alternated(ways, rounds), "torch bfloat16", lambda n, s: "" if n else "-")
    return out


def step(rounds: int) -> dict:
    """A training step: float32, bfloat16 with torch's kernel, bfloat16 with the blocked kernel."""
    from glassformer.bench.defaults import recipe_model
    from glassformer.bench.setups import SIZES, glass_model
    from glassformer.bench.train import ADAMW, train_step
    from glassformer.training.optim import make_optimizer

    out = {}
    for name, (model, batch, T) in {"baby": (glass_model(SIZES["baby"]), 8, 256),
                                    "recipe": (recipe_model(), 32, 64)}.items():
        model.train()
        ids = torch.randint(0, 65, (batch, T), generator=torch.Generator().manual_seed(0))
        optimizer = make_optimizer(model, **ADAMW)
        f32, bf16 = (train_step(model, optimizer, ids, ids.roll(-1, 1), precision=p) for p in ("float32", "bfloat16"))

        def blocked(bf16: Callable[[], None] = bf16, model: torch.nn.Module = model) -> None:
            bf16_attention.use_bf16_attention(model)
            try:
                bf16()
            finally:
                bf16_attention.use_bf16_attention(model, False)

        ways = {"float32": f32, "bfloat16, torch's attention": bf16, "bfloat16, blocked attention": blocked}
        tokens = batch * T
        out[name] = table(f"training step, {name} (batch {batch} x {T}), tokens/s", alternated(ways, rounds),
                          "bfloat16, torch's attention",
                          lambda n, s, tokens=tokens: "tokens/s" if not n else f"{tokens / s:,.0f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts of {PARTS}")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", default="bench-output/bf16_attention.json")
    args = parser.parse_args()
    parts = [p for p in args.only.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown or args.rounds < 1:
        parser.error(f"--only takes parts of {PARTS} (got {unknown}); --rounds at least 1 (got {args.rounds})")
    if args.threads:
        torch.set_num_threads(args.threads)
    bf16_attention.blocked_pays = lambda *a, **k: True  # the step's blocked row takes the kernel unmeasured
    print(f"machine: {cpu_line()}, {torch.get_num_threads()} threads, torch {torch.__version__}; "
          f"{args.rounds} alternated rounds")
    results = {"cpu": cpu_line(), "threads": torch.get_num_threads(), "torch": torch.__version__,
               "rounds": args.rounds}
    for part in parts:
        results[part] = {"products": products, "attention": attention, "step": step}[part](args.rounds)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"\nresults written to {args.out}")


if __name__ == "__main__":
    main()

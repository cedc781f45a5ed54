"""Two GPU measurements that followed the first run of benchmarks/gpu_check.sh (docs/benchmarks.md):

    python benchmarks/gpu_followup.py first-call [--device cuda] [--out DIR]
    python benchmarks/gpu_followup.py mfu --batch 32 [--device cuda] [--out DIR]

first-call  A user's first ``generate`` in a fresh process: 128 new tokens of GPT-2 small (random
            weights, bfloat16 autocast), first, second and third call, then a prompt of a new length.
            Run twice, each in its own process: "torch's choice" (glassformer's
            ``runtime.decode.decoding_attention`` taken out: torch may pick cuDNN's attention, which
            builds a plan per new key length) and "glassformer" (the library as it ships).
mfu         GPT-2 small's compiled bfloat16 training step at ``--batch`` (gpu_check's bench_gpt2 stage
            uses 16), eager vs compiled, MFU against the bfloat16 matmul peak measured in the same process.

With ``--device cpu`` both run at tiny sizes (a dry run: tests/test_gpu_check_dryrun.py runs it). Each prints
a table and writes ``gpu_followup_<what>.json`` in ``--out`` (default: ``gpu-check-output/``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_check import bench_size, patch_compile  # noqa: E402  (the GPU check's sizes and compile switch)

NEW_TOKENS = 128


def first_call(device: str, policy: str) -> dict[str, Any]:
    """In this (fresh) process: seconds of the first three ``generate`` calls and of a new prompt length."""
    started = time.perf_counter()
    import torch

    import glassformer.generation.api as api
    from glassformer.bench.generate import generation_size
    from glassformer.bench.setups import glass_model
    from glassformer.bench.timing import sync
    from glassformer.runtime.precision import autocast

    out: dict[str, Any] = {"policy": policy, "import_s": time.perf_counter() - started}
    if policy == "torch":
        api.decoding_attention = lambda device: contextlib.nullcontext()  # type: ignore[assignment]
    model = glass_model(generation_size(bench_size("gpt2", device == "cpu")), device).eval()
    for name, prompt in (("first", 1), ("second", 1), ("third", 1), ("new_prompt_length", 77)):
        ids = torch.zeros(1, prompt, dtype=torch.long, device=device)
        sync(device)
        start = time.perf_counter()
        with autocast("bfloat16", device):
            api.generate(model, ids, NEW_TOKENS)
        sync(device)
        out[f"{name}_s"] = time.perf_counter() - start
    return out


def mfu(device: str, batch: int) -> dict[str, Any]:
    """Compiled vs eager training step of GPT-2 small at ``batch``; MFU against the measured bf16 peak."""
    from glassformer.bench.setups import glass_model, train_flops_per_token
    from glassformer.bench.train import _non_embedding_params, bench_train_compile, matmul_peaks

    size = replace(bench_size("gpt2", device == "cpu"), batch=batch)
    peak = matmul_peaks(("bfloat16",), n=256 if device == "cpu" else 8192, device=device)["bfloat16"]
    timed = bench_train_compile(size, rounds=3, calls=3, device=device, precision="bfloat16")
    flops = train_flops_per_token(size, _non_embedding_params(glass_model(size, "meta")), size.block)
    return {"size": size.__dict__, "peak_flops": peak, "flops_per_token": flops,
            "tokens_per_s": timed["tokens_per_s"], "compile_first_call_s": timed["first_call_s"],
            "mfu": {name: tps * flops / peak for name, tps in timed["tokens_per_s"].items()}}


def main(argv: list[str] | None = None) -> int:
    """Run one measurement, print its table, write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("first-call", "mfu"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=32, help="mfu: the training batch (sequences of 1024 tokens)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "gpu-check-output"),
                        help="folder for the JSON (default: gpu-check-output/, beside the GPU check's)")
    parser.add_argument("--compile-backend", default=None, help="mfu: torch.compile backend (the dry run: aot_eager)")
    parser.add_argument("--policy", choices=("torch", "glassformer"), help=argparse.SUPPRESS)  # internal
    args = parser.parse_args(argv)
    if args.device not in ("cpu", "cuda") and not args.device.startswith("cuda:"):
        parser.error(f"--device must be cuda or cpu, got {args.device!r}")
    if args.batch < 1:
        parser.error(f"--batch must be an int >= 1, got {args.batch}")
    if args.policy:  # the child process of first-call
        print(json.dumps(first_call(args.device, args.policy)), flush=True)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.what == "first-call":
        rows = []
        for policy in ("torch", "glassformer"):
            done = subprocess.run([sys.executable, __file__, "first-call", "--device", args.device,
                                   "--policy", policy], capture_output=True, text=True, check=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        result: dict[str, Any] = {"device": args.device, "new_tokens": NEW_TOKENS, "rows": rows}
        print(f"| attention policy | first call s | second s | third s | new prompt length s |  ({NEW_TOKENS} tokens)")
        print("| --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r['policy']} | {r['first_s']:.2f} | {r['second_s']:.2f} | {r['third_s']:.2f} "
                  f"| {r['new_prompt_length_s']:.2f} |")
    else:
        patch_compile(args.compile_backend)
        result = {"device": args.device, **mfu(args.device, args.batch)}
        print(f"GPT-2 small, batch {args.batch} x 1024, bfloat16; peak {result['peak_flops'] / 1e12:.1f} TFLOP/s")
        print("| step | tokens/s | MFU |\n| --- | --- | --- |")
        for name, tps in result["tokens_per_s"].items():
            print(f"| {name} | {tps:,.0f} | {result['mfu'][name]:.1%} |")
    (out / f"gpu_followup_{args.what}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Generation speed: tokens/s with and without the KV cache, and per-token latency as the context grows.

    python benchmarks/bench_generation.py                       # the default 4-layer, 256-wide model
    python benchmarks/bench_generation.py --preset gpt2-small --vocab_size 50257 --out gen.json

For each batch size (1 and 8) and each context length (16, 32, ... up to the model's max_len) it
times one decoding step (append a token, get the next logits) with the cache and with full
recomputation, and it times a whole ``generate`` call (greedy, from a 16-token prompt). It prints a
table and writes JSON. Timings are medians of repeated steps on whatever machine this is: on a
shared, busy machine they are noisy; compare the columns of one run, not runs with each other.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from glassformer import ModelConfig, build_model, count_params
from glassformer.generation import IncrementalDecoder, generate

DEFAULT = dict(vocab_size=65, d_model=256, n_heads=4, n_layers=4, d_ff=1024, max_len=512, pos="learned",
               bias=False, scale_embeddings=False, init_std=0.02)


def step_latency(model, batch: int, context: int, use_cache: bool, repeats: int) -> float:
    """Median seconds for one decoding step at ``context`` tokens of context."""
    ids = torch.randint(0, model.config.vocab_size, (batch, context))
    decoder = IncrementalDecoder(model, ids, None, repeats, use_cache=use_cache)
    logits = decoder.start()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        decoder.append(logits.argmax(dim=-1))
        logits = decoder.next_logits()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def throughput(model, batch: int, new_tokens: int, use_cache: bool) -> float:
    """Generated tokens per second (all rows) for a greedy ``generate`` from a 16-token prompt."""
    ids = torch.randint(0, model.config.vocab_size, (batch, 16))
    t0 = time.perf_counter()
    out = generate(model, ids, new_tokens, use_cache=use_cache)
    return batch * (out.shape[1] - 16) / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="a ModelConfig preset (default: a 4x256 char model)")
    parser.add_argument("--max_len", type=int, default=None, help="override the model's context limit")
    parser.add_argument("--vocab_size", type=int, default=None)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=8, help="timed steps per measurement")
    parser.add_argument("--new_tokens", type=int, default=128, help="tokens per generate() call")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("bench_generation.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = {k: v for k, v in (("max_len", args.max_len), ("vocab_size", args.vocab_size)) if v}
    config = (ModelConfig.preset(args.preset, dropout=0.0, **overrides) if args.preset
              else ModelConfig.from_dict({**DEFAULT, **overrides}))
    torch.manual_seed(0)
    model = build_model(config).eval()
    contexts = [c for c in (16, 32, 64, 128, 256, 512, 1024, 2048) if c + args.repeats <= config.max_len]
    contexts.append(config.max_len - args.repeats)
    result = {"model": config.to_dict(), "parameters": count_params(model), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine(),
              "latency_ms": [], "throughput": []}
    print(f"model: {count_params(model) / 1e6:.2f}M parameters, max_len {config.max_len}, "
          f"{torch.get_num_threads()} threads")
    print(f"{'batch':>5} {'context':>7} {'cached ms/step':>15} {'recomputed ms/step':>19} {'speed-up':>9}")
    with torch.inference_mode():
        for batch in args.batches:
            for context in contexts:
                cached = step_latency(model, batch, context, True, args.repeats)
                full = step_latency(model, batch, context, False, args.repeats)
                result["latency_ms"].append({"batch": batch, "context": context, "cached": cached * 1e3,
                                             "recomputed": full * 1e3})
                print(f"{batch:>5} {context:>7} {cached * 1e3:>15.2f} {full * 1e3:>19.2f} {full / cached:>8.1f}x")
        new_tokens = min(args.new_tokens, config.max_len - 16)
        print(f"\ngenerate(): greedy, 16-token prompt, {new_tokens} new tokens")
        print(f"{'batch':>5} {'cached tok/s':>13} {'recomputed tok/s':>17}")
        for batch in args.batches:
            cached = throughput(model, batch, new_tokens, True)
            full = throughput(model, batch, new_tokens, False)
            result["throughput"].append({"batch": batch, "new_tokens": new_tokens, "cached_tokens_per_s": cached,
                                         "recomputed_tokens_per_s": full})
            print(f"{batch:>5} {cached:>13.1f} {full:>17.1f}")
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()

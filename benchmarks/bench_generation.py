"""Generation speed: tokens/s with and without the KV cache, and per-token latency as the context grows.

    python benchmarks/bench_generation.py                       # the default 4-layer, 256-wide model
    python benchmarks/bench_generation.py --preset gpt2-small --vocab_size 50257 --out gen.json

For each batch size (1 and 8) and each context length (16, 32, ... up to the model's max_len) it
times one decoding step (append a token, get the next logits) with the cache and with full
recomputation, and it times a whole ``generate`` call (greedy, from a 16-token prompt). Both use the
project's paired timing (``glassformer.bench.timing.paired``: cached and recomputed alternate, so a
busy minute slows both alike); the speed-up is the median of the per-round ratios. It prints a table
and writes JSON. On a shared machine absolute times are noisy: compare the columns of one run.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Callable
from pathlib import Path

import torch

from glassformer import ModelConfig, build_model, count_params
from glassformer.bench.timing import paired, paired_ratio
from glassformer.generation import IncrementalDecoder, generate

DEFAULT = dict(vocab_size=65, d_model=256, n_heads=4, n_layers=4, d_ff=1024, max_len=512, pos="learned",
               bias=False, scale_embeddings=False, init_std=0.02)
PROMPT = 16  # prompt tokens of the generate() calls
WARMUP = 1  # untimed calls of each contender before the timed rounds


def decoding_step(model: torch.nn.Module, batch: int, context: int, use_cache: bool,
                  steps: int) -> Callable[[], None]:
    """A function doing one greedy decoding step (append a token, next logits) of a (batch, context)
    prompt; it may be called ``steps`` times (the context grows by one token per call)."""
    ids = torch.randint(0, model.config.vocab_size, (batch, context))
    decoder = IncrementalDecoder(model, ids, None, steps, use_cache=use_cache)
    logits = decoder.start()  # (B, V)

    def step() -> None:
        nonlocal logits
        decoder.append(logits.argmax(dim=-1))
        logits = decoder.next_logits()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="a ModelConfig preset (default: a 4x256 char model)")
    parser.add_argument("--max_len", type=int, default=None, help="override the model's context limit")
    parser.add_argument("--vocab_size", type=int, default=None)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=8, help="timed steps (paired rounds) per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds of whole generate() calls")
    parser.add_argument("--new_tokens", type=int, default=128, help="tokens per generate() call")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("bench_generation.json"))
    args = parser.parse_args()
    for name in ("repeats", "rounds", "new_tokens", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be >= 1, got {value}")
    if min(args.batches) < 1:
        parser.error(f"--batches must be >= 1, got {args.batches}")
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = {k: v for k, v in (("max_len", args.max_len), ("vocab_size", args.vocab_size)) if v}
    config = (ModelConfig.preset(args.preset, dropout=0.0, **overrides) if args.preset
              else ModelConfig.from_dict({**DEFAULT, **overrides}))
    torch.manual_seed(0)
    model = build_model(config).eval()
    steps = WARMUP + args.repeats  # decoding steps each measurement runs
    if config.max_len <= steps or config.max_len <= PROMPT:
        parser.error(f"max_len={config.max_len} leaves no room for {steps} steps / a {PROMPT}-token prompt")
    contexts = [c for c in (16, 32, 64, 128, 256, 512, 1024, 2048) if c + steps <= config.max_len]
    contexts.append(config.max_len - steps)
    result = {"model": config.to_dict(), "parameters": count_params(model), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine(),
              "timing": "glassformer.bench.timing.paired", "latency_ms": [], "throughput": []}
    print(f"model: {count_params(model) / 1e6:.2f}M parameters, max_len {config.max_len}, "
          f"{torch.get_num_threads()} threads")
    print(f"{'batch':>5} {'context':>7} {'cached ms/step':>15} {'recomputed ms/step':>19} {'speed-up':>9}")
    with torch.inference_mode():
        for batch in args.batches:
            for context in contexts:
                timings = paired({"cached": decoding_step(model, batch, context, True, steps),
                                  "recomputed": decoding_step(model, batch, context, False, steps)},
                                 rounds=args.repeats, calls=1, warmup=WARMUP)
                cached, full = timings["cached"].median, timings["recomputed"].median
                speed_up = paired_ratio(timings["recomputed"], timings["cached"])
                result["latency_ms"].append({"batch": batch, "context": context, "cached": cached * 1e3,
                                             "recomputed": full * 1e3, "speed_up": speed_up})
                print(f"{batch:>5} {context:>7} {cached * 1e3:>15.2f} {full * 1e3:>19.2f} {speed_up:>8.1f}x")
    new_tokens = min(args.new_tokens, config.max_len - PROMPT)
    print(f"\ngenerate(): greedy, {PROMPT}-token prompt, {new_tokens} new tokens")
    print(f"{'batch':>5} {'cached tok/s':>13} {'recomputed tok/s':>17}")
    for batch in args.batches:
        ids = torch.randint(0, config.vocab_size, (batch, PROMPT))
        timings = paired({"cached": lambda ids=ids: generate(model, ids, new_tokens, use_cache=True),
                          "recomputed": lambda ids=ids: generate(model, ids, new_tokens, use_cache=False)},
                         rounds=args.rounds, calls=1, warmup=WARMUP)  # no eos: every call makes new_tokens
        cached, full = (batch * new_tokens / timings[name].median for name in ("cached", "recomputed"))
        result["throughput"].append({"batch": batch, "new_tokens": new_tokens, "cached_tokens_per_s": cached,
                                     "recomputed_tokens_per_s": full})
        print(f"{batch:>5} {cached:>13.1f} {full:>17.1f}")
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()

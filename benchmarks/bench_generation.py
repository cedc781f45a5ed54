"""Generation speed: tokens/s with and without the KV cache, and per-token latency as the context grows.

    python benchmarks/bench_generation.py                       # the default 4-layer, 256-wide model
    python benchmarks/bench_generation.py --preset gpt2-small --vocab_size 50257 --out gen.json

For each batch size (1 and 8) and each context length (16, 32, ... up to the model's max_len) it
times one decoding step (append a token, get the next logits) with the cache and with full
recomputation, and it times a whole ``generate`` call (greedy, from a 16-token prompt) with the cache,
without it and, with ``--hf``, Hugging Face ``generate`` on a GPT-2 of the same size (``--preset`` off:
the bench's sizes, ``glassformer.bench.setups``). Every ``generate`` row also shows the bound: a
decoding step reads every weight once, so tokens/s cannot exceed batch x memory bandwidth / weight
bytes (``glassformer.bench.generate.memory_bandwidth`` and ``weight_bytes``); ``of_bound`` is the
fraction reached. All timings are paired (``glassformer.bench.timing.paired``: the contenders alternate,
so a busy minute slows them alike); speed-ups and the HF ratio are medians of per-round ratios. It
prints a table and writes JSON. On a shared machine absolute times are noisy: compare the columns of
one run.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Callable
from pathlib import Path

import torch

from glassformer import ModelConfig, build_model, count_params
from glassformer.bench.generate import hf_generate, memory_bandwidth, weight_bytes
from glassformer.bench.setups import get_size, glass_model, hf_model
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
    parser.add_argument("--size", default=None, help="a bench size instead (small, baby: GPT-2 shaped)")
    parser.add_argument("--hf", action="store_true", help="also time Hugging Face generate (a GPT-2 of --size)")
    parser.add_argument("--no_steps", action="store_true", help="skip the per-step latency table")
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
    if args.hf and not args.size:
        parser.error("--hf needs --size (the Hugging Face GPT-2 is built for a bench size)")
    reference = None
    if args.size:
        size = get_size(args.size)
        model = glass_model(size, **overrides).eval()
        config = model.config
        if args.hf:
            reference = hf_model(size).eval()
    else:
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
    bandwidth, weights = memory_bandwidth(), weight_bytes(model)
    result.update(bandwidth_gb_s=bandwidth / 1e9, weight_mb=weights / 1e6)
    print(f"model: {count_params(model) / 1e6:.2f}M parameters, max_len {config.max_len}, "
          f"{torch.get_num_threads()} threads")
    print(f"{'batch':>5} {'context':>7} {'cached ms/step':>15} {'recomputed ms/step':>19} {'speed-up':>9}")
    with torch.inference_mode():
        for batch in [] if args.no_steps else args.batches:
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
    print(f"memory bandwidth {bandwidth / 1e9:.1f} GB/s, weights {weights / 1e6:.1f} MB")
    hf_head = f" {'hf tok/s':>9} {'vs hf':>6}" if reference is not None else ""
    print(f"{'batch':>5} {'cached tok/s':>13} {'recomputed tok/s':>17} {'bound tok/s':>12} {'of_bound':>8}{hf_head}")
    for batch in args.batches:
        ids = torch.randint(0, config.vocab_size, (batch, PROMPT))
        contenders = {"cached": lambda ids=ids: generate(model, ids, new_tokens, use_cache=True),
                      "recomputed": lambda ids=ids: generate(model, ids, new_tokens, use_cache=False)}
        if reference is not None:
            contenders["hf"] = lambda ids=ids: hf_generate(reference, ids, new_tokens)
        timings = paired(contenders, rounds=args.rounds, calls=1, warmup=WARMUP)  # no eos: new_tokens each
        rates = {name: batch * new_tokens / t.median for name, t in timings.items()}
        bound = batch * bandwidth / weights  # every weight read once per step, for all rows
        row = {"batch": batch, "new_tokens": new_tokens, "cached_tokens_per_s": rates["cached"],
               "recomputed_tokens_per_s": rates["recomputed"], "bound_tokens_per_s": bound,
               "of_bound": rates["cached"] / bound}
        line = (f"{batch:>5} {rates['cached']:>13.1f} {rates['recomputed']:>17.1f} {bound:>12.1f} "
                f"{row['of_bound']:>8.1%}")
        if reference is not None:
            row.update(hf_tokens_per_s=rates["hf"], ratio_to_hf=paired_ratio(timings["hf"], timings["cached"]),
                       hf_of_bound=rates["hf"] / bound)
            line += f" {rates['hf']:>9.1f} {row['ratio_to_hf']:>5.2f}x"
        result["throughput"].append(row)
        print(line)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()

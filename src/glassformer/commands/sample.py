"""``glassformer sample CHECKPOINT --prompt TEXT``: greedy, temperature or top-k/top-p text from a checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``sample`` verb to the ``glassformer`` subparsers."""
    parser = sub.add_parser(
        "sample", help="generate text from a checkpoint",
        description="Continue a prompt with a trained checkpoint (for an encoder-decoder: translate it). Sampling "
                    "by default (temperature, top-k, top-p); --greedy takes the most likely token each step. "
                    "The full set of options is in glassformer.generation.")
    parser.add_argument("checkpoint", type=Path, help="checkpoint folder (e.g. out/best)")
    parser.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    parser.add_argument("--max_new_tokens", type=int, default=200)
    parser.add_argument("--greedy", action="store_true", help="argmax decoding instead of sampling")
    parser.add_argument("--temperature", type=float, default=0.8, help="> 0; --greedy for argmax instead")
    parser.add_argument("--top_k", type=int, default=None, help="sample among the k most likely tokens")
    parser.add_argument("--top_p", type=float, default=None, help="nucleus sampling threshold in (0, 1]")
    parser.add_argument("--num_samples", type=int, default=1)
    parser.add_argument("--seed", type=int, default=None, help="make sampling reproducible")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print ``--num_samples`` continuations (translations) of ``--prompt``; returns 0."""
    from ..errors import UsageError, check_int, check_number
    from ..generation import generate_text
    from ..training import load

    if not args.greedy:
        check_number("--temperature", args.temperature, 0, low_open=True)
    check_int("--num_samples", args.num_samples, 1)
    if not args.prompt:
        raise UsageError("--prompt must not be empty")
    model, tokenizer = load(args.checkpoint)
    options = {} if args.greedy else {"do_sample": True, "temperature": args.temperature, "top_k": args.top_k,
                                      "top_p": args.top_p, "seed": args.seed}
    encdec = model.config.arch == "encoder-decoder"
    for n in range(args.num_samples):
        if "seed" in options and args.seed is not None:
            options["seed"] = args.seed + n
        text = generate_text(model, tokenizer, args.prompt, args.max_new_tokens, **options)
        if args.num_samples > 1:
            print(f"--- sample {n + 1}")
        print(text if encdec else args.prompt + text)
    return 0

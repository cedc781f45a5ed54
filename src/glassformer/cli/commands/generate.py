"""``glassformer generate CHECKPOINT --prompt TEXT``: every decoding option, streaming and traces."""

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import GlassformerError, UsageError
from ...io.fileio import Writes, atomic_write, claim_outputs
from .precision import add_precision, choose_precision

WRITES = (Writes(("generate", "{ck}", "--prompt", "ab", "--max_new_tokens", "2", "--json", "{out}/g.json"),
                 ("{out}/g.json",)),)


def _one_of(choices: dict[str, bool | str]) -> Callable[[str], bool | str]:
    """An argparse type: one of the words of ``choices`` (any case) -> its value."""
    words = list(choices)

    def parse(value: str) -> bool | str:
        if value.lower() not in choices:
            raise argparse.ArgumentTypeError(f"expected {', '.join(words[:-1])} or {words[-1]}, got {value!r}")
        return choices[value.lower()]

    return parse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``generate`` verb to the ``glassformer`` subparsers."""
    parser = sub.add_parser(
        "generate", help="continue (or translate) --prompt texts: greedy, sampling, beam search, "
                         "streaming, per-step traces",
        description="Generate from a checkpoint folder. Greedy by default; --sample draws tokens (shaped by "
                    "--temperature/--top_k/--top_p/--min_p); --num_beams N runs beam search (Hugging Face "
                    "semantics). --stream prints text as it is produced; --trace prints each step's top "
                    "candidates. See docs/generation.md.")
    parser.add_argument("checkpoint", type=Path, help="checkpoint folder (model.safetensors, config.json, ...)")
    parser.add_argument("--prompt", action="append", required=True,
                        help="text to continue (an encoder-decoder translates it); repeat for a batch")
    parser.add_argument("--max_new_tokens", type=int, default=100, help="tokens to add (default 100)")
    parser.add_argument("--sample", "--do_sample", dest="do_sample", action="store_true",
                        help="sample instead of taking the most likely token")
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature (> 0; default 1)")
    parser.add_argument("--top_k", type=int, default=None, help="sample among the k most likely")
    parser.add_argument("--top_p", type=float, default=None, help="nucleus threshold in (0, 1]")
    parser.add_argument("--min_p", type=float, default=None, help="drop tokens below min_p x top")
    parser.add_argument("--repetition_penalty", type=float, default=None,
                        help="penalise the tokens already present (> 1 repeats less; CTRL's rule, as in HF)")
    parser.add_argument("--no_repeat_ngram_size", type=int, default=None,
                        help="never repeat an n-gram of this many tokens")
    parser.add_argument("--num_beams", type=int, default=1, help="beam width (1 = no beam search, the default)")
    parser.add_argument("--length_penalty", type=float, default=1.0,
                        help="beam search: score / length**penalty (> 1 favours longer outputs)")
    parser.add_argument("--early_stopping", type=_one_of({"true": True, "false": False, "never": "never"}),
                        default=False, help="beam search stop rule: true, false or never")
    parser.add_argument("--num_return_sequences", type=int, default=1,
                        help="outputs per prompt (at most --num_beams with beam search)")
    parser.add_argument("--seed", type=int, default=None, help="make sampling reproducible")
    parser.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    parser.add_argument("--ignore_eos", action="store_true",
                        help="do not stop at the tokenizer's end-of-sequence token")
    parser.add_argument("--no_cache", action="store_true", help="recompute instead of KV caching")
    parser.add_argument("--compile", type=_one_of({"false": False, "true": True, "auto": "auto"}), default=False,
                        help="false (default), true or auto: one-token steps of a decoder-only model compiled by "
                             "torch.compile on a static cache (same tokens; the first call compiles for seconds)")
    parser.add_argument("--stream", action="store_true", help="print the text as it is generated")
    parser.add_argument("--trace", action="store_true", help="print each step's top candidates and choice")
    parser.add_argument("--trace_top_k", type=int, default=4, help="candidates shown per traced step (default 4)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results (or trace) as JSON")
    add_precision(parser)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword options of :func:`glassformer.generation.generate` the command line asks for."""
    return dict(
        do_sample=args.do_sample, temperature=1.0 if args.temperature is None else args.temperature,
        top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, repetition_penalty=args.repetition_penalty,
        no_repeat_ngram_size=args.no_repeat_ngram_size, num_beams=args.num_beams,
        length_penalty=args.length_penalty, early_stopping=args.early_stopping,
        num_return_sequences=args.num_return_sequences, seed=args.seed, stop_strings=args.stop,
        use_cache=not args.no_cache, **({"eos_token_id": []} if args.ignore_eos else {}),
        **({"compile": args.compile} if args.compile is not False else {}))


def _warn_sampling_options(args: argparse.Namespace) -> None:
    """A warning on stderr for the sampling options given without --sample: greedy and beam search ignore them."""
    from ...generation.processors import make_processors

    values = {name: getattr(args, name) for name in ("temperature", "top_k", "top_p", "min_p")
              if getattr(args, name) is not None}
    if args.do_sample or not values:
        return
    try:
        make_processors(do_sample=True, **values)
    except GlassformerError:
        return  # a bad value (0, NaN, ...) is an error, reported by itself and alone
    verb = "only shapes" if len(values) == 1 else "only shape"
    print(f"glassformer: warning: {', '.join(f'--{k} {v}' for k, v in values.items())} {verb} sampling; without "
          f"--sample the decoding is {'beam search' if args.num_beams > 1 else 'greedy'} and ignores them (add "
          "--sample)", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Generate (or stream, or trace) from each ``--prompt`` and print the text; returns 0."""
    from ...generation import check_max_new_tokens, generate_text
    from ...io.budget import check_fits, describe, generation_bytes
    from ...io.checks import check_int
    from ...training import load

    if not all(args.prompt):
        raise UsageError("--prompt must not be empty")
    check_int("--trace_top_k", args.trace_top_k, 1)
    check_max_new_tokens(args.max_new_tokens, name="--max_new_tokens")  # before loading: a typo fails at once
    if (args.stream or args.trace) and (len(args.prompt) > 1 or args.num_beams > 1 or args.num_return_sequences > 1):
        raise UsageError("--stream and --trace follow one sequence: one --prompt, --num_beams 1, "
                         "--num_return_sequences 1")
    if args.json is not None:  # never the checkpoint's own files, a link or a user's file: before any work
        claim_outputs([args.json], [args.checkpoint], "--json")
    model, tokenizer = load(args.checkpoint)
    rows = len(args.prompt) * max(args.num_beams, args.num_return_sequences)  # beams x prompts, before any buffer
    check_fits(generation_bytes(model.config, rows, 1), f"{len(args.prompt)} prompts x --num_beams {args.num_beams} "
               f"({rows:,} rows, {describe(model.config)})")
    precision = choose_precision(args.precision, model,
                                 lambda: generate_text(model, tokenizer, args.prompt[:1], 8, use_cache=True),
                                 "generate | 1 row, 8 new tokens")
    with precision.autocast(next(model.parameters()).device):
        _generate(args, model, tokenizer)
    _warn_sampling_options(args)  # after the output: an error, when there is one, stays the only line
    return 0


def _generate(args: argparse.Namespace, model: Any, tokenizer: Any) -> None:
    """The generation of :func:`run` (printed, and written to ``--json``), once the model is loaded."""
    from ...generation import format_trace, generate_text, stream_text, trace_text
    from ...viz.i18n import text as ui_text

    options = _options(args)
    continues = model.config.arch != "encoder-decoder"  # a decoder-only model continues its prompt
    if args.trace:
        if args.do_sample and args.top_k is not None:
            options["sample_top_k"] = options.pop("top_k")
        options.pop("top_k", None)
        records = trace_text(model, tokenizer, args.prompt[0], args.max_new_tokens, args.trace_top_k, **options)
        print(format_trace(records))
        print((args.prompt[0] if continues else "") + tokenizer.decode([r["chosen"] for r in records]))
        result: Any = records
    elif args.stream:
        if continues:
            print(args.prompt[0], end="", flush=True)
        pieces = []
        for piece in stream_text(model, tokenizer, args.prompt[0], args.max_new_tokens, **options):
            pieces.append(piece)
            print(piece, end="", flush=True)
        print()
        result = [{"prompt": args.prompt[0], "text": "".join(pieces)}]
    else:
        texts = generate_text(model, tokenizer, list(args.prompt), args.max_new_tokens, **options)
        result = [{"prompt": args.prompt[i // args.num_return_sequences], "text": text} for i, text in enumerate(texts)]
        for i, row in enumerate(result):
            if len(result) > 1:
                print(f"--- {i + 1}")
            print((row["prompt"] if continues else "") + row["text"])
    if args.json is not None:
        atomic_write(args.json, json.dumps(result, ensure_ascii=False, indent=2) + "\n", inputs=[args.checkpoint],
                     what="--json")
        print(ui_text("cli.written", args.ui_lang, path=args.json), file=sys.stderr)

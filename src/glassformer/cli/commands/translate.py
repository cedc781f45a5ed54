"""``glassformer translate CHECKPOINT [FILE ...]``: translate lines with an encoder-decoder checkpoint."""

import argparse
import sys
from pathlib import Path

from ...io.fileio import Writes, atomic_write, check_output_file
from .precision import add_precision, choose_precision

WRITES = (Writes(("translate", "{s2s}", "{text}", "--max_new_tokens", "2", "--output", "{out}/t.txt"),
                 ("{out}/t.txt",)),)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``translate`` verb to the ``glassformer`` subparsers."""
    parser = sub.add_parser(
        "translate", help="translate a file or standard input line by line, batched (sacreBLEU with --ref)",
        description="Translate one sentence per line, read from FILEs (plain or .gz) or standard input, in "
                    "batches of similar length; one translation per line on standard output (or --output). "
                    "Greedy by default, beam search with --beams N. With --ref, sacreBLEU is printed to "
                    "standard error.",
        epilog="example: glassformer translate out/multi30k_de_en/best test.de --beams 4 --ref test.en")
    parser.add_argument("checkpoint", type=Path, help="checkpoint folder of a seq2seq model (e.g. out/.../best)")
    parser.add_argument("files", nargs="*", type=Path, help="input files; none or '-' reads standard input")
    parser.add_argument("--beams", type=int, default=1, help="beam width (1 = greedy, the default)")
    parser.add_argument("--length_penalty", type=float, default=1.0,
                        help="beam search: score / length**penalty (> 1 favours longer outputs)")
    parser.add_argument("--batch_size", type=int, default=64, help="sentences decoded together")
    parser.add_argument("--max_new_tokens", type=int, default=None,
                        help="longest output in tokens (default: 2 x source length + 10, at most max_len)")
    parser.add_argument("--output", type=Path, default=None, help="write translations here instead of stdout")
    parser.add_argument("--ref", type=Path, default=None, help="reference translations: print sacreBLEU")
    parser.add_argument("--max_memory", default=None,
                        help="memory translation may use (8GB, 512MiB; default: what the machine has free)")
    add_precision(parser)


def run(args: argparse.Namespace) -> int:
    """Translate the input lines and write one translation per line (and sacreBLEU with --ref); returns 0."""
    from ...data import read_lines
    from ...errors import GlassformerError
    from ...generation import bleu, check_max_new_tokens, translate
    from ...generation.api import MAX_LENGTH_PENALTY
    from ...io.budget import check_fits, describe, generation_bytes, parse_size
    from ...io.checks import check_int, check_number
    from ...training import load

    check_int("--beams", args.beams, 1)
    check_number("--length_penalty", args.length_penalty, -MAX_LENGTH_PENALTY, MAX_LENGTH_PENALTY)
    check_int("--batch_size", args.batch_size, 1)
    if args.max_new_tokens is not None:
        check_max_new_tokens(args.max_new_tokens, name="--max_new_tokens")  # before loading the model
    if args.max_memory is not None:
        parse_size(args.max_memory)
    inputs = [f for f in [args.checkpoint, *args.files, args.ref] if f is not None and f != Path("-")]
    if args.output is not None:  # never an input, a folder or a device: refused before any work
        check_output_file(args.output, inputs, "--output")
    model, tokenizer = load(args.checkpoint)
    if not args.files or args.files == [Path("-")]:  # none, or just '-': standard input
        sources = sys.stdin.read().splitlines()
    else:
        sources = [line for path in args.files for line in read_lines(path, "input file")]
    if not sources:
        raise GlassformerError("nothing to translate: the input has no lines")
    rows = min(args.batch_size, len(sources)) * args.beams
    length = model.config.max_len if args.max_new_tokens is None else min(model.config.max_len, args.max_new_tokens)
    check_fits(generation_bytes(model.config, rows, length),
               f"--beams {args.beams} x --batch_size {args.batch_size} ({rows:,} rows of up to {length:,} tokens, "
               f"{describe(model.config)})", args.max_memory)
    sample = sources[:args.batch_size]
    precision = choose_precision(args.precision, model,
                                 lambda: translate(model, tokenizer, sample, batch_size=args.batch_size,
                                                   num_beams=args.beams, max_new_tokens=8),
                                 f"translate | {len(sample)} rows, {args.beams} beams, 8 new tokens")
    with precision.autocast(next(model.parameters()).device):
        hypotheses = translate(model, tokenizer, sources, batch_size=args.batch_size, num_beams=args.beams,
                               length_penalty=args.length_penalty, max_new_tokens=args.max_new_tokens)
    text = "\n".join(hypotheses) + "\n"
    if args.output is not None:
        atomic_write(args.output, text, inputs=inputs, what="--output")
    else:
        sys.stdout.write(text)
    if args.ref is not None:
        print(bleu(hypotheses, read_lines(args.ref, "reference file")), file=sys.stderr)
    return 0

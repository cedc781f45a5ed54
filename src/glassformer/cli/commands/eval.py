"""``glassformer eval CHECKPOINT --data FILE``: loss, perplexity and accuracy of a checkpoint on a file."""

import argparse
import json
import sys
from pathlib import Path

from ...io.fileio import Writes
from .precision import add_precision, choose_precision

WRITES: tuple[Writes, ...] = ()  # prints its scores; writes no file


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``eval`` verb to the ``glassformer`` subparsers."""
    parser = sub.add_parser(
        "eval", help="evaluate a checkpoint on a text file (or parallel files)",
        description="Score a checkpoint on a whole file: loss, perplexity, token accuracy (and bits per character "
                    "for character models). The objective and block size come from the checkpoint's training.json "
                    "unless given.")
    parser.add_argument("checkpoint", type=Path, help="checkpoint folder (e.g. out/best)")
    parser.add_argument("--data", type=Path, help="text file or prepared shards folder (clm, mlm, prefix)")
    parser.add_argument("--src", type=Path, help="source file (seq2seq)")
    parser.add_argument("--tgt", type=Path, help="target file (seq2seq)")
    parser.add_argument("--pairs", type=Path, help=".tsv or .jsonl pairs file (seq2seq)")
    parser.add_argument("--objective", choices=("clm", "mlm", "prefix", "seq2seq"),
                        help="what to score (default: the training one)")
    parser.add_argument("--block_size", type=int, help="window length (default: the training one)")
    parser.add_argument("--batch_size", type=int, default=64, help="windows (or sentence pairs) per batch (default 64)")
    parser.add_argument("--max_batches", type=int, help="stop after this many batches (default: the whole file)")
    parser.add_argument("--max_memory", default=None,
                        help="memory evaluation may use (8GB, 512MiB; default: what the machine has free)")
    add_precision(parser)
    parser.set_defaults(follows_load=True)  # evaluate() follows the load: threads spin


def run(args: argparse.Namespace) -> int:
    """Score ``args.checkpoint`` on the given data and print the metrics as one JSON line; returns 0."""
    import numpy as np

    from ...data import LMBatches, Seq2SeqBatches, encode_files, encode_pairs, iter_pairs
    from ...data.shards import looks_like_tokens, open_shards
    from ...errors import UsageError
    from ...io.budget import check_fits, describe, forward_bytes, parse_size
    from ...io.checks import check_int, is_int
    from ...io.records import finite_or_null
    from ...training import check_model_for, evaluate, load_checkpoint
    from ...training.objectives import OBJECTIVE_ATTN, batch_loss
    from ...viz.i18n import text as ui_text

    if args.max_memory is not None:
        parse_size(args.max_memory)
    checkpoint = load_checkpoint(args.checkpoint)
    model, tokenizer, training = checkpoint.model, checkpoint.tokenizer, checkpoint.training or {}
    objective = args.objective or training.get("objective") or (
        "seq2seq" if model.config.arch == "encoder-decoder" else
        {attn: name for name, attn in OBJECTIVE_ATTN.items()}[model.config.attn])
    check_model_for(objective, model)
    for option, high in (("block_size", model.config.max_len), ("max_batches", None), ("batch_size", None)):
        if getattr(args, option) is not None:  # None: the training block size / the whole file
            check_int(f"--{option}", getattr(args, option), 1, high)
    block_size = args.block_size or training.get("block_size")
    if not is_int(block_size) or not 1 <= block_size <= model.config.max_len:
        block_size = model.config.max_len  # none recorded, edited by hand, or past the model's positions
    check_fits(forward_bytes(model.config, args.batch_size, block_size),
               f"--batch_size {args.batch_size} x --block_size {block_size} ({describe(model.config)})",
               args.max_memory)
    if objective == "seq2seq":
        pairs = encode_pairs(iter_pairs(args.src, args.tgt, args.pairs), tokenizer, block_size)
        batches = Seq2SeqBatches(pairs, pairs, tokenizer.pad_id, 0)
    else:
        if args.data is None:
            raise UsageError(f"objective {objective!r} needs --data FILE")
        if looks_like_tokens(args.data):  # prepared shards: their validation split (else their training one)
            shards = open_shards(args.data, tokenizer.vocab_size, tokenizer.to_dict())
            ids = shards.val if shards.val is not None else shards.train
        else:
            ids = np.asarray(encode_files([args.data], tokenizer))
        batches = LMBatches(objective, ids, ids, min(block_size, len(ids) - 1), seed=0, mask_id=tokenizer.mask_id,
                            vocab_size=tokenizer.vocab_size, special_ids=list(tokenizer.special_tokens.values()),
                            mask_prob=training.get("mask_prob", 0.15))
    first = next(iter(batches.eval_batches(args.batch_size, 1)), None)
    work = (lambda: batch_loss(model.eval(), first)) if first is not None else (lambda: None)
    precision = choose_precision(args.precision, model, work, f"eval | batch {args.batch_size}x{block_size}")
    # labelled by the file scored, not as a validation split: {"data": FILE, "loss", "ppl", "accuracy", ...}
    scored = str(args.pairs or f"{args.src} -> {args.tgt}") if objective == "seq2seq" else str(args.data)
    amount = (ui_text("cli.pairs", args.ui_lang, n=len(pairs)) if objective == "seq2seq"
              else ui_text("cli.tokens", args.ui_lang, n=len(ids)))
    print(ui_text("cli.scoring", args.ui_lang, amount=amount, scored=scored, objective=objective, batch=args.batch_size,
               block=block_size), file=sys.stderr, flush=True)  # a long file takes a while: say what is happening
    metrics = evaluate(model, batches, args.batch_size, args.max_batches, char_level=tokenizer.kind == "char",
                       precision=precision)
    clean = finite_or_null({k.removeprefix("val_"): v for k, v in metrics.items()})
    print(json.dumps({"objective": objective, "precision": precision.name, "data": scored, **clean}, allow_nan=False))
    return 0

"""``glassformer prepare DATA... --tokenizer KIND|FILE --out SHARDS``: a corpus (text, JSON lines, parquet,
Arrow; files, folders, globs) into token shards once, read by ``train --data SHARDS`` (docs/data.md)."""

import argparse
import json
import sys
from pathlib import Path

from ...io.fileio import Writes

WRITES = (Writes(("prepare", "{text}", "--tokenizer", "char", "--out", "{out}"),
                 ("{out}/manifest.json", "{out}/tokenizer.json", "{out}/train_000000.bin", "{out}/progress.json",
                  "{out}/.glassformer.lock")),)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``prepare`` verb to the ``glassformer`` subparsers."""
    parser = sub.add_parser(
        "prepare", help="tokenize a corpus once into token shards that train, eval and sae read memory-mapped",
        description="Tokenize a corpus into token shards (modded-nanogpt's format: a 256-int32 header, then "
                    "uint16 ids, uint32 past 65,536) with a manifest; train --data SHARDS reads them "
                    "memory-mapped. Reads text (.gz, .zst), JSON lines, parquet and Arrow files, folders and globs. "
                    "Interrupted, it resumes at the last whole shard; run again on the same input, it does nothing. "
                    "More: docs/data.md.",
        epilog="example: glassformer prepare corpus/*.jsonl.gz --tokenizer bpe --vocab_size 8192 --out shards")
    parser.add_argument("data", nargs="+", help="corpus files, folders or glob patterns")
    parser.add_argument("--out", type=Path, required=True, help="folder the shards, tokenizer and manifest go to")
    parser.add_argument("--tokenizer", default="bpe",
                        help="char, byte or bpe (trained on the corpus), or a tokenizer.json or checkpoint folder "
                             "(default bpe)")
    parser.add_argument("--vocab_size", type=int, help="the BPE vocabulary's size (bpe only)")
    parser.add_argument("--tokenizer_sample", default="all",
                        help="characters the tokenizer is trained on: all (default) or a size such as 500MB")
    parser.add_argument("--val", nargs="+", default=[], help="validation files (default: every 1/val_fraction-th "
                                                             "document of DATA)")
    parser.add_argument("--val_fraction", type=float, default=0.01,
                        help="share of documents for validation, taken whole (default 0.01)")
    parser.add_argument("--text_field", default="text", help="the JSON field or parquet/Arrow column (default text)")
    parser.add_argument("--shard_tokens", type=int, default=100_000_000, help="tokens per shard (default 100,000,000)")
    parser.add_argument("--format", choices=("shards", "nanogpt"), default="shards",
                        help="shards (modded-nanogpt's) or nanogpt (train.bin and val.bin, raw uint16)")
    parser.add_argument("--json", action="store_true", help="print the manifest's summary as one JSON line")


def run(args: argparse.Namespace) -> int:
    """Prepare as the options say; print what was written (or that it was up to date); 0."""
    import time

    from ...data.prepare import prepare
    from ...io.budget import parse_size

    sample = None if args.tokenizer_sample == "all" else parse_size(args.tokenizer_sample, "--tokenizer_sample")
    started = time.perf_counter()
    manifest = prepare(args.data, args.out, args.tokenizer, vocab_size=args.vocab_size, val=args.val,
                       val_fraction=args.val_fraction, text_field=args.text_field, shard_tokens=args.shard_tokens,
                       fmt=args.format, tokenizer_sample=sample)
    summary = {"out": str(args.out), "up_to_date": bool(manifest.get("up_to_date")),
               "documents": manifest["documents"], "tokens": manifest["tokens"],
               "shards": {"train": len(manifest["train"]), "val": len(manifest["val"])},
               "vocab_size": manifest["tokenizer"]["vocab_size"], "wall_s": round(time.perf_counter() - started, 2)}
    if args.json:
        print(json.dumps(summary))
    elif summary["up_to_date"]:
        print(f"{args.out} is up to date: the same input and settings were prepared there; nothing to do")
    else:
        docs, tokens = manifest["documents"], manifest["tokens"]
        print(f"{docs['train']:,} + {docs['val']:,} documents -> {tokens['train']:,} training and {tokens['val']:,} "
              f"validation tokens in {summary['shards']['train']} + {summary['shards']['val']} shards "
              f"({summary['vocab_size']:,}-id tokenizer), {summary['wall_s']:,.1f} s")
        print(f"train on them: glassformer train --data {args.out} ...", file=sys.stderr)
    return 0

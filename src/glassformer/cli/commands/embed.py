"""``glassformer embed``: sentence embeddings (mean pooling, L2 norm) from an encoder, or their similarities."""

import argparse
import json
from pathlib import Path

from ...io.fileio import Writes

WRITES: tuple[Writes, ...] = ()  # prints its vectors; writes no file

EPILOG = """examples:
  glassformer embed --model path/to/all-MiniLM-L6-v2 "A cat sits." "A kitten is sitting."
  glassformer embed --model path/to/all-MiniLM-L6-v2 --similarity "A cat sits." "Stocks fell." "Ein Hund."

--model is a Hugging Face folder (read without transformers) or a glassformer checkpoint of an
encoder (attn="bidirectional"). Without --similarity each text prints as one JSON line."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``embed`` verb to the ``glassformer`` subparsers."""
    parser = sub.add_parser(
        "embed", help="print sentence embeddings or their cosine similarities",
        description="Encode each TEXT with an encoder, pool its last hidden states over the real tokens "
                    "(the sentence-transformers recipe) and print the vectors or their similarity matrix.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("texts", nargs="+", metavar="TEXT", help="the sentences")
    parser.add_argument("--model", type=Path, required=True, help="a Hugging Face folder or glassformer checkpoint")
    parser.add_argument("--similarity", action="store_true", help="print the cosine similarity matrix instead")
    parser.add_argument("--pooling", choices=("mean", "cls"), default="mean",
                        help="mean over real tokens (default) or the first token's vector")
    parser.add_argument("--no_normalize", action="store_true", help="do not L2-normalise the vectors")
    parser.add_argument("--digits", type=int, default=6, help="decimals printed")
    parser.add_argument("--max_memory", default=None,
                        help="memory embedding may use (8GB, 512MiB; default: what the machine has free)")


def run(args: argparse.Namespace) -> int:
    """Print one JSON line per text (its vector) or the cosine similarity matrix; returns 0."""
    import torch.nn.functional as F

    from ...errors import GlassformerError, UsageError
    from ...generation import sentence_embeddings
    from ...io.budget import check_fits, check_similarity_fits, describe, forward_bytes, parse_size
    from ...io.checks import check_int
    from . import load_model_folder

    check_int("--digits", args.digits, 0, 16)
    empty = [i + 1 for i, text in enumerate(args.texts) if not text]
    if empty:
        raise UsageError(f"TEXT {empty[0]} is empty; give a sentence to embed")
    if args.max_memory is not None:
        parse_size(args.max_memory)
    if args.similarity:  # the N x N matrix, before the model is even read
        check_similarity_fits(len(args.texts), args.max_memory)
    model, tokenizer = load_model_folder(args.model)
    if model.config.arch != "lm" or model.config.attn != "bidirectional":
        raise GlassformerError(f"embed needs an encoder (arch='lm', attn='bidirectional'); {str(args.model)!r} "
                               f"has arch={model.config.arch!r}, attn={model.config.attn!r}")
    longest = min(max(len(text) for text in args.texts) + 2, model.config.max_len)  # tokens <= characters + 2
    check_fits(forward_bytes(model.config, min(32, len(args.texts)), longest)  # 32 texts a forward pass
               + len(args.texts) * model.config.d_model * 4,
               f"{len(args.texts):,} texts of up to {longest:,} tokens ({describe(model.config)})", args.max_memory)
    vectors = sentence_embeddings(model, tokenizer, args.texts, pooling=args.pooling,
                                  normalize=not args.no_normalize)
    if not args.similarity:
        for text, vector in zip(args.texts, vectors.tolist(), strict=True):
            print(json.dumps({"text": text, "embedding": [round(v, args.digits) for v in vector]},
                             ensure_ascii=False))
        return 0
    unit = F.normalize(vectors, dim=-1)
    width = len(str(len(args.texts) - 1))
    print(" " * width + "  " + "  ".join(f"{i:>{args.digits + 3}}" for i in range(len(args.texts))))
    for i, row in enumerate((unit @ unit.T).tolist()):
        print(f"{i:>{width}}  " + "  ".join(f"{s:>{args.digits + 3}.{args.digits}f}" for s in row))
    for i, text in enumerate(args.texts):
        print(f"{i:>{width}}: {text}")
    return 0

"""``glassformer convert``: a Hugging Face model folder <-> a glassformer checkpoint folder."""

import argparse
from pathlib import Path

from ...errors import GlassformerError, MissingFileError
from ...io.fileio import Writes, check_not_source, check_replaceable

WRITES = (Writes(("convert", "{ck}", "{out}/hf"), ("{out}/hf/config.json", "{out}/hf/model.safetensors")),)

EPILOG = """examples:
  glassformer convert path/to/all-MiniLM-L6-v2 runs/minilm        # Hugging Face -> glassformer
  glassformer convert runs/char-lm exported/char-lm-hf           # glassformer -> Hugging Face

The direction follows SRC: a folder whose config.json has "model_type" is a Hugging Face folder;
otherwise it is a glassformer checkpoint. Supported families: GPT-2, Llama, BERT, BART (docs/interop.md)."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``convert`` verb to the ``glassformer`` subparsers."""
    parser = sub.add_parser(
        "convert", help="convert a Hugging Face model folder to a glassformer checkpoint, or back",
        description="Convert between a Hugging Face model folder (config.json, model.safetensors, tokenizer "
                    "files) and a glassformer checkpoint folder (model.safetensors, config.json, "
                    "tokenizer.json). Needs no transformers.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path, help="the folder to read")
    parser.add_argument("dst", type=Path, help="the folder to write (replaced only if glassformer wrote it)")


def run(args: argparse.Namespace) -> int:
    """Convert ``args.src`` into ``args.dst`` (direction from what SRC is); print a one-line summary; 0."""
    from ...interop.hf_dir import is_hf_dir, save_hf_dir
    from ...models import count_params
    from ...training.checkpoint import save_checkpoint
    from . import load_model_folder

    if not args.src.is_dir():
        raise MissingFileError(f"{str(args.src)!r} is not a folder")
    # Before reading anything: never the source or a folder above it, never a path glassformer did not write.
    check_not_source(args.dst, [args.src], "dst")
    check_replaceable(args.dst, what="dst")
    model, tokenizer = load_model_folder(args.src)  # a glassformer checkpoint needs a tokenizer
    if is_hf_dir(args.src):
        if tokenizer.vocab_size > model.config.vocab_size:  # smaller is fine (a padded vocabulary): load agrees
            raise GlassformerError(f"{str(args.src)!r}: its tokenizer has {tokenizer.vocab_size} ids but the model's "
                                   f"vocab_size is {model.config.vocab_size}; ids beyond it would have no embedding")
        save_checkpoint(args.dst, model, tokenizer)
        what = "Hugging Face folder -> glassformer checkpoint"
    else:
        save_hf_dir(model, tokenizer, args.dst)
        what = "glassformer checkpoint -> Hugging Face folder"
    c = model.config
    layers = f"{c.n_layers} layers" if c.arch == "lm" else f"{c.n_enc}+{c.n_dec} layers"
    print(f"{what}: {args.src} -> {args.dst} ({c.arch}, {layers}, d={c.d_model}, "
          f"{count_params(model) / 1e6:.1f}M parameters)")
    return 0

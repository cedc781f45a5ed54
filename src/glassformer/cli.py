"""The ``glassformer`` command line: ``glassformer VERB [options]``; ``--help`` on every verb.

Each verb lives in ``glassformer/commands/<verb>.py`` with ``register(subparsers)``, which adds its
parser and sets ``func(args) -> int``. Expected failures (a :class:`~glassformer.errors.GlassformerError`,
bad input, missing files) print one line ``glassformer: error: ...`` and exit with status 2, without a
traceback. The commands never import this module; they raise glassformer's own errors.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import GlassformerError

# Verbs in the order --help lists them; each names a module in glassformer.commands.
VERBS = ("demo", "train", "eval", "sample", "generate", "translate", "inspect", "convert", "embed", "bench",
         "recipe")


def build_parser() -> argparse.ArgumentParser:
    """The ``glassformer`` parser with one subparser per verb of :data:`VERBS`."""
    parser = argparse.ArgumentParser(
        prog="glassformer", description="Transformers you can see through: train, generate, inspect.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb in VERBS:
        importlib.import_module(f"glassformer.commands.{verb.replace('-', '_')}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``glassformer VERB ...`` (``argv`` defaults to ``sys.argv[1:]``); returns the exit status.

    Verbs that declare ``overrides`` (train, recipe) receive the words argparse did not know, the
    ``--key value`` pairs, in ``args.overrides``; any other verb rejects them.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not hasattr(args, "overrides"):  # only verbs that declare `overrides` take --key value pairs
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("glassformer: interrupted", file=sys.stderr)
        return 130
    except (GlassformerError, ValueError, TypeError, FileNotFoundError, IsADirectoryError, UnicodeDecodeError,
            PermissionError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"glassformer: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

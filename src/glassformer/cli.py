"""The ``glassformer`` command line: ``glassformer VERB [options]``; ``--help`` on every verb.

Each verb lives in ``glassformer/commands/<verb>.py`` with ``register(subparsers)``, which adds its
parser and sets ``func(args) -> int``. Expected failures (bad input, missing files) print one line
``glassformer: error: ...`` and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Verbs in the order --help lists them; each names a module in glassformer.commands.
VERBS = ("demo", "train", "eval", "sample", "generate", "translate", "inspect", "convert", "embed", "bench")


class CLIError(Exception):
    """An error the user can fix; printed as one line."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="glassformer", description="Transformers you can see through: train, generate, inspect.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb in VERBS:
        importlib.import_module(f"glassformer.commands.{verb.replace('-', '_')}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
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
    except (CLIError, ValueError, TypeError, FileNotFoundError, IsADirectoryError, UnicodeDecodeError,
            PermissionError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"glassformer: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

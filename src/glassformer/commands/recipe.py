"""``glassformer recipe CONFIG.yaml [--data-dir DIR] [--download] [--key value ...]``: run one recipe.

A recipe (``configs/*.yaml`` with a ``recipe:`` section) trains and evaluates on a public corpus and
writes ``out_dir/results.json``; see :mod:`glassformer.recipes` and docs/results.md.
``python -m glassformer.recipes ...`` is the same command.
"""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``recipe`` verb to the ``glassformer`` subparsers (it takes ``--key value`` overrides)."""
    parser = sub.add_parser(
        "recipe", help="train and evaluate a recipe (configs/*.yaml) on its corpus",
        description="Train and evaluate a recipe (configs/*.yaml); writes out_dir/results.json and prints it. "
                    "Any training key can be overridden as --key value, model fields as --model.KEY value, "
                    "recipe options as --recipe.KEY value.",
        epilog="example: glassformer recipe configs/shakespeare_char_fast.yaml --data-dir ../shared/data")
    parser.add_argument("config", help="recipe YAML file, e.g. configs/shakespeare_char_fast.yaml")
    parser.add_argument("--data-dir", default=None,
                        help="corpus folder (default: $GLASSFORMER_DATA or ./data); see docs/results.md")
    parser.add_argument("--download", action="store_true", help="fetch a missing corpus from its public URL")
    parser.set_defaults(func=run, overrides=[])


def run(args: argparse.Namespace) -> int:
    """Load the recipe with its overrides, run it and print its results (without config and recipe); 0."""
    from ..recipes import load_recipe, run_recipe
    from .overrides import overrides_from_argv

    recipe = load_recipe(args.config, overrides_from_argv(args.overrides), args.data_dir, args.download)
    results = run_recipe(recipe, args.data_dir, args.download)
    shown = {k: v for k, v in results.items() if k not in ("config", "recipe")}
    print(json.dumps(shown, indent=2, ensure_ascii=False))
    return 0

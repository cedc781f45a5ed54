"""``python -m glassformer.recipes RECIPE.yaml``: train and evaluate one recipe, print its results."""

from __future__ import annotations

import argparse
import json
import sys

from .run import load_recipe, run_recipe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m glassformer.recipes",
        description="Train and evaluate a recipe (configs/*.yaml); writes out_dir/results.json. Any training key "
                    "can be overridden as --key value, model fields as --model.KEY value, recipe options as "
                    "--recipe.KEY value.")
    parser.add_argument("recipe", help="recipe YAML file, e.g. configs/shakespeare_char_fast.yaml")
    parser.add_argument("--data-dir", default=None,
                        help="corpus folder (default: $GLASSFORMER_DATA or ./data); see docs/results.md")
    parser.add_argument("--download", action="store_true", help="fetch a missing corpus from its public URL")
    args, overrides = parser.parse_known_args(argv)
    try:
        recipe = load_recipe(args.recipe, overrides, args.data_dir, args.download)
        results = run_recipe(recipe, args.data_dir, args.download)
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"glassformer.recipes: error: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    shown = {k: v for k, v in results.items() if k not in ("config", "recipe")}
    print(json.dumps(shown, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``glassformer recipe NAME|CONFIG.yaml [--key value ...]``: train and evaluate one recipe (a YAML file with
a ``recipe:`` section, shipped or the user's) and write ``out_dir/results.json``; see :mod:`glassformer.recipes`."""

import argparse
import json
from pathlib import Path

from ...io.fileio import Writes
from .overrides import overrides_from_argv

WRITES = (Writes(("recipe", "tang_poems_char", "--out_dir", "{out}", "--recipe.source", "{tang}", "--max_steps", "2"),
                 ("{out}/results.json", "{out}/tang300.txt", "{out}/metrics.jsonl")),)


SHIPPED = Path(__file__).resolve().parents[2] / "recipes" / "configs"  # read here: importing recipes loads torch


def _shipped() -> list[str]:
    """The shipped recipes' names, for --help."""
    return sorted(p.stem for p in SHIPPED.glob("*.yaml") if "\nrecipe:" in "\n" + p.read_text(encoding="utf-8"))


def _recipe_file(name: str) -> Path | None:
    """The YAML file ``recipes.find_recipe`` will read for ``name`` (None: none, which it reports)."""
    path = Path(name)
    if path.is_file():
        return path
    shipped = SHIPPED / f"{path.stem}.yaml"
    return shipped if path.suffix in ("", ".yaml") and shipped.is_file() else None


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``recipe`` verb to the ``glassformer`` subparsers (it takes ``--key value`` overrides)."""
    parser = sub.add_parser(
        "recipe", help="train and evaluate a shipped recipe (corpus, training, evaluation) by NAME or YAML",
        description="Train and evaluate a recipe; writes out_dir/results.json and prints a short summary.\n"
                    "Any training key can be overridden as --key value, model fields as --model.KEY value,\n"
                    "recipe options as --recipe.KEY value (glassformer train --help lists the keys).",
        epilog="examples:\n  glassformer recipe shakespeare_char_fast --max_steps 200\n"
               "  glassformer recipe configs/multi30k_de_en.yaml --data_dir ../shared/data\n\n"
               "shipped recipes: " + ", ".join(_shipped()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", metavar="RECIPE",
                        help="a shipped recipe's NAME (e.g. shakespeare_char_fast) or a recipe YAML file")
    parser.add_argument("--data_dir", default=None,
                        help="corpus folder (default: $GLASSFORMER_DATA or ./data); see docs/results.md")
    parser.add_argument("--download", action="store_true", help="fetch a missing corpus from its public URL")
    parser.add_argument("--json", action="store_true",
                        help="print the results as JSON (without config and recipe) instead of the readable lines")
    parser.set_defaults(overrides=[], precheck=precheck)


def precheck(args: argparse.Namespace) -> None:
    """Run by ``cli.main`` before torch loads: every override key is one of ``train --help`` (else UsageError)."""
    from ...errors import GlassformerError
    from ...io.loaders import load_yaml
    from .train import check_config_keys, count_follows_load

    pairs = overrides_from_argv(args.overrides)
    check_config_keys(None, pairs)
    file = _recipe_file(args.config)
    try:  # how its threads wait (cli.main); a file that does not read is reported by the run, as before
        args.follows_load = file is not None and count_follows_load(load_yaml(file, "recipe"), pairs)
    except (GlassformerError, OSError):
        args.follows_load = False


def run(args: argparse.Namespace) -> int:
    """Run the recipe with its overrides (keys checked by :func:`precheck`) and print a short summary of its
    results (``--json``: the results without config and recipe); 0."""
    from ...recipes import find_recipe, load_recipe, run_recipe
    from ...recipes.summary import recipe_summary
    from ...training.report import use_language

    use_language(args.ui_lang)  # the trainer's lines in the command line's language
    recipe = load_recipe(find_recipe(args.config), overrides_from_argv(args.overrides), args.data_dir, args.download)
    results = run_recipe(recipe, args.data_dir, args.download)
    if args.json:
        shown = {k: v for k, v in results.items() if k not in ("config", "recipe")}
        print(json.dumps(shown, indent=2, ensure_ascii=False))
    else:
        print("\n".join(recipe_summary(results, recipe.train.out_dir)))
    return 0

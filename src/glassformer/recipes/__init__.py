"""Recipes: real tasks end to end (corpus -> training -> evaluation), one YAML file in configs/ each.

    glassformer recipe NAME|configs/NAME.yaml [--data_dir DIR] [--download] [--key value]

The package ships the recipes (``shipped_recipes()``) and the tinyshakespeare corpus. ``corpora``
finds and fetches the public corpora the recipes read. See docs/results.md for what each recipe
measures and what it reached.
"""

from .run import TASKS, Recipe, find_recipe, load_recipe, run_recipe, shipped_recipes
from .sequence_task import SequenceTask, exact_match

__all__ = ["TASKS", "Recipe", "find_recipe", "load_recipe", "run_recipe", "shipped_recipes", "SequenceTask",
           "exact_match"]

"""Recipes: real tasks end to end (corpus -> training -> evaluation), one YAML file in configs/ each
(``glassformer recipe NAME``); ``corpora`` finds and fetches the corpora they read. See docs/results.md."""

from .run import TASKS, Recipe, find_recipe, load_recipe, run_recipe, shipped_recipes
from .sequence_task import SequenceTask, exact_match

__all__ = ["TASKS", "Recipe", "find_recipe", "load_recipe", "run_recipe", "shipped_recipes", "SequenceTask",
           "exact_match"]

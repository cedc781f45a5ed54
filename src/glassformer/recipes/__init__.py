"""Recipes: real tasks end to end (corpus -> training -> evaluation), one YAML file in configs/ each.

    glassformer recipe configs/shakespeare_char_fast.yaml [--data-dir DIR] [--download] [--key value]

(``python -m glassformer.recipes ...`` is the same command.) ``corpora`` finds and fetches the public
corpora the recipes read. See docs/results.md for what each recipe measures and what it reached.
"""

from .run import TASKS, Recipe, load_recipe, run_recipe
from .sequence_task import SequenceTask, exact_match

__all__ = ["TASKS", "Recipe", "load_recipe", "run_recipe", "SequenceTask", "exact_match"]

"""Recipes: real tasks end to end (corpus -> training -> evaluation), one YAML file in configs/ each.

    python -m glassformer.recipes configs/shakespeare_char_fast.yaml [--data-dir DIR] [--download] [--key value]

See docs/results.md for what each recipe measures and what it reached.
"""

from .run import TASKS, Recipe, load_recipe, run_recipe
from .sequence_task import SequenceTask, exact_match
from .translation import bleu, translate

__all__ = ["TASKS", "Recipe", "load_recipe", "run_recipe", "SequenceTask", "exact_match", "bleu", "translate"]

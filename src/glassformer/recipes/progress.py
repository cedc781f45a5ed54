"""A recipe's progress lines: what it is doing now, on standard error (run.py, induction.py and sae.py say it)."""

import os
import sys


def say(text: str, show: bool = True) -> None:
    """Tell the user on standard error what the recipe is doing now (``show``: the run's ``progress``); on rank 0."""
    if show and os.environ.get("RANK", "0") == "0":
        print(f"recipe: {text}", file=sys.stderr, flush=True)

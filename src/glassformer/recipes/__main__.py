"""``python -m glassformer.recipes ...`` is ``glassformer recipe ...`` (glassformer.commands.recipe)."""
import sys

from glassformer.cli import main

if __name__ == "__main__":
    sys.exit(main(["recipe", *sys.argv[1:]]))

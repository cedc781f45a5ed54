"""One module per CLI verb (see glassformer.cli), plus ``overrides``: the ``--key value`` words of train/recipe.

This is the only layer that reads argv; the modules below it take already-parsed values.
"""

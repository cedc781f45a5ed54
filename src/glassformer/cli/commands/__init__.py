"""One module per CLI verb (see glassformer.cli), plus ``overrides``: the only layer that reads argv."""

"""One module per CLI verb; see glassformer.cli."""

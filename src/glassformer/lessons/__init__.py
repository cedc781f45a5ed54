"""The lessons' experiments as functions that return their findings (examples/ prints them)."""

"""The lessons' experiments as functions that return their findings: ``tiny_char`` (lesson 12), ``lesson2``."""

"""Speed policy, outside the model's math: what generation, training, the bench and the commands ask.

- :mod:`.kernel_choice`: choices measured once per machine (CPU, torch, threads) and remembered;
- :mod:`.linear`: the few-row product of decoding, by the route that measured faster here;
- :mod:`.decode`: ``few_row_route(model)``, that route applied to a model from outside while it generates;
- :mod:`.precision`: float32, bfloat16 or float16 (autocast), or "auto" by detection and measurement;
- :mod:`.device`: ``pick_device``, the one choice of a run's device;
- :mod:`.threads`: the thread count and OpenMP wait policy from the load measured at import (before torch loads).

This file imports nothing: ``threads`` runs before torch is imported.
"""

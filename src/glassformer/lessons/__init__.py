"""The lessons' experiments as functions that return their findings (``glassformer demo`` and examples/ print them).

    tiny_char   lesson 12: the tiny character LM, trained, traced, generated from and reloaded
    lesson2     lesson 2: attention against torch.nn, why divide by sqrt(d), order blindness, positions
"""

"""The lessons' experiments as functions that return their findings: ``tiny_char`` (lesson 12), ``lesson2``.

Like every library call they leave the thread count alone: a script that runs them asks for the speed policy
in one line, ``glassformer.runtime.tune()`` (threads spinning against a busy core made the tiny LM lesson 23x
slower on a 2-core laptop); ``glassformer demo`` asks for it itself.
"""

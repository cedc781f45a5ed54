"""Speed policy outside the model's math: kernel choices measured per machine, the few-row decoding route and
the weights in huge pages that generation asks for (:mod:`.decode`, :mod:`.pages`), precision, the device and the
thread count. Applied only when asked: :func:`tune` (the ``glassformer``
command asks for it; a library call alone changes no thread count, variable or file). This file imports the
standard library only (:mod:`.threads` runs before torch is imported)."""

from .policy import SpeedPolicy, tune

__all__ = ["SpeedPolicy", "tune"]

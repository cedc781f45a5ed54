"""Speed policy outside the model's math: kernel choices measured per machine, the few-row decoding route,
precision, the device and the thread count (:mod:`.threads` runs before torch is imported: this file imports
nothing)."""

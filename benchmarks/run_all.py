"""The whole benchmark suite (training, generation, transparency, compile): ``glassformer bench``.

Arguments are passed on (``--quick``, ``--only train,gen``, ``--precision float32``, ``--nanogpt
path/to/nanoGPT/model.py``, ``--device cuda``...).
See docs/benchmarks.md.
"""

import sys

from glassformer.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))

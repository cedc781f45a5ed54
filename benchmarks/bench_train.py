"""Benchmark training throughput, peak memory and MFU against Hugging Face GPT-2 and nanoGPT.

Same as ``glassformer bench --only train``: every contender in float32 and in bfloat16 autocast
(``--precision``), MFU against the matmul peak of each precision shown in the header. Extra arguments
are passed on (e.g. ``--quick``, ``--sizes small``, ``--precision float32``, ``--nanogpt
path/to/nanoGPT/model.py`` to add nanoGPT's model and a "vs nanogpt" column, ``--out FILE``).
See docs/benchmarks.md.
"""

import sys

from glassformer.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--only", "train", *sys.argv[1:]]))

"""Benchmark training throughput, peak memory and MFU against Hugging Face GPT-2.

Same as ``glassformer bench --only train``; extra arguments are passed on (e.g. ``--quick``,
``--sizes small``, ``--out FILE``). See docs/benchmarks.md.
"""

import sys

from glassformer.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--only", "train", *sys.argv[1:]]))

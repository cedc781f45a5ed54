"""Benchmark the cost of return_attn=True against the fused forward.

Same as ``glassformer bench --only attn``; extra arguments are passed on (e.g. ``--quick``,
``--sizes small``, ``--out FILE``). See docs/benchmarks.md.
"""

import sys

from glassformer.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--only", "attn", *sys.argv[1:]]))

"""Benchmark torch.compile's first-call cost and steady-state gain (training and decoding).

Same as ``glassformer bench --only compile``; extra arguments are passed on (e.g. ``--quick``,
``--sizes small``, ``--out FILE``). See docs/benchmarks.md.
"""

import sys

from glassformer.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--only", "compile", *sys.argv[1:]]))

"""Benchmarks: training and generation speed against Hugging Face GPT-2, MFU, transparency, compile.

    run_suite(parts, sizes, quick=...)   -> a JSON-ready dict (``glassformer bench`` writes it)
    format_table(results)                -> Markdown tables of it

The parts live in ``train``, ``generate``, ``transparency``; ``timing`` has the paired-timing
and peak-memory helpers. See docs/benchmarks.md.
"""

from .runner import PARTS, format_table, run_suite
from .setups import SIZES, Size
from .timing import Timing, paired, paired_ratio, peak_memory

__all__ = ["PARTS", "SIZES", "Size", "Timing", "format_table", "paired", "paired_ratio",
           "peak_memory", "run_suite"]

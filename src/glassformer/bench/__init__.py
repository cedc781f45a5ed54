"""Benchmarks (``glassformer bench``, docs/benchmarks.md): training and generation speed against Hugging Face
GPT-2 and nanoGPT, MFU, the cost of transparency and compile, each in every precision asked."""

from .runner import PARTS, format_table, run_suite
from .setups import PRECISIONS, SIZES, Size
from .timing import Timing, paired, paired_ratio, peak_memory

__all__ = ["PARTS", "PRECISIONS", "SIZES", "Size", "Timing", "format_table", "paired", "paired_ratio",
           "peak_memory", "run_suite"]

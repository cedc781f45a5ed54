"""Benchmarks: training and generation speed against Hugging Face GPT-2 and nanoGPT, MFU, transparency,
compile; every row in each precision asked (float32, or bfloat16/float16 autocast on float32 weights).

    run_suite(parts, sizes, quick=..., precisions=..., nanogpt=...) -> a JSON-ready dict (``glassformer bench``)
    format_table(results)                                           -> a header naming the machine, Markdown tables

The parts live in ``train``, ``generate``, ``transparency``, ``scaling``; ``setups`` has the sizes and
precisions, ``nanogpt`` loads the user's nanoGPT model.py, ``timing`` has the paired-timing and
peak-memory helpers. See docs/benchmarks.md.
"""

from .runner import PARTS, format_table, run_suite
from .setups import PRECISIONS, SIZES, Size
from .timing import Timing, paired, paired_ratio, peak_memory

__all__ = ["PARTS", "PRECISIONS", "SIZES", "Size", "Timing", "format_table", "paired", "paired_ratio",
           "peak_memory", "run_suite"]

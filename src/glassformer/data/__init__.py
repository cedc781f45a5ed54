"""Data: text -> token ids (memory-mapped cache), windows, MLM masks, prefix-LM labels, seq2seq pairs,
and the one padder (``pad_rows``)."""

from .batches import OBJECTIVES, LMBatches, Seq2SeqBatches, take_rows
from .corpus import encode_files, split_ids, token_dtype
from .mlm import IGNORE, mask_tokens
from .padding import pad_rows
from .prefix import prefix_lm_labels
from .seq2seq import EncodedPairs, collate_pairs, encode_pairs, iter_pairs, length_batches, read_pairs
from .text import check_file, iter_text, read_lines, read_text
from .windows import check_length, consecutive_windows, random_windows, step_generator

__all__ = [
    "OBJECTIVES", "LMBatches", "Seq2SeqBatches", "take_rows", "encode_files", "split_ids", "token_dtype",
    "IGNORE", "mask_tokens", "pad_rows", "prefix_lm_labels", "collate_pairs", "encode_pairs", "length_batches",
    "read_pairs", "iter_pairs", "EncodedPairs", "check_file", "iter_text", "read_lines", "read_text", "check_length",
    "consecutive_windows", "random_windows", "step_generator",
]

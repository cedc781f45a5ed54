"""Data: corpus formats and token shards (prepare once, memory-mapped), text -> token ids (memory-mapped
cache), windows, MLM masks, prefix-LM labels, seq2seq pairs, and the one padder (``pad_rows``).

Names are imported on first use: ``glassformer prepare`` reads and writes tokens without loading torch."""

import importlib
from typing import Any

_WHERE = {
    "batches": ("OBJECTIVES", "LMBatches", "Seq2SeqBatches", "take_rows"),
    "corpus": ("encode_files", "split_ids", "token_dtype"),
    "mlm": ("IGNORE", "mask_tokens"),
    "padding": ("pad_rows",),
    "prefix": ("prefix_lm_labels",),
    "seq2seq": ("EncodedPairs", "collate_pairs", "encode_pairs", "iter_pairs", "length_batches", "read_pairs"),
    "text": ("check_file", "iter_text", "read_lines", "read_text"),
    "windows": ("check_length", "consecutive_windows", "random_windows", "step_generator"),
    "shards": ("open_shards", "TokenView"),
    "sources": ("list_sources", "iter_pieces"),  # and data.prepare.prepare (a module of that name)
}
_MODULE = {name: module for module, names in _WHERE.items() for name in names}
__all__ = list(_MODULE)


def __getattr__(name: str) -> Any:
    if name not in _MODULE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_MODULE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

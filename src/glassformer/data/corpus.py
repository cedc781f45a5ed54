"""Text files -> one array of token ids, cached on disk as a memory-mapped file.

A 100 MB corpus is encoded piece by piece straight into the cache file (uint16 when the vocabulary
fits, else uint32), and then read back with ``np.memmap``: the operating system pages it in as
windows are sampled, so it never lives in RAM twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import GlassformerError
from ..tokenizers import Tokenizer
from .text import check_file, iter_text


def token_dtype(vocab_size: int) -> type[np.unsignedinteger]:
    """The smallest unsigned type holding every id: uint16 up to 65,536 ids, else uint32."""
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


def _cache_key(paths: Sequence[Path], tokenizer: Tokenizer) -> str:
    digest = hashlib.sha256(json.dumps(tokenizer.to_dict(), sort_keys=True, ensure_ascii=False).encode())
    for path in paths:
        stat = path.stat()
        digest.update(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:20]


def encode_files(paths: Sequence[str | Path], tokenizer: Tokenizer,
                 cache_dir: str | Path | None = None) -> np.ndarray:
    """Token ids of the files' texts, one after the other.

    Args:
        paths: UTF-8 text files (plain or .gz).
        tokenizer: encodes each piece (no special tokens are added).
        cache_dir: when given, the ids are written to ``cache_dir/tokens-<key>.bin`` (the key covers
            the tokenizer and each file's path, size and modification time) and returned as a
            read-only ``np.memmap``; a later call with the same inputs just maps the file.
    Returns:
        (N,) uint16/uint32 array.
    """
    paths = [check_file(p) for p in paths]
    if not paths:
        raise GlassformerError("no corpus files given")
    dtype = token_dtype(tokenizer.vocab_size)
    if cache_dir is None:
        pieces = [tokenizer.encode_to_array(text).astype(dtype) for path in paths for text in iter_text(path)]
        return np.concatenate(pieces)
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"tokens-{_cache_key(paths, tokenizer)}.{np.dtype(dtype).name}.bin"
    if not target.exists():
        handle, temp = tempfile.mkstemp(dir=cache_dir, suffix=".partial")
        try:
            with os.fdopen(handle, "wb") as out:
                for path in paths:
                    for text in iter_text(path):
                        out.write(tokenizer.encode_to_array(text).astype(dtype).tobytes())
            os.replace(temp, target)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
    return np.memmap(target, dtype=dtype, mode="r")


def split_ids(ids: np.ndarray, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(train, val): the first ``1 - val_fraction`` of the ids and the rest (views, no copy).

    This is nanoGPT's split (first 90% / last 10% for ``val_fraction=0.1``).
    """
    if not 0.0 <= val_fraction < 1.0:
        raise GlassformerError(f"val_fraction must be in [0, 1), got {val_fraction}")
    cut = int(len(ids) * (1.0 - val_fraction))
    return ids[:cut], ids[cut:]

"""Text files -> one array of token ids, encoded piece by piece into a cache file (uint16 or uint32) and
read back with ``np.memmap``, so a large corpus never lives in RAM twice."""

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ..errors import BadFileError, GlassformerError, NotOursError
from ..io.fileio import atomic_write
from ..io.progress import Heartbeat
from ..tokenizers import Tokenizer
from .text import check_file, iter_text

ENCODE_CHARS = 1 << 20  # characters encoded at a time: a tokenizer's intermediate lists stay tens of MB


def token_dtype(vocab_size: int) -> type[np.unsignedinteger]:
    """The smallest unsigned type holding every id: uint16 up to 65,536 ids, else uint32."""
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


def _cache_key(paths: Sequence[Path], tokenizer: Tokenizer) -> str:
    digest = hashlib.sha256(json.dumps(tokenizer.to_dict(), sort_keys=True, ensure_ascii=False).encode())
    for path in paths:
        stat = path.stat()
        digest.update(os.fsencode(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"))  # any path name
    return digest.hexdigest()[:20]


def encode_files(paths: Sequence[str | Path], tokenizer: Tokenizer, cache_dir: str | Path | None = None) -> np.ndarray:
    """(N,) uint16/uint32 token ids (no special tokens) of UTF-8 files (plain, .gz or .zst), one after the other;
    a long encoding prints its progress to stderr every ~10 s.

    With ``cache_dir`` the ids are written to ``cache_dir/tokens-<key>.bin`` (the key covers the tokenizer
    and each file's path, size and modification time) and returned as a read-only ``np.memmap``; a later
    call with the same inputs just maps the file."""
    paths = [check_file(p) for p in paths]
    if not paths:
        raise GlassformerError("no corpus files given")
    dtype = token_dtype(tokenizer.vocab_size)
    if cache_dir is None:
        return np.concatenate(list(_encoded(paths, tokenizer, dtype, "encoding the corpus")))
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"tokens-{_cache_key(paths, tokenizer)}.{np.dtype(dtype).name}.bin"
    if not target.exists() and not target.is_symlink():
        chunks = (ids.tobytes() for ids in _encoded(paths, tokenizer, dtype, "building the token cache"))
        try:
            atomic_write(target, chunks, what="token cache")  # fsynced before its rename
        except NotOursError:  # absent a moment ago: another process of this run (torchrun) wrote it first
            if not target.is_file() or target.is_symlink():
                raise
    return map_tokens(target, dtype, tokenizer.vocab_size)


def _encoded(paths: Sequence[Path], tokenizer: Tokenizer, dtype: type[np.unsignedinteger],
             what: str) -> Iterator[np.ndarray]:
    """The files' texts as ids, piece by piece (:data:`ENCODE_CHARS` characters each), with a heartbeat."""
    compressed = any(path.suffix.lower() in (".gz", ".zst") for path in paths)
    total = None if compressed else sum(path.stat().st_size for path in paths)
    tokens = 0
    with Heartbeat(what, total=total, unit="bytes") as heartbeat:
        for path in paths:
            for text in iter_text(path, ENCODE_CHARS):
                ids = tokenizer.encode_to_array(text).astype(dtype)
                tokens += len(ids)
                heartbeat.update(advance=len(text.encode("utf-8")), note=f"{tokens:,} tokens")
                yield ids


def map_tokens(path: Path, dtype: type[np.unsignedinteger], vocab_size: int) -> np.ndarray:
    """``path`` (a token cache) as a read-only memmap, verified first (a regular file, a whole number of
    ``dtype`` values, at least one, every id below ``vocab_size``); a BadFileError naming the file if not."""
    size = np.dtype(dtype).itemsize
    if path.is_symlink() or not path.is_file():
        raise BadFileError(f"token cache {str(path)!r} is not a regular file; remove it to encode the corpus again")
    length = path.stat().st_size
    if length == 0 or length % size:
        raise BadFileError(f"token cache {str(path)!r} holds {length:,} bytes, not a whole number of "
                           f"{np.dtype(dtype).name} ids; remove it to encode the corpus again")
    ids = np.memmap(path, dtype=dtype, mode="r")
    step = 1 << 24  # ids read in chunks, never all at once
    if any(int(ids[start:start + step].max()) >= vocab_size for start in range(0, len(ids), step)):
        raise BadFileError(f"token cache {str(path)!r} holds ids >= the vocabulary's {vocab_size}; remove it to "
                           "encode the corpus again")
    return ids


def split_ids(ids: np.ndarray, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(train, val): the first ``1 - val_fraction`` of the ids and the rest (views; nanoGPT's split)."""
    if not 0.0 <= val_fraction < 1.0:
        raise GlassformerError(f"val_fraction must be in [0, 1), got {val_fraction}")
    cut = int(len(ids) * (1.0 - val_fraction))
    return ids[:cut], ids[cut:]

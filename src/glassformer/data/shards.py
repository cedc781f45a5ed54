"""Token shards: modded-nanogpt's file format, glassformer's manifest, and reading them memory-mapped.

A shard is 256 little-endian int32 (``[0]`` the magic 20240520, ``[1]`` the version, ``[2]`` the token count,
the rest 0) followed by the tokens: version 1 holds uint16 ids (modded-nanogpt's, byte for byte), version 2
uint32 ids (glassformer's, for vocabularies past 65,536 ids; modded-nanogpt refuses it rather than misread it).
A shards folder holds ``train_NNNNNN.bin`` and ``val_NNNNNN.bin`` shards, the ``tokenizer.json`` that made them
and ``manifest.json`` (documents, tokens, shards with sizes and hashes, source files, the tokenizer's hash)."""

import hashlib
import json
import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BadFileError, GlassformerError, MissingFileError

MAGIC = 20240520  # modded-nanogpt's
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
VERSIONS = {1: np.dtype("<u2"), 2: np.dtype("<u4")}  # version -> token dtype
RAW = np.dtype("<u2")  # nanoGPT's headerless train.bin / val.bin
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "glassformer-shards"  # manifest["format"]: what recognises the file as glassformer's
TOKENIZER_FILE = "tokenizer.json"
SCAN_TOKENS = 1 << 22  # ids read at a time when a shard is checked (file reads, not mapped pages)
# A memory map's pages are let go of (MADV_DONTNEED) every this many reads of it: the kernel maps whole large
# folios (up to ~0.5 MB here) around each read, so at most ~RELEASE_EVERY of them stay resident, whatever the
# corpus size. Cost, pages faulted in again: a batch of 12 windows of 64 took 0.46 ms instead of 0.23 (0.75
# releasing after every read), next to a training step of tens of ms (AMD EPYC Zen 4, a 60 MB shard)
RELEASE_EVERY = 32


def version_for(vocab_size: int) -> int:
    """The shard version for a vocabulary: 1 (uint16) up to 65,536 ids, else 2 (uint32)."""
    return 1 if vocab_size <= 1 << 16 else 2


def header(count: int, version: int) -> bytes:
    """The 1,024-byte header of a shard of ``count`` tokens (below 2**31: ``prepare`` checked --shard_tokens)."""
    ints = np.zeros(HEADER_INTS, dtype="<i4")
    ints[:3] = MAGIC, version, count
    return ints.tobytes()


def shard_bytes(ids: np.ndarray, version: int) -> list[bytes]:
    """A shard's content (header, tokens) for ``ids`` (N,), as the chunks :func:`glassformer.io.fileio.atomic_write`
    writes."""
    return [header(len(ids), version), np.ascontiguousarray(ids, dtype=VERSIONS[version]).tobytes()]


def read_header(path: Path) -> tuple[int, int]:
    """(version, token count) of the shard ``path``, checked against its size; a BadFileError naming the file
    when it is not a shard (wrong magic, unknown version) or is truncated."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(HEADER_BYTES)
    except IsADirectoryError:
        raise BadFileError(f"token shard {str(path)!r} is a folder, not a shard file") from None
    if len(raw) < HEADER_BYTES:
        raise BadFileError(f"token shard {str(path)!r} holds {len(raw)} bytes, less than its {HEADER_BYTES}-byte "
                           "header: truncated, or not a shard")
    magic, version, count = (int(v) for v in np.frombuffer(raw, dtype="<i4", count=3))
    if magic != MAGIC:
        raise BadFileError(f"token shard {str(path)!r} starts with {magic}, not the magic number {MAGIC}: not a "
                           "modded-nanogpt/glassformer shard")
    if version not in VERSIONS:
        raise BadFileError(f"token shard {str(path)!r} has version {version}; known: 1 (uint16), 2 (uint32)")
    size, want = path.stat().st_size, HEADER_BYTES + count * VERSIONS[version].itemsize
    if size != want or count < 0:
        raise BadFileError(f"token shard {str(path)!r} holds {size:,} bytes; its header promises {count:,} tokens "
                           f"({want:,} bytes): truncated or changed")
    return version, count


def is_shard(path: str | Path) -> bool:
    """Whether ``path`` is a regular file that starts with the shard magic number."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(4)
    except OSError:
        return False
    return len(raw) == 4 and int(np.frombuffer(raw, dtype="<i4")[0]) == MAGIC


def file_hash(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, read 16 MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def tokenizer_hash(tokenizer_dict: dict[str, Any]) -> str:
    """The SHA-256 of a tokenizer's JSON form (keys sorted): what a manifest and a checkpoint compare."""
    text = json.dumps(tokenizer_dict, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


Part = tuple[np.ndarray, "mmap.mmap | None"]  # ids, the memory map under them


class TokenView:
    """Token files read as one array: ``len(view)``, ``view[i]`` and ``view[a:b]`` (an (b - a,) int array read
    from the memory-mapped files, crossing file ends). Nothing is loaded until sliced, and the pages slices
    read are let go of every :data:`RELEASE_EVERY` reads: resident memory does not grow with the corpus."""

    def __init__(self, parts: Sequence[np.ndarray | Part]):
        parts = [p if isinstance(p, tuple) else (p, None) for p in parts]
        self.parts = [p for p in parts if len(p[0])]
        self.ends = np.cumsum([len(p[0]) for p in self.parts], dtype=np.int64)
        self.dtype = self.parts[0][0].dtype if self.parts else np.dtype("<u2")
        self.reads = [0] * len(self.parts)

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                raise GlassformerError("token views are sliced with step 1")
            return self._range(start, max(start, stop))
        index = range(len(self))[key]  # an IndexError out of range, negatives counted from the end
        return self._range(index, index + 1)[0]

    def _range(self, start: int, stop: int) -> np.ndarray:
        pieces, part = [], int(np.searchsorted(self.ends, start, side="right"))
        while start < stop:
            first = int(self.ends[part - 1]) if part else 0
            take = min(stop, int(self.ends[part]))
            ids, memory = self.parts[part]
            pieces.append(np.array(ids[start - first:take - first]))
            self.reads[part] += 1
            if memory is not None and self.reads[part] % RELEASE_EVERY == 0 and hasattr(mmap, "MADV_DONTNEED"):
                memory.madvise(mmap.MADV_DONTNEED)  # the pages read so far leave this process (not the page cache)
            start, part = take, part + 1
        if len(pieces) == 1:
            return pieces[0]
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=self.dtype)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self._range(0, len(self))
        return whole if dtype is None else whole.astype(dtype)


def map_shard(path: Path, vocab_size: int | None = None) -> Part:
    """The tokens of the shard ``path`` memory-mapped (:data:`Part`), its header checked (and, given
    ``vocab_size``, every id below it)."""
    version, count = read_header(path)
    return mapped(path, VERSIONS[version], HEADER_BYTES, count, vocab_size)


def map_raw(path: Path, vocab_size: int | None = None) -> Part:
    """A headerless token file (nanoGPT's ``train.bin``: raw uint16) memory-mapped (:data:`Part`)."""
    size = path.stat().st_size
    if size == 0 or size % RAW.itemsize:
        raise BadFileError(f"token file {str(path)!r} holds {size:,} bytes, not a whole number of "
                           f"{RAW.name} ids: truncated, or not a token file")
    return mapped(path, RAW, 0, size // RAW.itemsize, vocab_size)


def mapped(path: Path, dtype: np.dtype, offset: int, count: int, vocab_size: int | None = None) -> Part:
    """``count`` ids of ``dtype`` from byte ``offset`` of ``path``: a read-only array over a memory map advised
    for random access (no read-ahead), and the map. Given ``vocab_size``, the ids are read first in
    chunks (file reads, not mapped pages): a BadFileError names the file and the first id >= ``vocab_size``."""
    with open(path, "rb") as handle:
        if vocab_size is not None:
            handle.seek(offset)
            for start in range(0, count, SCAN_TOKENS):
                chunk = np.fromfile(handle, dtype=dtype, count=min(SCAN_TOKENS, count - start))
                if len(chunk) and int(chunk.max()) >= vocab_size:
                    at = start + int(np.argmax(chunk >= vocab_size))
                    raise BadFileError(f"token file {str(path)!r} holds id {int(chunk[at - start])} at token "
                                       f"{at:,}, past the tokenizer's vocabulary of {vocab_size:,} ids")
        if count == 0:
            return np.zeros(0, dtype=dtype), None
        memory = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mmap, "MADV_RANDOM"):
        memory.madvise(mmap.MADV_RANDOM)
    return np.frombuffer(memory, dtype=dtype, count=count, offset=offset), memory


@dataclass
class Shards:
    """A shards folder opened for reading: ``train`` and ``val`` token views (val None when empty), the
    folder, its manifest (None for token files without one) and the tokenizer file beside them (or None)."""

    folder: Path
    train: TokenView
    val: TokenView | None
    manifest: dict[str, Any] | None
    tokenizer_file: Path | None


def _manifest_value(manifest: dict[str, Any], key: str, kind: type, path: Path) -> Any:
    value = manifest.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadFileError(f"manifest {str(path)!r}: {key!r} must be a {kind.__name__}, got {value!r}")
    return value


def looks_like_tokens(path: str | Path) -> bool:
    """Whether ``path`` names token data :func:`open_shards` reads: a folder with a glassformer manifest, shard
    files or nanoGPT's ``train.bin``, or one ``.bin`` file."""
    path = Path(path)
    if path.is_dir():
        return (path / MANIFEST).is_file() or (path / "train.bin").is_file() or any(
            is_shard(p) for p in sorted(path.glob("*.bin"))[:1])
    return path.suffix == ".bin" and path.is_file()


def open_shards(path: str | Path, vocab_size: int | None = None, tokenizer_dict: dict[str, Any] | None = None,
                check: bool = True) -> Shards:
    """Open token data for reading, every file checked before use (``check``: also every id below
    ``vocab_size``, read in chunks, not mapped). ``path``: a folder prepared by ``glassformer prepare`` (its
    manifest's shards, sizes and tokenizer hash are verified; ``tokenizer_dict`` given: it must be the
    manifest's tokenizer), a folder of modded-nanogpt shards (``*train*.bin`` / ``*val*.bin``) or nanoGPT's
    ``train.bin``/``val.bin`` (raw uint16), or one ``.bin`` file (a shard, else raw uint16)."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"token data {str(path)!r} does not exist")
    if path.is_dir() and (path / MANIFEST).exists():
        return _open_manifest(path, vocab_size, tokenizer_dict, check)
    folder = path if path.is_dir() else path.parent
    if path.is_file():
        train, val, read = [path], [], map_shard if is_shard(path) else map_raw
    elif (path / "train.bin").is_file() and not is_shard(path / "train.bin"):  # nanoGPT's prepare.py output
        train, val, read = [path / "train.bin"], [p for p in [path / "val.bin"] if p.is_file()], map_raw
    else:
        files = sorted(path.glob("*.bin"))
        train, val, read = [p for p in files if "val" not in p.name], [p for p in files if "val" in p.name], map_shard
        if not train:
            raise MissingFileError(f"token folder {str(path)!r} holds no manifest.json and no training .bin shards")
    limit, beside = vocab_size if check else None, folder / TOKENIZER_FILE
    val_view = TokenView([read(p, limit) for p in val]) if val else None
    return Shards(folder, TokenView([read(p, limit) for p in train]), val_view, None,
                  beside if beside.is_file() else None)


def _open_manifest(folder: Path, vocab_size: int | None, tokenizer_dict: dict[str, Any] | None,
                   check: bool) -> Shards:
    from ..io.loaders import load_json

    where = folder / MANIFEST
    manifest = load_json(where, "shards manifest")
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise BadFileError(f"{str(where)!r} is not a glassformer shards manifest (no \"format\": "
                           f"\"{MANIFEST_FORMAT}\")")
    tokenizer = _manifest_value(manifest, "tokenizer", dict, where)
    want_hash = tokenizer.get("sha256")
    file = folder / TOKENIZER_FILE
    if not file.is_file():
        raise MissingFileError(f"shards folder {str(folder)!r} has no {TOKENIZER_FILE}; its manifest names one")
    if file_hash(file) != tokenizer.get("file_sha256"):
        raise BadFileError(f"{str(file)!r} is not the tokenizer the manifest {str(where)!r} names (its hash differs)")
    if tokenizer_dict is not None and tokenizer_hash(tokenizer_dict) != want_hash:
        raise BadFileError(f"shards {str(folder)!r} were made by another tokenizer (manifest hash "
                           f"{str(want_hash)[:12]}...) than the model's ({tokenizer_hash(tokenizer_dict)[:12]}...)")
    vocab = _manifest_value(tokenizer, "vocab_size", int, where)
    if vocab_size is not None and vocab_size != vocab:
        raise BadFileError(f"shards {str(folder)!r} hold ids of a {vocab:,}-id vocabulary; the model has "
                           f"{vocab_size:,}")
    views, raw = {}, manifest.get("shard_format") == "nanogpt"
    for split in ("train", "val"):
        maps = []
        for entry in _manifest_value(manifest, split, list, where):
            name = entry.get("file") if isinstance(entry, dict) else None
            if not isinstance(name, str) or "/" in name or os.sep in name or name.startswith("."):
                raise BadFileError(f"manifest {str(where)!r}: a {split} shard entry {entry!r} names no shard file")
            shard = folder / name
            if not shard.is_file():
                raise MissingFileError(f"shard {str(shard)!r} named by the manifest {str(where)!r} does not exist")
            count = shard.stat().st_size // RAW.itemsize if raw else read_header(shard)[1]
            if count != entry.get("tokens") or shard.stat().st_size != entry.get("bytes"):
                raise BadFileError(f"shard {str(shard)!r} holds {count:,} tokens; the manifest {str(where)!r} says "
                                   f"{entry.get('tokens')!r}: the manifest or the shard was changed")
            maps.append((map_raw if raw else map_shard)(shard, vocab if check else None))
        views[split] = TokenView(maps)
    if not len(views["train"]):
        raise BadFileError(f"shards {str(folder)!r} hold no training tokens")
    return Shards(folder, views["train"], views["val"] if len(views["val"]) else None, manifest, file)

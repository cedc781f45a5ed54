"""``prepare``: a corpus -> token shards, once. The tokenizer is trained on a stream of the corpus (all of it,
or a bounded sample), documents are encoded in batches (Hugging Face ``tokenizers`` encodes a batch on every
core) with an end-of-text token after each, and tokens go straight to disk: memory holds one batch of text,
never a shard. Document d goes to validation when ``floor((d + 1) f) > floor(d f)`` (f the validation
fraction: every 1/f-th document, whole), or every document of ``val`` sources when given.

Interrupted, a run resumes at the last whole shard: ``progress.json`` records, after each shard, where every
split's next shard starts (a piece of the corpus and a token in it; pieces come in a fixed order), and the
rerun re-reads the corpus up to there without encoding it. Run again on the same input (same sizes and
modification times) and settings, it does nothing."""

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..errors import BadFileError, GlassformerError
from ..io.checks import check_int, check_number
from ..io.fileio import AtomicFile, atomic_write, claim_outputs, remove_path, run_lock
from ..io.progress import Heartbeat
from ..tokenizers import Tokenizer, make_tokenizer
from ..validate import check_choice
from . import shards
from .shards import MAGIC, MANIFEST, TOKENIZER_FILE, VERSIONS, file_hash, header, tokenizer_hash
from .sources import Source, iter_pieces, list_sources

PROGRESS = "progress.json"
SHARD_TOKENS = 100_000_000  # modded-nanogpt's shard size
BATCH_CHARS = 1 << 20  # characters of text encoded in one batch (1 MiB: every core busy, memory small)
FORMATS = ("shards", "nanogpt")
EOT = "eos"  # the special token that ends every document (GPT-2's <|endoftext|> plays both parts)
_TEMP = re.compile(r"\.(train|val)(_\d{6})?\.bin\.tmp-\d+-[0-9a-f]{8}")


def shard_name(split: str, index: int, fmt: str) -> str:
    """``train_000003.bin`` (shards) or ``train.bin`` (nanogpt)."""
    return f"{split}.bin" if fmt == "nanogpt" else f"{split}_{index:06d}.bin"


class _Writer:
    """One split's shards, written as tokens arrive: a temporary file per shard (header, then ids), its
    header completed, fsynced and renamed when full (``limit`` tokens) or at the end. ``start``: (piece,
    token) where the open shard's first token comes from, what :data:`PROGRESS` records."""

    def __init__(self, folder: Path, split: str, fmt: str, version: int, limit: int,
                 entries: list[dict[str, Any]], start: tuple[int, int], inputs: Sequence[Path]):
        self.folder, self.split, self.fmt, self.version, self.limit = folder, split, fmt, version, limit
        self.entries, self.index, self.start, self.inputs = list(entries), len(entries), start, inputs
        self.dtype = VERSIONS[version] if fmt == "shards" else np.dtype("<u2")
        self.file: AtomicFile | None = None
        self.count = 0

    def _target(self) -> Path:
        return self.folder / shard_name(self.split, self.index, self.fmt)

    def add(self, ids: np.ndarray, piece: int, offset: int) -> Iterator[None]:
        """Write ``ids`` (the tokens of ``piece`` from token ``offset``); yields after each shard it completes."""
        while len(ids):
            if self.file is None:
                self.file = AtomicFile(self._target(), self.inputs, "token shard")
                self.count = 0
                if self.fmt == "shards":
                    self.file.write(header(0, self.version))
            take = min(len(ids), self.limit - self.count)
            self.file.write(np.ascontiguousarray(ids[:take], dtype=self.dtype).tobytes())
            self.count += take
            ids, offset = ids[take:], offset + take
            if self.count == self.limit:
                self.close()
                self.start = (piece, offset)
                yield

    def close(self) -> None:
        """Finish the open shard (if any): header, fsync, rename; its entry joins :attr:`entries`."""
        if self.file is None:
            return
        file, self.file = self.file, None
        if self.fmt == "shards":
            file.write(header(self.count, self.version), at=0)
        target = file.commit()
        self.entries.append({"file": target.name, "tokens": self.count, "bytes": target.stat().st_size,
                             "sha256": file_hash(target)})
        self.index += 1

    def discard(self) -> None:
        """Remove the open shard's temporary file (after an error)."""
        if self.file is not None:
            self.file.discard()
            self.file = None


def _fingerprint(sources: Sequence[Source]) -> list[dict[str, Any]]:
    stats = [(source, source.path.stat()) for source in sources]
    return [{"path": str(source.path.resolve()), "kind": source.kind, "bytes": info.st_size,
             "mtime_ns": info.st_mtime_ns} for source, info in stats]


def _check_unchanged(sources: Sequence[Source], fingerprint: list[dict[str, Any]]) -> None:
    for source, seen in zip(sources, fingerprint):
        try:
            info = source.path.stat()
        except OSError:
            raise BadFileError(f"corpus file {str(source.path)!r} disappeared during preparation") from None
        if (info.st_size, info.st_mtime_ns) != (seen["bytes"], seen["mtime_ns"]):
            raise BadFileError(f"corpus file {str(source.path)!r} changed during preparation ({seen['bytes']:,} -> "
                               f"{info.st_size:,} bytes); the shards written so far stay valid: run prepare again "
                               "once it stops changing")


def encode_pieces(tokenizer: Tokenizer, texts: Sequence[str]) -> list[np.ndarray]:
    """Each text's ids (int64, no specials), as ``tokenizer.encode_to_array`` gives them; a BPE encodes all the
    texts' lines in one batch (every core)."""
    if tokenizer.kind != "bpe":
        return [tokenizer.encode_to_array(t) for t in texts]
    hf = tokenizer.hf
    lines = [text.splitlines(keepends=True) for text in texts]
    encode = getattr(hf, "encode_batch_fast", hf.encode_batch)
    encodings = encode([line for text_lines in lines for line in text_lines], add_special_tokens=False)
    out, start = [], 0
    for text_lines in lines:  # each text's ids: those of its lines
        stop = start + len(text_lines)
        out.append(np.fromiter((i for e in encodings[start:stop] for i in e.ids), dtype=np.int64))
        start = stop
    return out


def _sample(pieces: Iterator[tuple[str, bool]], chars: int | None) -> Iterator[str]:
    seen = 0
    for text, _ in pieces:
        yield text
        seen += len(text)
        if chars is not None and seen >= chars:
            return


def prepare(data: str | Sequence[str], out: str | Path, tokenizer: str | Tokenizer = "bpe", *,
            vocab_size: int | None = None, specials: Sequence[str] = (), val: Sequence[str] = (),
            val_fraction: float = 0.0, text_field: str = "text",
            shard_tokens: int = SHARD_TOKENS, fmt: str = "shards", tokenizer_sample: int | None = None,
            on_shard: Callable[[str, int], None] | None = None) -> dict[str, Any]:
    """Prepare ``data`` into ``out``; returns the manifest (also ``out/manifest.json``).

    Args:
        tokenizer: "char", "byte", "bpe" (trained here, with ``vocab_size``, ``specials`` and the end-of-text
            token "eos"), or a Tokenizer, a tokenizer file or a checkpoint folder (used as it is).
        val: validation sources (else every 1/``val_fraction``-th document of ``data``, whole).
        text_field: the JSON field, parquet or Arrow column holding the text.
        shard_tokens: tokens per shard; fmt: "shards" (modded-nanogpt's) or "nanogpt" (raw uint16 files).
        tokenizer_sample: characters the tokenizer is trained on (None: all of them).
        on_shard: called as ``on_shard(split, index)`` after each shard is on disk and recorded.
    """
    check_choice("--format", fmt, FORMATS)
    check_number("--val_fraction", val_fraction, 0.0, 1.0, high_open=True)
    check_int("--shard_tokens", shard_tokens, 1, (1 << 31) - 1)
    check_int("--tokenizer_sample", tokenizer_sample, 1, allow_none=True)
    if not isinstance(text_field, str) or not text_field.strip():
        raise GlassformerError(f"--text_field must name a field or column, got {text_field!r}")
    sources = list_sources(data)  # a missing file first
    val_sources = list_sources(val) if val else []
    if tokenizer == "bpe" and vocab_size is None:
        raise GlassformerError("--tokenizer bpe needs --vocab_size (e.g. 8192)")
    check_int("--vocab_size", vocab_size, 1, allow_none=True)
    folder = Path(out)
    inputs = [s.path for s in sources + val_sources]
    given = tokenizer if isinstance(tokenizer, Tokenizer) else None  # a tokenizer used as it is (not trained)
    if given is None and tokenizer not in ("char", "byte", "bpe"):
        path = Path(tokenizer)
        if not path.exists():
            raise GlassformerError(f"--tokenizer must be char, byte, bpe, a tokenizer.json or a checkpoint folder, "
                                   f"got {tokenizer!r}")
        given = Tokenizer.load(path / TOKENIZER_FILE if path.is_dir() else path)
    named = f"sha256:{tokenizer_hash(given.to_dict())}" if given is not None else str(tokenizer)
    specials = list(dict.fromkeys([*specials, EOT])) if given is None else []
    settings = {"tokenizer": named, "vocab_size": vocab_size, "specials": specials,
                "val_fraction": 0.0 if val else val_fraction, "text_field": text_field, "shard_tokens": shard_tokens,
                "format": fmt, "tokenizer_sample": tokenizer_sample}
    fingerprint = _fingerprint(sources) + _fingerprint(val_sources)
    old = _previous(folder / MANIFEST)
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError, KeyError):
        if (old.get("format") == shards.MANIFEST_FORMAT and _same_settings(old, settings, given)
                and [{k: s[k] for k in ("path", "kind", "bytes", "mtime_ns")} for s in old.get("sources", [])]
                == fingerprint and _outputs_intact(folder, old)):
            return {**old, "up_to_date": True}
    _drop_raw_files(folder, old)
    claim_outputs([folder / MANIFEST, folder / TOKENIZER_FILE, folder / PROGRESS, folder / shard_name("train", 0, fmt),
                   folder / shard_name("val", 0, fmt)], inputs, "prepared data")
    folder.mkdir(parents=True, exist_ok=True)
    with run_lock(folder):
        return _prepare(folder, sources, val_sources, inputs, given or named, settings, fingerprint, on_shard)


def _previous(path: Path) -> dict[str, Any]:
    """The JSON object glassformer wrote at ``path`` earlier, or {} when there is none: absent, unreadable, not a
    JSON object, or not a regular file (a FIFO, a device or a link is never opened)."""
    from ..io.loaders import load_json

    if path.is_symlink() or not path.is_file():
        return {}
    try:
        data = load_json(path, "prepared data file")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _drop_raw_files(folder: Path, old: dict[str, Any]) -> None:
    """Remove the ``train.bin``/``val.bin`` an earlier ``--format nanogpt`` preparation wrote there: raw ids carry
    no mark, so the proof is the ``old`` manifest's SHA-256 of each (a file that differs is left alone)."""
    if old.get("format") != shards.MANIFEST_FORMAT or old.get("shard_format") != "nanogpt":
        return
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError, KeyError):
        for entry in old["train"] + old["val"]:
            path = folder / entry["file"]
            if entry["file"] in ("train.bin", "val.bin") and path.is_file() and not path.is_symlink() \
                    and file_hash(path) == entry["sha256"]:
                remove_path(path)


def _same_settings(old: dict[str, Any], settings: dict[str, Any], given: Tokenizer | None) -> bool:
    """Whether an earlier manifest was made with ``settings``; with a ``given`` tokenizer (a resumed run's),
    the tokenizer it names must be that one, however it was made then."""
    if given is None:
        return old.get("settings") == settings
    made = {"tokenizer", "vocab_size", "specials", "tokenizer_sample"}  # how a tokenizer was made, not which
    return old.get("tokenizer", {}).get("sha256") == tokenizer_hash(given.to_dict()) and all(
        old.get("settings", {}).get(key) == value for key, value in settings.items() if key not in made)


def _outputs_intact(folder: Path, manifest: dict[str, Any]) -> bool:
    entries = manifest.get("train", []) + manifest.get("val", [])
    return all((folder / e["file"]).is_file() and (folder / e["file"]).stat().st_size == e["bytes"] for e in entries)


def _prepare(folder: Path, sources: list[Source], val_sources: list[Source], inputs: list[Path], spec: str | Tokenizer,
             settings: dict[str, Any], fingerprint: list[dict[str, Any]],
             on_shard: Callable[[str, int], None] | None) -> dict[str, Any]:
    progress = _read_progress(folder, settings, fingerprint)
    old_files = _listed_files(folder)  # shards of an earlier preparation: those the new one does not name go
    for name in os.listdir(folder):  # temporary shards of an interrupted run
        if _TEMP.fullmatch(name):
            remove_path(folder / name)
    text_field, fmt = settings["text_field"], settings["format"]
    tokenizer_file = folder / TOKENIZER_FILE
    if progress is not None:
        tok = Tokenizer.load(tokenizer_file)
    else:  # the given tokenizer, or one trained on (a sample of) the corpus
        sample = _sample(iter_pieces(sources + val_sources, text_field), settings["tokenizer_sample"])  # (lazy)
        tok = spec if isinstance(spec, Tokenizer) else make_tokenizer(spec, sample, settings["specials"],
                                                                      settings["vocab_size"])
        atomic_write(tokenizer_file, json.dumps(tok.to_dict(), ensure_ascii=False), inputs=inputs, what="tokenizer")
    if fmt == "nanogpt" and tok.vocab_size > 1 << 16:
        raise GlassformerError(f"--format nanogpt writes uint16 ids; the tokenizer has {tok.vocab_size:,} ids "
                               "(use --format shards, which writes uint32 past 65,536)")
    eot = tok.special_tokens.get(EOT)
    version = shards.version_for(tok.vocab_size)
    limit = settings["shard_tokens"] if fmt == "shards" else (1 << 62)
    state = progress or {"train": [], "val": [], "start": {"train": [0, 0], "val": [0, 0]}}
    writers = {split: _Writer(folder, split, fmt, version, limit, state[split], tuple(state["start"][split]), inputs)
               for split in ("train", "val")}
    documents = {"train": 0, "val": 0}
    tokens = {split: sum(e["tokens"] for e in writers[split].entries) for split in writers}
    total = sum(f["bytes"] for f in fingerprint) if all(
        s.kind in ("text", "json") and s.path.suffix.lower() not in (".gz", ".zst")
        for s in sources + val_sources) else None

    def record(split: str) -> None:
        _check_unchanged(sources + val_sources, fingerprint)
        state = {"format": "glassformer-prepare-progress", "settings": settings, "sources": fingerprint,
                 "tokenizer_sha256": file_hash(tokenizer_file),
                 "train": writers["train"].entries, "val": writers["val"].entries,
                 "start": {s: list(w.start) for s, w in writers.items()}}
        atomic_write(folder / PROGRESS, json.dumps(state, indent=1), inputs=inputs, what="prepare progress")
        if on_shard is not None:
            on_shard(split, writers[split].index - 1)

    def stream() -> Iterator[tuple[int, str, str, bool]]:
        """(piece number, split, text, last) of every piece."""
        number, document = 0, 0
        for group, fraction in ((sources, settings["val_fraction"]), (val_sources, None)):
            for text, last in iter_pieces(group, text_field):
                val = fraction is None or int((document + 1) * fraction) > int(document * fraction)  # see above
                split = "val" if val else "train"
                yield number, split, text, last
                number += 1
                if last:
                    documents[split] += 1
                    document += 1 if fraction is not None else 0

    try:
        with Heartbeat("preparing shards", total=total, unit="bytes") as beat, beat.beating():
            batch: list[tuple[int, str, str, bool]] = []
            size = 0

            def flush() -> None:
                ids = encode_pieces(tok, [text for _, _, text, _ in batch])
                for (number, split, _, last), piece in zip(batch, ids):
                    if last and eot is not None:
                        piece = np.append(piece, eot)
                    writer = writers[split]
                    skip = writer.start[1] if number == writer.start[0] else 0
                    for _ in writer.add(piece[skip:], number, skip):
                        record(split)
                    tokens[split] += len(piece) - skip
                batch.clear()

            for number, split, text, last in stream():
                nbytes = len(text.encode("utf-8"))
                if number >= writers[split].start[0]:  # (pieces before it are in the split's shards already)
                    batch.append((number, split, text, last))
                    size += len(text)
                if size >= BATCH_CHARS:
                    flush()
                    size = 0
                done = tokens["train"] + tokens["val"]
                elapsed = max(beat.clock() - beat.started, 1e-9)
                rate, eta = done / elapsed, ""
                if total and beat.done:
                    eta = f", ETA {elapsed * max(total - beat.done - nbytes, 0) / (beat.done + nbytes):,.0f} s"
                beat.update(advance=nbytes, note=f"{done:,} tokens, {rate:,.0f} tokens/s{eta}")
            flush()
            for writer in writers.values():
                writer.close()
    except BaseException:
        for writer in writers.values():
            writer.discard()
        raise
    _check_unchanged(sources + val_sources, fingerprint)
    if not tokens["train"]:
        raise GlassformerError(f"the corpus {[str(s.path) for s in sources]} gives no training tokens")
    manifest = {
        "format": shards.MANIFEST_FORMAT, "version": 1, "glassformer": __version__,
        "shard_format": "nanogpt" if fmt == "nanogpt" else "modded-nanogpt",
        "token_dtype": "uint16" if fmt == "nanogpt" else VERSIONS[version].name,
        "header": None if fmt == "nanogpt" else {"bytes": shards.HEADER_BYTES, "magic": MAGIC, "version": version},
        "documents": documents, "tokens": tokens,
        "train": writers["train"].entries, "val": writers["val"].entries,
        "sources": [{**f, "sha256": file_hash(s.path), "split": "val" if s in val_sources else "train"}
                    for s, f in zip(sources + val_sources, fingerprint)],
        "tokenizer": {"file": TOKENIZER_FILE, "kind": tok.kind, "vocab_size": tok.vocab_size,
                      "sha256": tokenizer_hash(tok.to_dict()), "file_sha256": file_hash(tokenizer_file), "eot": eot},
        "settings": settings,
    }
    atomic_write(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n", inputs=inputs, what="shards manifest")
    remove_path(folder / PROGRESS)  # (nothing if absent)
    kept = {e["file"] for e in manifest["train"] + manifest["val"]}
    for name in sorted(old_files - kept):
        if shards.is_shard(folder / name) or fmt == "nanogpt":
            remove_path(folder / name)
    return manifest


def _listed_files(folder: Path) -> set[str]:
    """The shard names an earlier manifest or progress file in ``folder`` lists (plain names only)."""
    names: set[str] = set()
    for file in (folder / MANIFEST, folder / PROGRESS):
        with contextlib.suppress(TypeError, AttributeError, KeyError):
            listed = _previous(file)
            names |= {e["file"] for split in ("train", "val") for e in listed[split]
                      if re.fullmatch(r"(train|val)(_\d{6})?\.bin", e["file"])}
    return names


def _read_progress(folder: Path, settings: dict[str, Any], fingerprint: list[dict[str, Any]]) -> dict | None:
    """The progress of an interrupted run on the same input and settings whose shards are intact, else None."""
    state = _previous(folder / PROGRESS)
    try:
        if (state.get("settings") != settings or state.get("sources") != fingerprint
                or state.get("tokenizer_sha256") != file_hash(folder / TOKENIZER_FILE)):
            return None
        intact = all(file_hash(folder / e["file"]) == e["sha256"] for e in state["train"] + state["val"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return state if intact else None

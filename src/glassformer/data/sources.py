"""A corpus as the user names it (files, folders, globs; text, JSON lines, parquet, Arrow / Hugging Face
``save_to_disk`` folders) -> its documents, streamed as text pieces, with one-line errors naming the file and
the line or row.

Each document comes as one or more pieces ``(text, last)``: a text file is one document read in pieces of
about :data:`PIECE_CHARS` characters (cut after a newline), a JSON line or a parquet/Arrow row is one
document of one piece. The pieces of a corpus always come in the same order, so a piece's number is a
position :mod:`glassformer.data.prepare` can resume at."""

import glob
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadFileError, MissingFileError, UsageError
from ..io.checks import first_line
from ..io.loaders import parse_json
from .text import iter_text, open_binary

PIECE_CHARS = 1 << 20  # a long text file is encoded this many characters at a time
KINDS = {**dict.fromkeys((".txt", ".text", ".md", ".rst", ".csv", ".tsv", ".html", ".xml", ".tex", ""), "text"),
         **dict.fromkeys((".jsonl", ".json", ".ndjson"), "json"), ".parquet": "parquet", ".arrow": "arrow",
         ".bin": "tokens"}  # a file's suffix (inside .gz/.zst) -> how it is read
COMPRESSED = {".gz", ".zst"}
ARROW_MARKERS = ("state.json", "dataset_info.json", "dataset_dict.json")  # what save_to_disk writes
MAX_JSON_ARRAY_BYTES = 1 << 28  # a .json file holding one array is parsed whole: up to 256 MiB
MAX_LINE_BYTES = 1 << 28  # one JSON line (one document) is read whole: up to 256 MiB


@dataclass(frozen=True)
class Source:
    """One input file and how to read it: ``kind`` "text", "json", "parquet" or "arrow"."""

    path: Path
    kind: str


def _kind(path: Path) -> str | None:
    """How ``path`` is read, by its suffixes (``.jsonl.gz`` is JSON lines, compressed; a suffix that is no word,
    as in ``notes.2024``, is text); None: an unknown suffix, skipped in a folder."""
    suffixes = [s.lower() for s in path.suffixes[-2:]]
    if suffixes and suffixes[-1] in COMPRESSED:
        suffixes.pop()
    inner = suffixes[-1] if suffixes else ""
    return KINDS.get(inner, None if inner[1:].isalpha() else "text")


def _arrow_folder(folder: Path) -> list[Path] | None:
    """The Arrow files of a Hugging Face ``save_to_disk`` folder in their order (a DatasetDict: its "train"
    split, else every split), or None when ``folder`` is not one."""
    from ..io.loaders import load_json

    if (folder / "dataset_dict.json").is_file():
        splits = load_json(folder / "dataset_dict.json", "dataset_dict.json").get("splits", [])
        chosen = ["train"] if "train" in splits else list(splits)
        return [f for split in chosen for f in (_arrow_folder(folder / str(split)) or [])]
    if (folder / "state.json").is_file():
        state = load_json(folder / "state.json", "state.json")
        files = state.get("_data_files") if isinstance(state, dict) else None
        if isinstance(files, list) and all(isinstance(f, dict) and isinstance(f.get("filename"), str) for f in files):
            return [folder / f["filename"] for f in files]
    if any((folder / m).is_file() for m in ARROW_MARKERS):
        return sorted(folder.glob("*.arrow"))
    return None


def list_sources(data: str | Path | Sequence[str | Path]) -> list[Source]:
    """The files ``data`` names, in order: a file; a folder (every readable file under it, sorted; a Hugging
    Face ``save_to_disk`` folder: its Arrow files); a glob pattern (``corpus/*.jsonl.gz``, sorted)."""
    if isinstance(data, (str, Path)):
        data = [data]
    found: list[Source] = []
    for item in data:
        text = str(item)
        if any(c in text for c in "*?[") and not Path(text).exists():
            matches = sorted(glob.glob(text, recursive=True))
            if not matches:
                raise MissingFileError(f"data pattern {text!r} matches no file")
            found += [s for m in matches for s in list_sources([m])]
            continue
        path = Path(item)
        if not path.exists():
            raise MissingFileError(f"corpus file {text!r} does not exist")
        if path.is_dir():
            manifest = path / "manifest.json"
            if manifest.is_file() and b"glassformer-shards" in manifest.read_bytes()[:4096]:
                raise UsageError(f"data {text!r} is a folder of token shards already: train, eval and sae read it "
                                 f"as it is (--data {text}); prepare reads text")
            arrow = _arrow_folder(path)
            if arrow is not None:
                found += [Source(p, "arrow") for p in arrow]
                continue
            for root, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(names):
                    file = Path(root) / name
                    kind = None if name.startswith(".") else _kind(file)
                    if kind is not None and kind != "tokens" and file.is_file():
                        found.append(Source(file, kind))
            continue
        kind = _kind(path) or "text"
        if kind == "tokens":
            raise UsageError(f"data {text!r} already holds token ids: train and eval read it as it is "
                             f"(--data {text}); prepare reads text")
        found.append(Source(path, kind))
    if not found:
        raise MissingFileError(f"data {[str(d) for d in data]} holds no file glassformer can read")
    return found


def _json_documents(path: Path, field: str) -> Iterator[str]:
    """The ``field`` of each JSON line of ``path`` (a ``.json`` file holding one array: of each item)."""
    with open_binary(path) as handle:
        first = handle.peek(64)[:64] if hasattr(handle, "peek") else b""
        if path.suffix.lower() == ".json" and first.lstrip()[:1] == b"[":
            raw = handle.read(MAX_JSON_ARRAY_BYTES + 1)
            if len(raw) > MAX_JSON_ARRAY_BYTES:
                raise BadFileError(f"{str(path)!r} is a JSON array over {MAX_JSON_ARRAY_BYTES:,} bytes; write it as "
                                   "JSON lines (one object a line), which is read as a stream")
            items = parse_json(raw, repr(str(path)))  # not UTF-8, not JSON, too deep: one line naming the file
            for number, item in enumerate(items):
                yield _text_of(item, field, f"{str(path)!r} item {number}")
            return
        for number, line in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(line) > MAX_LINE_BYTES:
                raise BadFileError(f"{str(path)!r} line {number} is longer than {MAX_LINE_BYTES:,} bytes; a JSON line "
                                   "holds one document")
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise BadFileError(f"{str(path)!r} line {number} is not UTF-8 text (byte 0x{line[error.start]:02x} "
                                   f"at column {error.start + 1})") from None
            if not text.strip():
                continue
            record = parse_json(text, f"{str(path)!r} line {number}")
            yield _text_of(record, field, f"{str(path)!r} line {number}")


def _text_of(record: object, field: str, where: str) -> str:
    """``record[field]``, a dotted ``field`` reading nested objects (``meta.text``), which must be text."""
    value = record
    for key in field.split("."):
        if not isinstance(value, dict) or key not in value:
            keys = sorted(record)[:8] if isinstance(record, dict) else []
            raise BadFileError(f"{where} has no field {field!r} (its fields: {keys}); name the text's field with "
                               "--text_field")
        value = value[key]
    if not isinstance(value, str):
        raise BadFileError(f"{where}: field {field!r} holds {type(value).__name__}, not text")
    return value


def _column_documents(path: Path, field: str, kind: str) -> Iterator[str]:
    """The strings of column ``field`` of a parquet or Arrow (``kind``) file, read one row group or record batch
    at a time, with the row in errors."""
    try:
        import pyarrow as pa
        import pyarrow.ipc  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise UsageError("parquet and Arrow files need pyarrow: pip install 'glassformer[data]'") from None
    what = "parquet file" if kind == "parquet" else "Arrow file"
    try:
        if kind == "parquet":
            file = pa.parquet.ParquetFile(path)
            names = file.schema_arrow.names
            groups = (file.read_row_group(i, columns=[field]) for i in range(file.num_row_groups))
            batches = (batch for group in groups for batch in group.to_batches())
        else:
            source = pa.memory_map(str(path))
            try:
                reader = pa.ipc.open_stream(source)  # what datasets' save_to_disk writes
                batches = iter(reader)
            except pa.ArrowInvalid:
                reader = pa.ipc.open_file(source)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            names = reader.schema.names
    except (pa.ArrowException, OSError) as error:
        raise BadFileError(f"{str(path)!r} is not a readable {what}: {first_line(error)}") from None
    if field not in names:
        raise BadFileError(f"{what} {str(path)!r} has no column {field!r} (its columns: {names}); name the text's "
                           "column with --text_field")
    row = 0
    for batch in batches:
        for value in batch.column(batch.schema.get_field_index(field)).to_pylist():
            if not isinstance(value, str):
                raise BadFileError(f"{what} {str(path)!r} row {row}: column {field!r} holds "
                                   f"{type(value).__name__}, not text")
            yield value
            row += 1


def iter_pieces(sources: Sequence[Source], text_field: str = "text") -> Iterator[tuple[str, bool]]:
    """Every document of ``sources`` as pieces ``(text, last)``; ``last`` ends a document. Empty documents
    (a JSON line whose text is "") are kept: one piece "" (they still take an end-of-text token)."""
    for source in sources:
        if source.kind == "text":
            pieces = iter_text(source.path, PIECE_CHARS)
            previous = next(pieces)  # there is one: iter_text refuses a file without text
            for piece in pieces:
                yield previous, False
                previous = piece
            yield previous, True
            continue
        documents = _json_documents(source.path, text_field) if source.kind == "json" else _column_documents(
            source.path, text_field, source.kind)
        for text in documents:
            yield text, True

"""One way in: a reader per file format, each bounding sizes before it parses and turning every way a
file can be unusable into one :class:`~glassformer.errors.BadFileError` naming the file.

    JSON            load_json, parse_json     size, nesting, digits of a number (Python's int limit)
    JSON lines      read_records              a record with an integer step a line; numbers where asked
    YAML            load_yaml                 size, aliases expanded, nesting, digits
    torch state     load_state_file           record sizes inside the zip before torch.load; tensors only
    tokenizer.json  rust_tokenizer            padding/truncation lengths; a Rust panic is one error
    safetensors     glassformer.safetensors_header (shapes and dtypes from the header, nothing read)

Every command reads these formats through these functions (a run folder: ``read_records`` for its
``metrics.jsonl`` and ``microscope.jsonl``; a checkpoint: ``load_json``, ``rust_tokenizer``,
``load_state_file`` and the safetensors header). Nothing here imports torch or tokenizers until a
file of theirs is read.
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from typing import Any

from .errors import BadFileError, MissingFileError, shown

MAX_JSON_BYTES = 1 << 30  # a config or tokenizer file larger than 1 GiB is not one
MAX_YAML_BYTES = 1 << 24  # a config file larger than 16 MiB is not one
MAX_YAML_NODES = 100_000  # values a YAML document may stand for, aliases expanded
MAX_TOKENIZER_LENGTH = 1 << 24
"""The largest padding or truncation length a tokenizer.json may ask for (16M tokens): the Rust library
allocates what it says, and a length of 2**40 aborts the process before any error can be raised."""


def _digits() -> int:
    """Python's limit on the digits of an int read from text (4,300 by default)."""
    return sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300


def expand_home(value: Any) -> Any:
    """A path option as a shell reads it: ``~/runs`` (or ``~user/runs``) in a YAML file or a mapping is
    the home folder's ``runs``, never a folder named ``~``; a list is expanded item by item; anything
    else (None, a number for the validator to refuse) is returned as it is."""
    import os

    if isinstance(value, str):
        return os.path.expanduser(value)
    if isinstance(value, list):
        return [os.path.expanduser(v) if isinstance(v, str) else v for v in value]
    return value


# ---------------------------------------------------------------------- JSON
def parse_json(text: str | bytes, where: str) -> Any:
    """The JSON value of ``text``; invalid JSON, a nesting too deep to parse or a number with more
    digits than Python reads (a ValueError deep inside ``json``) is one BadFileError naming ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise BadFileError(f"{where} is not valid JSON ({error.msg} at line {error.lineno} column "
                           f"{error.colno})") from None
    except UnicodeDecodeError as error:
        raise BadFileError(f"{where} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    except ValueError:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise BadFileError(f"{where} holds a number with more than {_digits():,} digits") from None
    except RecursionError:
        raise BadFileError(f"{where} is nested too deeply to read") from None


def load_json(path: str | Path, what: str = "file") -> Any:
    """The JSON value of the file ``path``; every way the file can be unusable is a one-line error.

    A missing file is a :class:`MissingFileError`; a folder (or a device, a pipe), a file over
    :data:`MAX_JSON_BYTES`, bytes that are not UTF-8, invalid JSON, a nesting too deep to parse or a
    number too long to read a :class:`BadFileError` naming the file. Permission problems stay
    ``PermissionError`` (an ``OSError``, which the command line also prints as one line).
    """
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"{what} {str(path)!r} does not exist")
    if not path.is_file():
        raise BadFileError(f"{what} {str(path)!r} is not a file")
    if path.stat().st_size > MAX_JSON_BYTES:
        raise BadFileError(f"{what} {str(path)!r} is {path.stat().st_size:,} bytes, too large for a JSON "
                           f"{what} (at most {MAX_JSON_BYTES:,})")
    return parse_json(path.read_bytes(), f"{what} {str(path)!r}")


# ---------------------------------------------------------------------- JSON lines
def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


UNIFORM_EXEMPT = frozenset({"step", "measurements"})
"""Record keys ``read_records(uniform=True)`` does not compare: the step, and the user's own measurements
(a circuit's edge list grows and shrinks over training)."""


def _shape(value: Any, where: str) -> Any:
    """What a record's value is made of: "n" for a number or null, (length, element) for a non-empty
    list whose elements are all alike, {key: ...} for a mapping; anything else is a BadFileError."""
    if _is_number(value):
        return "n"
    if isinstance(value, list) and value:
        inner = [_shape(v, where) for v in value]
        if any(s != inner[0] for s in inner):
            raise BadFileError(f"{where}: a list whose items differ in kind or length")
        return (len(value), inner[0])
    if isinstance(value, dict):
        return {k: _shape(v, where) for k, v in value.items()}
    raise BadFileError(f"{where}: {shown(value)} where a number, a list of numbers or a mapping of them belongs")


def read_records(file: str | Path, numbers: bool = False, uniform: bool = False) -> list[dict[str, Any]]:
    """The records of a JSON-lines file with an integer ``step`` >= 0 in each ([] when there is no file);
    a torn last line (a process killed while writing it) is dropped.

    Args:
        numbers: every other value must be a number or null (``metrics.jsonl``).
        uniform: every record holds the keys of the first, each made the same way (numbers, non-empty
            lists of one length, mappings of them: ``microscope.jsonl``, which the run page draws); the
            keys of :data:`UNIFORM_EXEMPT` are not compared.
    Raises:
        BadFileError naming the file and the line, for any bad line but a torn last one.
    """
    file = Path(file)
    if not file.is_file():
        return []
    lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
    records: list[dict[str, Any]] = []
    first: Any = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{str(file)!r} line {number}"
        try:
            record = parse_json(line, where)
        except BadFileError:
            if number == len(lines):
                break  # torn last line: the record was never complete
            raise
        step = record.get("step") if isinstance(record, dict) else None
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise BadFileError(f"{where} is not a record with an integer 'step' >= 0")
        if numbers:
            bad = next((k for k, v in record.items() if not _is_number(v)), None)
            if bad is not None:
                raise BadFileError(f"{where}: {bad!r} is {shown(record[bad])}, expected a number or null")
        if uniform:
            try:
                shape = _shape({k: v for k, v in record.items() if k not in UNIFORM_EXEMPT}, where)
            except RecursionError:
                raise BadFileError(f"{where} is nested too deeply to read") from None
            if records and shape != first:
                raise BadFileError(f"{where}: its keys or the sizes of its values differ from the first record's")
            first = shape if not records else first
        records.append(record)
    return records


# ---------------------------------------------------------------------- YAML
def expanded_size(value: Any, limit: int = MAX_YAML_NODES) -> int:
    """How many values ``value`` stands for when every shared (aliased) part is counted each time it is
    used; counting stops just past ``limit``. A structure that contains itself counts as unbounded."""
    memo: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Any) -> int:
        if not isinstance(node, (list, dict)):
            return 1
        key = id(node)
        if key in memo:
            return memo[key]
        if key in active:
            return limit + 1  # a recursive alias: unbounded
        active.add(key)
        total = 1
        children = (x for pair in node.items() for x in pair) if isinstance(node, dict) else node
        for child in children:
            total += size(child)
            if total > limit:
                break
        active.discard(key)
        memo[key] = min(total, limit + 1)
        return memo[key]

    return size(value)


def load_yaml(path: str | Path, what: str = "config file") -> Any:
    """The YAML document of ``path`` ({} when empty) by ``yaml.safe_load`` (no objects built from tags).

    A missing file is a MissingFileError; a file over :data:`MAX_YAML_BYTES`, a document whose aliases
    expand to more than :data:`MAX_YAML_NODES` values, invalid YAML, bytes that are not UTF-8, a nesting
    too deep to read or a number too long to read (Python's int limit) a BadFileError naming the file.
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{what} {str(path)!r} does not exist")
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise BadFileError(f"{what} {str(path)!r} is {size:,} bytes, too large for a config "
                           f"(at most {MAX_YAML_BYTES:,})")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        first = str(error).splitlines()[0]
        raise BadFileError(f"{what} {str(path)!r} is not valid YAML ({first})") from None
    except UnicodeDecodeError as error:
        raise BadFileError(f"{what} {str(path)!r} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    except RecursionError:
        raise BadFileError(f"{what} {str(path)!r} is nested too deeply to read") from None
    except ValueError:  # an int of more digits than Python converts
        raise BadFileError(f"{what} {str(path)!r} holds a number with more than {_digits():,} digits") from None
    if expanded_size(data) > MAX_YAML_NODES:
        raise BadFileError(f"{what} {str(path)!r} expands (through its aliases) to more than {MAX_YAML_NODES:,} "
                           "values; write the values out or use fewer nested aliases")
    return data


# ---------------------------------------------------------------------- torch state
def check_zip_sizes(file: str | Path) -> None:
    """Refuse a torch file whose records would inflate past the file's own size before torch reads it.

    ``torch.save`` stores its records uncompressed, so their sizes sum to less than the file; a crafted
    file whose records are deflated (a 3 MB file holding 3 GB) would cost that memory inside
    ``torch.load`` before any check could see the result. The sizes come from the zip's central
    directory (nothing is decompressed). A file that is not a zip is left to torch's own error.
    """
    import zipfile

    file = Path(file)
    try:
        with zipfile.ZipFile(file) as archive:
            records = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return
    size = file.stat().st_size
    inflated = sum(record.file_size for record in records)
    packed = [r.filename for r in records if r.compress_type != zipfile.ZIP_STORED]
    if inflated > size or packed:
        held = f"compressed records ({packed[0]!r}...)" if packed else f"records of {inflated:,} bytes"
        raise BadFileError(f"{str(file)!r} holds {held} in a {size:,}-byte file: torch.save writes neither; "
                           "refused before reading (a crafted or damaged file)")


def load_state_file(file: str | Path) -> dict[str, Any]:
    """Read a training state (``train_state.pt``) with ``torch.load(weights_only=True)``: tensors and
    plain containers only, its record sizes bounded first (:func:`check_zip_sizes`). A file whose pickle
    would build other objects (or run code) is refused, never executed; an empty, truncated or corrupt
    file, or one that is not a dict, is one BadFileError naming it."""
    import torch

    if Path(file).is_file() and Path(file).stat().st_size == 0:
        raise BadFileError(f"{str(file)!r} is empty (zero bytes): the checkpoint was damaged or copied in part")
    check_zip_sizes(file)
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise BadFileError(f"refused to load {str(file)!r}: it holds objects other than tensors and plain "
                           f"containers, so it was not unpickled ({_first_line(error)})") from None
    except PermissionError:
        raise
    except Exception as error:  # noqa: BLE001 (whatever torch.load meets in a damaged file is the file's fault)
        raise BadFileError(f"{str(file)!r} is corrupt or truncated ({_first_line(error)})") from None
    if not isinstance(state, dict):
        raise BadFileError(f"{str(file)!r} must hold a dict, got {type(state).__name__}")
    return state


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


# ---------------------------------------------------------------------- tokenizer.json
def _named(file: str | Path) -> str:
    """A file as messages name it: a Path quoted, a description ("the 'hf' field") as it is."""
    return repr(str(file)) if isinstance(file, Path) else file


def check_tokenizer_json(data: Any, file: str | Path) -> dict[str, Any]:
    """``data`` (a ``tokenizers`` JSON) when its sizes are bounded: a mapping whose ``padding`` and
    ``truncation`` lengths are ints in [0, MAX_TOKENIZER_LENGTH]; else a one-line BadFileError naming ``file``."""
    if not isinstance(data, dict):
        raise BadFileError(f"{_named(file)} must hold a JSON object (a Hugging Face tokenizer), "
                           f"got {type(data).__name__}")
    lengths: list[tuple[str, Any]] = []
    for part, keys in (("padding", ("pad_to_multiple_of",)), ("truncation", ("max_length", "stride"))):
        value = data.get(part)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise BadFileError(f"{_named(file)}: {part} must be an object or null, got {shown(value)}")
        lengths += [(f"{part}.{key}", value.get(key)) for key in keys]
        strategy = value.get("strategy")
        if part == "padding" and isinstance(strategy, dict):
            lengths.append(("padding.strategy.Fixed", strategy.get("Fixed")))
    for key, value in lengths:
        if value is None and key != "truncation.max_length":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENIZER_LENGTH:
            raise BadFileError(f"{_named(file)}: {key} is {shown(value)}, "
                               f"expected an int in [0, {MAX_TOKENIZER_LENGTH}]")
    return data


def rust_tokenizer(data: Any, file: str | Path) -> Any:
    """A ``tokenizers.Tokenizer`` from its JSON form, checked first (:func:`check_tokenizer_json`); whatever
    the Rust library raises, a Rust panic (pyo3's PanicException, a BaseException) included, is one
    BadFileError naming ``file``."""
    from tokenizers import Tokenizer

    check_tokenizer_json(data, file)
    return rust_call(lambda: Tokenizer.from_str(json.dumps(data)), file)


def rust_call(build: Any, file: str | Path) -> Any:
    """``build()`` (a call into the Rust ``tokenizers`` library reading ``file``), with whatever it raises,
    a Rust panic (a BaseException) included, as one BadFileError naming ``file``; Ctrl-C stays Ctrl-C."""
    try:
        return build()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # noqa: BLE001 (a plain Exception, or pyo3's PanicException)
        detail = " ".join(str(error).split()) or type(error).__name__
        raise BadFileError(f"{_named(file)} is not a tokenizer the Hugging Face library can read ({detail})") from None


"""The way in: one bounded reader per format, turning every way a file can be unusable into a BadFileError."""

import contextlib
import json
import os
import pickle
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import BadFileError, GlassformerError, MissingFileError
from .checks import first_line, is_int, is_number, shown

MAX_JSON_BYTES = 1 << 28  # a tokenizer file larger than 256 MiB is not one (the largest known: ~35 MB); parsing
# JSON costs ~5x the file's size in memory (a 300 MB config.json cost 1.56 GB)
MAX_CONFIG_BYTES = 1 << 24  # a config file (model, training, settings, shard index; JSON or YAML) is at most 16 MiB
MAX_ADDED_TOKEN_CHARS = 4096  # an added token longer than this is not a token (the matcher costs ~100x its size)
MAX_YAML_NODES = 100_000  # values a YAML document may stand for, aliases expanded
MAX_STEP = 1 << 53  # a record's step: beyond it no training goes, nor a float (a chart's axis) holds it exactly
MAX_TOKENIZER_LENGTH = 1 << 24  # padding/truncation lengths a tokenizer.json may ask (Rust allocates them)


def _unreadable(where: str, error: ValueError | RecursionError) -> BadFileError:
    if isinstance(error, UnicodeDecodeError):
        return BadFileError(f"{where} is not UTF-8 text ({error.reason} at byte {error.start})")
    if isinstance(error, RecursionError):
        return BadFileError(f"{where} is nested too deeply to read")
    digits = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
    return BadFileError(f"{where} holds a number with more than {digits:,} digits")  # Python's int limit


def expand_home(value: Any) -> Any:
    """A path option (or a list of them) with ``~``, ``$NAME`` and ``${NAME}`` expanded as a shell does (a YAML
    file's paths are no shell's: ``out_dir: $HOME/x``); an unset variable is an error; anything else as it is."""
    if isinstance(value, list):
        return [expand_home(v) for v in value]
    if not isinstance(value, str):
        return value
    expanded = os.path.expandvars(os.path.expanduser(value))
    unset = re.search(r"\$(\w+|\{[^}]*\})", expanded) if "$" in value else None
    if unset:
        raise GlassformerError(f"path {value!r} names the environment variable {unset.group(0)}, which is not set")
    return expanded


def parse_json(text: str | bytes, where: str) -> Any:
    """The JSON value of ``text``; invalid, too deep or with too long a number: a BadFileError naming ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise BadFileError(f"{where} is not valid JSON ({error.msg} at line {error.lineno} column "
                           f"{error.colno})") from None
    except (ValueError, RecursionError) as error:
        raise _unreadable(where, error) from None


def _read_bounded(path: str | Path, where: str, max_bytes: int, kind: str) -> bytes:
    """The bytes of the file ``path``: a MissingFileError when missing, a BadFileError when it is not a regular
    file (a FIFO, a device, a folder) or holds more than ``max_bytes`` (too large for ``kind``)."""
    try:  # non-blocking: a FIFO put there (even after a check) must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise MissingFileError(f"{where} does not exist") from None
    except ValueError:  # a NUL byte, which no path name holds
        raise MissingFileError(f"{where} does not exist (a path name cannot hold a NUL byte)") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
        os.close(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadFileError(f"{where} is not a file")
        raise BadFileError(f"{where} is {info.st_size:,} bytes, too large for {kind} (at most {max_bytes:,})")
    with os.fdopen(fd, "rb") as file:
        data = file.read(info.st_size + 1)  # read(n) sets n bytes aside first: the file's size, not the bound
        if len(data) > info.st_size:  # it grew meanwhile: still read no further than the bound
            data += file.read(max_bytes + 1 - len(data))
    if len(data) > max_bytes:
        raise BadFileError(f"{where} is more than {max_bytes:,} bytes, too large for {kind}")
    return data


def load_json(path: str | Path, what: str = "file", max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON value of the file ``path``: a MissingFileError when missing, a BadFileError when unusable (not a
    regular file: a FIFO, a device, a folder; more than ``max_bytes``, :data:`MAX_CONFIG_BYTES` for configs; not
    JSON; nested too deeply)."""
    where = f"{what} {str(Path(path))!r}"
    return parse_json(_read_bounded(path, where, max_bytes, f"a JSON {what}"), where)


UNIFORM_EXEMPT = frozenset({"step", "measurements"})  # keys read_records(uniform=True) leaves uncompared


def _shape(value: Any, where: str) -> Any:
    """A value's make-up: "n" (number or null), (length, item) for a list of like items, {key: ...}."""
    if value is None or is_number(value):
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
    """The records (each with an integer ``step`` in [0, 2**53]) of a JSON-lines file ([] when none, a torn last
    line dropped). ``numbers``: other values are numbers or null; ``uniform``: made like the first,
    :data:`UNIFORM_EXEMPT` aside."""
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
        if not is_int(step) or not 0 <= step <= MAX_STEP:
            raise BadFileError(f"{where} is not a record with an integer 'step' in [0, 2**53]")
        if numbers:
            bad = next((k for k, v in record.items() if not (v is None or is_number(v))), None)
            if bad is not None:
                raise BadFileError(f"{where}: {bad!r} is {shown(record[bad])}, expected a number or null")
        if uniform:
            try:
                shape = _shape({k: v for k, v in record.items() if k not in UNIFORM_EXEMPT}, where)
            except RecursionError as error:
                raise _unreadable(where, error) from None
            first = first if records else shape
            if shape != first:
                raise BadFileError(f"{where}: its keys or the sizes of its values differ from the first record's")
        records.append(record)
    return records


def expanded_size(value: Any, limit: int = MAX_YAML_NODES) -> int:
    """How many values ``value`` stands for, aliased parts counted at each use (stops just past ``limit``)."""
    memo: dict[int, int] = {}

    def size(node: Any) -> int:
        if not isinstance(node, (list, dict)):
            return 1
        key = id(node)
        if key not in memo:
            memo[key] = limit + 1  # while it is counted: a recursive alias that reaches it again is unbounded
            total = 1
            for child in (x for pair in node.items() for x in pair) if isinstance(node, dict) else node:
                total += size(child)
                if total > limit:
                    break
            memo[key] = min(total, limit + 1)
        return memo[key]

    return size(value)


def load_yaml(path: str | Path, what: str = "config file") -> Any:
    """The YAML document of ``path`` ({} when empty), bounded in bytes and in values with aliases expanded."""
    where = f"{what} {str(Path(path))!r}"
    return _parse_yaml(_read_bounded(path, where, MAX_CONFIG_BYTES, "a config"), where, BadFileError, True) or {}


def parse_yaml_text(text: str, where: str, error: type[GlassformerError] = BadFileError) -> Any:
    """The YAML value of ``text`` (a list or mapping typed on a command line), with aliases and anchors refused
    (a line of ``*a`` can stand for billions of values) and at most :data:`MAX_YAML_NODES` values; else ``error``
    naming ``where``."""
    if len(text) > MAX_CONFIG_BYTES:
        raise error(f"{where} is {len(text):,} characters, too long for a value (at most {MAX_CONFIG_BYTES:,})")
    return _parse_yaml(text, where, error, False)


def _parse_yaml(text: str | bytes, where: str, error: type[GlassformerError], aliases: bool) -> Any:
    """The YAML value of ``text`` (bytes: UTF-8) of at most :data:`MAX_YAML_NODES` values, aliases expanded;
    ``aliases`` False: an anchor or alias is refused. Else ``error`` naming ``where``."""
    import yaml

    try:
        text = text.decode("utf-8") if isinstance(text, bytes) else text
        aliased = not aliases and any(isinstance(t, (yaml.AliasToken, yaml.AnchorToken)) for t in yaml.scan(text))
        value = None if aliased else yaml.safe_load(text)
    except yaml.YAMLError as problem:
        got = "" if aliases else f": got {shown(text)}"  # a value typed on a command line is shown
        raise error(f"{where} is not valid YAML ({str(problem).splitlines()[0]}){got}") from None
    except (ValueError, RecursionError) as problem:
        raise error(str(_unreadable(where, problem))) from None
    if aliased:
        raise error(f"{where} uses a YAML anchor or alias (&name, *name), which a value given here may not: "
                    "write the values out")
    if expanded_size(value) > MAX_YAML_NODES:
        raise error(f"{where} expands (through its aliases, if any) to more than {MAX_YAML_NODES:,} values; "
                    "write fewer values or use fewer nested aliases")
    return value


def check_zip_sizes(file: str | Path) -> None:
    """Refuse a torch zip with compressed records or records larger than the file (torch.save writes neither)."""
    import zipfile

    file = Path(file)
    try:
        with zipfile.ZipFile(file) as archive:
            records = archive.infolist()
    except NotImplementedError as error:  # "zip file version 6.4": zipfile cannot size it, torch would inflate it
        raise BadFileError(f"{str(file)!r} is a zip torch.save does not write ({first_line(error)}); refused before "
                           "reading (a crafted or damaged file)") from None
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
    """A ``train_state.pt`` dict by ``torch.load(weights_only=True)``; anything else is a BadFileError naming it."""
    import torch

    if Path(file).is_file() and Path(file).stat().st_size == 0:
        raise BadFileError(f"{str(file)!r} is empty (zero bytes): the checkpoint was damaged or copied in part")
    check_zip_sizes(file)
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise BadFileError(f"refused to load {str(file)!r}: it holds objects other than tensors and plain "
                           f"containers, so it was not unpickled ({first_line(error)})") from None
    except PermissionError:
        raise
    except Exception as error:  # noqa: BLE001 (whatever torch.load meets in a damaged file is the file's fault)
        raise BadFileError(f"{str(file)!r} is corrupt or truncated ({first_line(error)})") from None
    if not isinstance(state, dict):
        raise BadFileError(f"{str(file)!r} must hold a dict, got {type(state).__name__}")
    return state


def _named(file: str | Path) -> str:
    return repr(str(file)) if isinstance(file, Path) else file


def check_tokenizer_json(data: Any, file: str | Path) -> dict[str, Any]:
    """``data`` (a ``tokenizers`` JSON) when its padding and truncation lengths are bounded; else a BadFileError."""
    if not isinstance(data, dict):
        raise BadFileError(f"{_named(file)} must hold a JSON object (a Hugging Face tokenizer), "
                           f"got {type(data).__name__}")
    added = data.get("added_tokens")
    for i, token in enumerate(added if isinstance(added, list) else []):
        content = token.get("content") if isinstance(token, dict) else None
        if isinstance(content, str) and len(content) > MAX_ADDED_TOKEN_CHARS:
            raise BadFileError(f"{_named(file)}: added_tokens[{i}] is {len(content):,} characters long, expected "
                               f"at most {MAX_ADDED_TOKEN_CHARS:,} (a token, not a text)")
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
        optional = value is None and key != "truncation.max_length"
        if not optional and not (is_int(value) and 0 <= value <= MAX_TOKENIZER_LENGTH):
            raise BadFileError(f"{_named(file)}: {key} is {shown(value)}, "
                               f"expected an int in [0, {MAX_TOKENIZER_LENGTH}]")
    return data


def rust_tokenizer(data: Any, file: str | Path) -> Any:
    """A ``tokenizers.Tokenizer`` from its JSON form, checked first; errors as :func:`rust_call`."""
    from tokenizers import Tokenizer

    check_tokenizer_json(data, file)
    tokenizer = rust_call(lambda: Tokenizer.from_str(json.dumps(data)), file)
    vocab, size = tokenizer.get_vocab(with_added_tokens=True), tokenizer.get_vocab_size(with_added_tokens=True)
    token, top = max(vocab.items(), key=lambda item: item[1], default=("", -1))
    if top >= size:  # its ids would not fit the model's rows nor a token cache sized by vocab_size
        raise BadFileError(f"{_named(file)}: token {token!r} has id {top}, past the vocabulary's {size} ids")
    return tokenizer


def rust_call(build: Any, file: str | Path) -> Any:
    """``build()`` (Rust reading ``file``), a failure as one BadFileError naming ``file`` (:func:`rust_errors`)."""
    with rust_errors(f"{_named(file)} is not a tokenizer the Hugging Face library can read"):
        return build()


@contextlib.contextmanager
def rust_errors(message: str, error: type[GlassformerError] = BadFileError) -> Iterator[None]:
    """Inside the block, a failure of the Rust ``tokenizers`` library (a bare Exception, or a panic such as a regex's
    backtracking limit) is one ``error``: ``message (what Rust said)``; Ctrl-C and glassformer's own errors pass."""
    try:
        yield
    except (KeyboardInterrupt, SystemExit, GlassformerError):
        raise
    except BaseException as problem:  # noqa: BLE001 (pyo3's PanicException derives from BaseException)
        detail = " ".join(str(problem).split())[:200] or type(problem).__name__
        hint = ": the tokenizer's vocabulary lacks the unknown token its model names" if "Missing" in detail and \
            "token from the vocabulary" in detail else ""
        raise error(f"{message} ({detail}){hint}") from None

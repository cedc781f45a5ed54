"""The way out: atomic writes (temporary name, fsync, rename) and the ownership rule (:func:`check_output_file`)."""

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import GlassformerError, NotOursError

MODEL_FILES = frozenset({"model.safetensors", "config.json", "tokenizer.json", "training.json", "train_state.pt",
                         "tokenizer_config.json", "special_tokens_map.json"})  # what a model folder holds

LOCK_FILE = ".glassformer.lock"


@dataclass(frozen=True)
class Writes:
    """A verb's ``WRITES``: a command line (after ``glassformer``) and the files it writes ({out}: a placeholder)."""

    argv: tuple[str, ...]
    files: tuple[str, ...]


def _entry(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def owned_folder(path: str | Path, names: Collection[str] = MODEL_FILES, content: bool = True) -> bool:
    """Whether ``path`` is a folder holding nothing :func:`foreign` (``content=False``: names alone)."""
    try:
        return foreign(path, names, content) == "nothing foreign"
    except OSError:
        return False


def owned_link(path: str | Path, target: re.Pattern[str]) -> bool:
    """Whether ``path`` is a symbolic link to a plain name that ``target`` fully matches (``last -> ckpt-000200``)."""
    path = Path(path)
    if not path.is_symlink():
        return False
    name = os.readlink(path)
    return "/" not in name and os.sep not in name and target.fullmatch(name) is not None


def foreign(path: str | Path, names: Collection[str] = MODEL_FILES, content: bool = True) -> str:
    """What in ``path`` glassformer did not write, for a message ("the file 'notes.txt', which ...")."""
    path = Path(path)
    info = _entry(path)
    if info is None:
        return "nothing"
    if stat.S_ISLNK(info.st_mode):
        return f"a link to {os.readlink(path)!r}"
    if stat.S_ISREG(info.st_mode):
        return "a regular file"
    if not stat.S_ISDIR(info.st_mode):
        return "a device, pipe or socket"
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.name not in names or not entry.is_file(follow_symlinks=False):
            kind = "folder" if entry.is_dir(follow_symlinks=False) else "file"
            return f"the {kind} {entry.name!r}, which glassformer does not write there"
        if entry.stat(follow_symlinks=False).st_nlink > 1:
            return f"the file {entry.name!r}, which has another hard link"
        if content and not recognised(entry.path):
            return f"the file {entry.name!r}, whose content glassformer did not write"
    return "nothing foreign"


def check_replaceable(path: str | Path, names: Collection[str] = MODEL_FILES, what: str = "folder",
                      content: bool = True) -> None:
    """Refuse (:class:`NotOursError`) to replace ``path`` unless it is absent or :func:`owned_folder`."""
    found = foreign(path, names, content)
    if found not in ("nothing", "nothing foreign"):
        raise NotOursError(f"{what} {str(path)!r} holds {found}: glassformer replaces only folders it wrote (or "
                           "empty ones); move it away or choose another path")


def remove_owned(path: str | Path, names: Collection[str] = MODEL_FILES, link: re.Pattern[str] | None = None,
                 what: str = "folder", content: bool = True) -> None:
    """Remove ``path`` when absent, :func:`owned_folder` or (``link``) :func:`owned_link`; else a NotOursError."""
    path = Path(path)
    if link is not None and owned_link(path, link):
        path.unlink()
        return
    check_replaceable(path, names, what, content)
    remove_path(path)


def check_folder(name: str, value: str | Path) -> Path:
    """``Path(value)`` when a folder can be there (it, or the nearest part of it that exists, is a folder); else
    an error naming ``name``: empty, or it (or a parent) is a file."""
    text = str(value)
    if not text.strip() or "\x00" in text:
        raise GlassformerError(f"{name} must name a folder, got {text!r}")
    path = Path(text)
    place = next((place for place in (path, *path.parents) if place.exists()), None)  # the nearest that exists
    if place is not None and not place.is_dir():
        what = "is a file" if place == path else f"is inside {str(place)!r}, which is a file"
        raise GlassformerError(f"{name} {text!r} {what}; it must be a folder")
    return path


def check_not_source(target: str | Path, sources: Iterable[str | Path], what: str = "destination") -> None:
    """Refuse a ``target`` that is one of ``sources`` or a folder above one."""
    resolved = Path(target).resolve()
    for source in (Path(s).resolve() for s in sources):
        if resolved == source or resolved in source.parents:
            relation = "is" if resolved == source else "contains"
            raise NotOursError(f"{what} {str(target)!r} {relation} the source {str(source)!r}; writing it would "
                               "destroy what is read: choose another path")


def _input_files(inputs: Iterable[str | Path]) -> Iterator[Path]:
    for source in map(Path, inputs):
        if source.is_dir():
            yield from (Path(root) / name for root, _dirs, names in os.walk(source) for name in names)
        elif source.exists():
            yield source


def _same_bytes(path: Path, data: str | bytes | Iterable[bytes] | None) -> bool:
    data = data.encode("utf-8") if isinstance(data, str) else data
    try:
        return isinstance(data, bytes | bytearray) and os.lstat(path).st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def check_output_file(path: str | Path, inputs: Iterable[str | Path] = (), what: str = "output file",
                      data: str | bytes | Iterable[bytes] | None = None) -> Path:
    """The guard of every write: ``path`` when nothing is there or a single-linked regular file, no input,
    that glassformer wrote (:func:`recognised`) or holds ``data``, outside ``inputs``; else a NotOursError."""
    path = Path(path)
    inputs = list(inputs)
    where = path.parent.resolve()
    for folder in map(Path, inputs):
        if folder.is_dir() and (where == folder.resolve() or folder.resolve() in where.parents):
            raise NotOursError(f"{what} {str(path)!r} is inside {str(folder)!r}, a folder the command reads; "
                               "glassformer writes nothing into its inputs: choose another path")
    info = _entry(path)
    if info is not None:
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
            kind = "a folder (Is a directory)" if stat.S_ISDIR(info.st_mode) else foreign(path, ())
            raise NotOursError(f"{what} {str(path)!r} is {kind}, not a regular file: glassformer writes a file "
                               "only where there is none or a regular file it wrote")
        for source in _input_files(inputs):
            if os.path.samefile(source, path):
                raise NotOursError(f"{what} {str(path)!r} is also an input ({str(source)!r}); writing it would "
                                   "destroy what is read: choose another path")
        if info.st_nlink > 1:
            raise NotOursError(f"{what} {str(path)!r} has {info.st_nlink} hard links: another name shares its "
                               "content, so glassformer leaves it alone; remove it or choose another path")
        if not recognised(path) and not _same_bytes(path, data):
            raise NotOursError(f"{what} {str(path)!r} holds a file glassformer did not write (recognised by "
                               "content); move it away or choose another path")
        if isinstance(data, (str, bytes, bytearray)) and not same_kind(path, data):
            raise NotOursError(f"{what} {str(path)!r} holds glassformer's {path.suffix or 'file'} record, and what "
                               "would replace it is another kind of file: choose another path")
    if path.parent.exists() and not path.parent.is_dir():
        raise NotOursError(f"{what} {str(path)!r}: {str(path.parent)!r} is a file, not a folder")
    return path


def claim_outputs(paths: Iterable[str | Path], inputs: Iterable[str | Path] = (), what: str = "output") -> None:
    """:func:`check_output_file` for every file a command will write, before it does any work."""
    inputs = list(inputs)
    for path in paths:
        check_output_file(path, inputs, what)


def _head(path: Path, size: int = 4096) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(size)


def _object(*keys: str) -> Callable[[Any], bool]:
    """A JSON object holding every one of ``keys``."""
    return lambda value: isinstance(value, dict) and all(key in value for key in keys)


def _rows(*keys: str) -> Callable[[Any], bool]:
    """A non-empty JSON list of objects, each holding every one of ``keys``."""
    return lambda value: (isinstance(value, list) and bool(value)
                          and all(isinstance(row, dict) and all(key in row for key in keys) for row in value))


def _kernel_choices(value: Any) -> bool:
    """The kernel-choice cache: {"CPU | torch VERSION | N threads": {case: choice}}."""
    return isinstance(value, dict) and bool(value) and all(
        isinstance(key, str) and " | torch " in key and isinstance(choices, dict) for key, choices in value.items())


def _special_tokens_map(value: Any) -> bool:
    return isinstance(value, dict) and all(k.endswith("_token") and isinstance(v, str) for k, v in value.items())


HF_TOKENIZER_KEYS = ("version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                     "post_processor", "decoder", "model")  # what the tokenizers library always writes
_OWN_TOKENIZER = _object("kind", "specials")  # Tokenizer.save: char, byte and bpe (an HF tokenizer: special_tokens)
_OWN_HF_TOKENIZER = _object("kind", "special_tokens", "hf")

# Ownership by content: what glassformer's JSON holds under each name it writes, and (ANY_NAME) what it writes
# where a user names the file. A JSON file that matches none, a user's package.json or list, is never replaced.
JSON_KINDS: dict[str, tuple[Callable[[Any], bool], ...]] = {
    "results.json": (_object("task"), _object("generation", "checkpoint")),  # a recipe's results, the demo's
    "metrics.json": (_object("tokens"),),  # an SAE's held-out metrics
    "features.json": (_object("features"),),
    "lesson2.json": (_object("attention_vs_torch"),),
    "tracker.json": (_object("run_id"),),
    "microscope.json": (_object("watch"),),
    "config.json": (_object("vocab_size"), _object("model_type")),  # a checkpoint's ModelConfig, a Hugging Face config
    "sae.json": (_object("format"),),
    "summary.json": (_object("step", "stopped"),),  # glassformer train's run summary
    "attribution.json": (_object("estimate", "exact"),),  # the induction recipe's attribution patching
    "training.json": (_object("objective"),),  # a checkpoint's TrainConfig
    "tokenizer.json": (_OWN_TOKENIZER, _OWN_HF_TOKENIZER, _object(*HF_TOKENIZER_KEYS)),
    "tokenizer_config.json": (_object("tokenizer_class"),),
    "special_tokens_map.json": (_special_tokens_map,),
    "kernel-choices.json": (_kernel_choices,),
    "graph.json": (_object("metadata", "qParams", "nodes", "links"),),  # glassformer graph (circuit-tracer's format)
    "manifest.json": (lambda value: isinstance(value, dict) and value.get("format") == "glassformer-shards",),
    "progress.json": (lambda value: isinstance(value, dict) and value.get("format") == "glassformer-prepare-progress",),
}
ANY_NAME: tuple[Callable[[Any], bool], ...] = (
    _rows("prompt", "text"),  # generate --json
    _rows("step", "chosen", "top_k"),  # generate --trace --json
    _object("machine", "settings"),  # bench --out
    _object("machine", "checks"),  # bench --defaults --out
    _object("vocab_size", "d_model"), _OWN_TOKENIZER, _OWN_HF_TOKENIZER,  # ModelConfig.to_json(path), Tokenizer.save
)


Read = Callable[[int | None], bytes]  # the first n bytes of a content (None: all of it)


def _is_json(name: str, read: Read, size: int) -> set[Any]:
    """Which of :data:`JSON_KINDS` (by name, else :data:`ANY_NAME`) the JSON content is (none: a user's)."""
    if size > RECOGNISED_JSON_BYTES:
        return set()
    try:
        value = json.loads(read(None))
    except (ValueError, RecursionError):
        return set()
    return {number for number, kind in enumerate(JSON_KINDS.get(name, ANY_NAME)) if kind(value)}


def _is_records(name: str, read: Read, size: int) -> bool:
    line = read(1 << 16).split(b"\n", 1)[0]
    if not line.strip():
        return size == len(line)
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and type(record.get("step")) is int


RECOGNISED_JSON_BYTES = 256 << 20
MARKER = "glassformer"  # in glassformer's PNGs (``Software``) and HTML pages (``generator``)

_RECOGNISERS: dict[str, Callable[[str, Read, int], bool | set[Any]]] = {  # a content's kinds, or whether it is one
    ".json": _is_json,
    ".jsonl": _is_records,
    ".html": lambda n, read, size: MARKER.encode() in read(4096) and b"<!doctype html" in read(4096).lower(),
    ".png": lambda n, read, size: read(8) == b"\x89PNG\r\n\x1a\n" and MARKER.encode() in read(4096),
    ".safetensors": lambda n, read, size: read(9)[8:9] == b"{",
    ".pt": lambda n, read, size: read(4) == b"PK\x03\x04",
    ".yaml": lambda n, read, size: b"\nwriter: glassformer\n" in read(4096),  # a transcoder folder's config.yaml
    ".bin": lambda n, read, size: read(4) == (20240520).to_bytes(4, "little"),  # a token shard (data/shards.py)
}


def _kinds(name: str, read: Read, size: int) -> set[Any]:
    """The kinds of glassformer's files a content called ``name`` is (none: not one glassformer wrote)."""
    if name == LOCK_FILE:
        return {LOCK_FILE} if re.fullmatch(rb"\d{0,20}\n?", read(64)) is not None else set()
    check = _RECOGNISERS.get(Path(name).suffix.lower())
    found = check(name, read, size) if check else False
    return found if isinstance(found, set) else {name} if found else set()


def _file_kinds(path: Path) -> set[Any]:
    return _kinds(path.name, lambda n: path.read_bytes() if n is None else _head(path, n), os.lstat(path).st_size)


def recognised(path: str | Path) -> bool:
    """Whether glassformer may replace the file ``path``: empty, or in the format its name promises (by content)."""
    path = Path(path)
    try:
        return os.lstat(path).st_size == 0 or bool(_file_kinds(path))
    except OSError:
        return False


def same_kind(path: str | Path, data: str | bytes) -> bool:
    """Whether ``data`` is the same kind of glassformer file as the file ``path`` (empty, absent or of no kind
    glassformer recognises, e.g. the same bytes: any): its record is replaced only by one of the same kind
    (never a checkpoint's model.safetensors by a page, nor a tokenizer by one of another format)."""
    path = Path(path)
    data = data.encode("utf-8", "backslashreplace") if isinstance(data, str) else bytes(data)
    try:
        if not data or os.lstat(path).st_size == 0:
            return True
        mine = _file_kinds(path)
    except OSError:
        return True
    return not mine or bool(mine & _kinds(path.name, lambda n: data if n is None else data[:n], len(data)))


@contextmanager
def run_lock(folder: str | Path) -> Iterator[Path]:
    """Hold an exclusive ``flock`` on ``folder/.glassformer.lock`` for the block (a second writer: NotOursError)."""
    folder = Path(folder)
    file = folder / LOCK_FILE
    try:
        import fcntl
    except ImportError:  # pragma: no cover (Windows)
        yield file
        return
    while True:
        check_output_file(file, (), "lock file")  # never a link, a hard-linked or a user's file
        fd = os.open(file, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        if os.fstat(fd).st_nlink > 1 or not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)  # swapped for a hard link or a FIFO since the check: leave it alone
            raise NotOursError(f"lock file {str(file)!r} changed while glassformer opened it; leave the folder alone")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            owner = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            os.close(fd)
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise NotOursError(f"{str(folder)!r} is in use by another glassformer process (pid {owner or '?'}, "
                               f"lock {str(file)!r}); wait for it or choose another out_dir") from None
        now = _entry(file)
        if now is not None and now.st_ino == os.fstat(fd).st_ino:
            break
        os.close(fd)  # the holder removed the file between our open and our lock: take the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield file
    finally:
        with contextlib.suppress(OSError):
            file.unlink()  # removed while still locked, so no one else holds this name's lock meanwhile
        os.close(fd)  # releases the flock


def atomic_write(path: str | Path, data: str | bytes | Iterable[bytes], *, inputs: Iterable[str | Path] = (),
                 what: str = "file") -> Path:
    """Write ``data`` (text, bytes or byte chunks) to ``path`` via a temporary file, fsynced and renamed over it."""
    if isinstance(data, str):  # a path name that is not UTF-8 is written as \\udcXX (valid in JSON)
        data = data.encode("utf-8", "backslashreplace")
    file = AtomicFile(path, inputs, what, data)
    try:
        with disk_full_names(file.path):  # byte chunks may come from a generator that meets a full disk
            for chunk in [data] if isinstance(data, (bytes, bytearray, memoryview)) else data:
                file.write(chunk)
    except BaseException:
        file.discard()
        raise
    return file.commit()


class AtomicFile:
    """A file written in pieces (a token shard as its ids arrive) under a temporary name beside ``path``;
    :meth:`commit` fsyncs it and renames it over ``path`` (guarded by :func:`check_output_file`, which ``data``,
    the whole content when known, helps), :meth:`discard` removes it. A full disk is one line naming ``path``;
    nothing partial is left under ``path``."""

    def __init__(self, path: str | Path, inputs: Iterable[str | Path] = (), what: str = "file",
                 data: bytes | Iterable[bytes] | None = None):
        self.inputs, self.what, self.data = list(inputs), what, data
        self.path = check_output_file(path, self.inputs, what, data)
        self.temp = self.path.parent / f".{self.path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        with disk_full_names(self.path):
            self.handle = open(self.temp, "xb")  # noqa: SIM115 (closed by commit or discard)

    def write(self, data: bytes, at: int | None = None) -> None:
        """Append ``data`` (``at``: write it at that byte offset instead, then return to the end)."""
        with disk_full_names(self.path):
            if at is None:
                self.handle.write(data)
                return
            self.handle.seek(at)
            self.handle.write(data)
            self.handle.seek(0, os.SEEK_END)

    def commit(self) -> Path:
        """Flush, fsync and rename the file to ``path``; returns ``path``."""
        try:
            with disk_full_names(self.path):
                self.handle.flush()
                os.fsync(self.handle.fileno())
                self.handle.close()
                check_output_file(self.path, self.inputs, self.what, self.data)  # nothing foreign arrived meanwhile
                os.replace(self.temp, self.path)
        finally:
            self.discard()
        fsync_dir(self.path.parent)
        return self.path

    def discard(self) -> None:
        """Close and remove the temporary file (what is left after an error)."""
        if not self.handle.closed:
            self.handle.close()
        if _entry(self.temp) is not None:
            self.temp.unlink()


@contextmanager
def rust_path(path: str | Path, write: bool = False) -> Iterator[str]:
    """``path`` as a string a Rust library can open: as it is when UTF-8, else ``/proc/self/fd/N[/NAME]`` while
    the block runs (``write``: the library creates the file, whose own name must then be UTF-8)."""
    path = Path(path)
    if is_utf8(str(path)):
        yield str(path)
        return
    if not os.path.isdir("/proc/self/fd") or (write and not is_utf8(path.name)):
        raise GlassformerError(f"{shown_text(repr(str(path)))} is not a UTF-8 path name, which safetensors and "
                               "tokenizers cannot open here; rename it")
    folder_named = is_utf8(path.name)
    fd = os.open(path.parent if folder_named else path, os.O_RDONLY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}" if folder_named else f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (a path name with bytes that are not UTF-8 does not)."""
    return shown_text(text) == text


def shown_text(text: str) -> str:
    """``text`` with every lone surrogate (a non-UTF-8 byte of a path name) as a ``\\udcXX`` escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` says the disk (or a quota) is full, as an OSError or in the words of Rust and torch."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    text = str(error)
    return any(words in text for words in ("No space left", "StorageFull", "file write failed", "Disk quota",
                                           "os error 28", "os error 122"))


@contextmanager
def disk_full_names(path: str | Path) -> Iterator[None]:
    """Inside the block, an error that says the disk is full becomes one line naming ``path``."""
    try:
        yield
    except Exception as error:
        if is_disk_full(error):
            raise GlassformerError(f"No space left on device: {str(path)!r} (the disk is full; nothing was "
                                   "replaced and no partial file is left)") from None
        raise


@contextmanager
def atomic_directory(path: str | Path, names: Collection[str] = MODEL_FILES) -> Iterator[Path]:
    """Yield an empty temporary folder ``.NAME.tmp-PID-RANDOM`` beside ``path`` that becomes ``path`` when the block
    succeeds; an existing ``path`` (only if :func:`check_replaceable`) is moved aside, removed after."""
    path = Path(path)
    check_replaceable(path, names, "destination")
    restore_moved_aside(path, names)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:  # a name of our own, made with the umask's mode (mkdtemp's folders are private)
        temp = path.parent / f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        with contextlib.suppress(FileExistsError):
            temp.mkdir()
            break
    try:
        with disk_full_names(path):
            yield temp
            fsync_tree(temp)
        old = path.parent / f".{path.name}.old-{os.getpid()}" if path.exists() else None
        if old is not None:
            os.replace(path, old)
        os.rename(temp, path)  # path is free by now
        fsync_dir(path.parent)
        if old is not None:
            shutil.rmtree(old)
    finally:
        if temp.exists():
            shutil.rmtree(temp)


def restore_moved_aside(path: Path, names: Collection[str] = MODEL_FILES) -> None:
    """Undo a crash between :func:`atomic_directory`'s two renames: put the newest owned ``.NAME.old-*`` back."""
    if path.exists() or path.is_symlink():
        return
    olds = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if olds and owned_folder(olds[-1], names):
        os.replace(olds[-1], path)


@contextmanager
def new_directory(path: str | Path) -> Iterator[Path]:
    """:func:`atomic_directory` for a ``path`` that must not exist (a FileExistsError if it does)."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        raise FileExistsError(f"{str(path)!r} already exists")
    with atomic_directory(path, ()) as temp:
        yield temp


def replace_symlink(link: str | Path, target: str, names: Collection[str] = MODEL_FILES,
                    pattern: re.Pattern[str] | None = None) -> None:
    """Point ``link`` at ``target`` atomically, replacing only a link ``pattern`` matches or an owned folder."""
    link = Path(link)
    if link.is_symlink() and os.readlink(link) == target:
        return
    pattern = pattern or re.compile(r"[^/]+")
    if not owned_link(link, pattern):  # an absent link passes check_replaceable too
        check_replaceable(link, names, "pointer")
    temp = link.parent / f".{link.name}.tmp-{os.getpid()}"
    remove_owned(temp, (), pattern, "temporary link")
    os.symlink(target, temp)
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    os.replace(temp, link)
    fsync_dir(link.parent)


def move_in(source: str | Path, target: str | Path) -> None:
    """Rename ``source`` over ``target`` in one step (same file system): the last move of a staged write."""
    os.replace(source, target)


def fsync_file(path: str | Path) -> None:
    """Flush the file ``path`` to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | Path) -> None:
    """Flush a folder's entries to disk; a no-op where folders cannot be opened (Windows)."""
    with contextlib.suppress(OSError):
        fsync_file(path)


def fsync_tree(path: str | Path) -> None:
    """Flush every file under ``path``, each folder after what it holds; files get a new file's mode (not 0600)."""
    umask = os.umask(0o022)
    os.umask(umask)
    for root, _dirs, files in os.walk(path, topdown=False):
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~umask)
            fsync_file(os.path.join(root, name))
        fsync_dir(root)


def remove_path(path: str | Path) -> None:
    """Remove a file, a symbolic link (not what it points to) or a folder tree; nothing if absent."""
    path = Path(path)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)

"""Writing files and folders so that a crash never leaves a half-written one under the real name, and
never destroys a path glassformer did not write.

Every writer builds under a temporary name next to its target, flushes the data to disk (fsync), and
only then renames into place (a rename within a folder is atomic on POSIX filesystems), and fsyncs
the parent folder so that the rename itself survives a power cut.

Ownership: the one rule every writer follows before it removes or replaces anything (the way out). A
folder may be replaced only when it is empty or holds nothing but single-linked regular files with the
names glassformer writes there and the content it writes (:func:`owned_folder`); a link only when it is
one glassformer makes (a plain name matching a pattern, :func:`owned_link`); a file only when it is a
single-linked regular file that glassformer wrote (:func:`recognised`, by content), none of the command's
inputs and not inside a folder it reads (:func:`check_output_file`, which every writer asks; each verb
declares its files in ``WRITES``, :class:`Writes`); never a source or a folder above one
(:func:`check_not_source`). Everything else is refused with one line naming the path, before anything
is touched. Files get the ordinary mode of a new file (0644 under umask 022).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import GlassformerError, NotOursError

MODEL_FILES = frozenset({"model.safetensors", "config.json", "tokenizer.json", "training.json", "train_state.pt",
                         "tokenizer_config.json", "special_tokens_map.json"})
"""Every file glassformer writes into a model folder (a checkpoint, a Hugging Face export)."""

LOCK_FILE = ".glassformer.lock"


@dataclass(frozen=True)
class Writes:
    """One way to run a command and the files it then writes: each ``commands/<verb>.py`` declares its
    ``WRITES``, and tests/test_outputs_guard.py puts a user's file, a link, a hard link, a FIFO and an
    input at every one of them, so a new command is covered without new test code.

    Args:
        argv: the words after ``glassformer``, with placeholders ``{ck}`` (a char-LM checkpoint),
            ``{s2s}`` (an encoder-decoder checkpoint), ``{run}`` (a training run folder), ``{text}`` (a
            text file), ``{config}`` (a training YAML), ``{tang}`` (a fortune file), ``{out}`` (a fresh folder).
        files: the files this run writes (the same placeholders).
    """

    argv: tuple[str, ...]
    files: tuple[str, ...]


# ---------------------------------------------------------------------- ownership
def _entry(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def owned_folder(path: str | Path, names: Collection[str] = MODEL_FILES, content: bool = True) -> bool:
    """Whether ``path`` is a real folder (not a link) that is empty or holds only single-linked regular
    files whose names are among ``names`` and (with ``content``) whose content glassformer writes
    (:func:`recognised`): a folder glassformer wrote (or an empty one, which holds nothing to lose).
    ``content=False`` is for the temporary folder of a save a crash cut short, whose files may be cut too."""
    path = Path(path)
    info = _entry(path)
    if info is None or not stat.S_ISDIR(info.st_mode):
        return False
    try:
        entries = list(os.scandir(path))
    except OSError:
        return False
    return all(e.name in names and e.is_file(follow_symlinks=False) and e.stat(follow_symlinks=False).st_nlink == 1
               and (not content or recognised(e.path)) for e in entries)


def owned_link(path: str | Path, target: re.Pattern[str]) -> bool:
    """Whether ``path`` is a symbolic link to a plain name (in its own folder) that ``target`` matches
    in full: a pointer glassformer made (``last -> ckpt-000200``)."""
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
    """Refuse (:class:`NotOursError`) to replace ``path`` unless it is absent or :func:`owned_folder`.

    Args:
        path: the folder a writer is about to replace.
        names: the file names glassformer writes into it.
        what: how the message calls it ("destination", "checkpoint folder").
        content: judge the files' content too (:func:`owned_folder`).
    """
    path = Path(path)
    if _entry(path) is None or owned_folder(path, names, content):
        return
    raise NotOursError(f"{what} {str(path)!r} holds {foreign(path, names, content)}: glassformer replaces only "
                       "folders it wrote (or empty ones); move it away or choose another path")


def remove_owned(path: str | Path, names: Collection[str] = MODEL_FILES, link: re.Pattern[str] | None = None,
                 what: str = "folder", content: bool = True) -> None:
    """Remove ``path`` when it is absent, :func:`owned_folder` (``content``: judged by content too) or
    (with ``link``) :func:`owned_link`; else a :class:`NotOursError` and nothing is removed."""
    path = Path(path)
    if link is not None and owned_link(path, link):
        path.unlink()
        return
    check_replaceable(path, names, what, content)
    remove_path(path)


def check_not_source(target: str | Path, sources: Iterable[str | Path], what: str = "destination") -> None:
    """Refuse a ``target`` that is one of ``sources`` or a folder above one (replacing it would destroy
    the source)."""
    resolved = Path(target).resolve()
    for source in sources:
        source = Path(source).resolve()
        if resolved == source or resolved in source.parents:
            relation = "is" if resolved == source else "contains"
            raise NotOursError(f"{what} {str(target)!r} {relation} the source {str(source)!r}; writing it would "
                               "destroy what is read: choose another path")


def _input_files(inputs: Iterable[str | Path]) -> list[Path]:
    """The files of ``inputs``: a file as it is, a folder as every file under it (a checkpoint folder)."""
    found = []
    for source in inputs:
        source = Path(source)
        if source.is_dir():
            found += [Path(root) / name for root, _dirs, names in os.walk(source) for name in names]
        elif source.exists():
            found.append(source)
    return found


def _same_bytes(path: Path, data: str | bytes | Iterable[bytes] | None) -> bool:
    """Whether the file ``path`` already holds exactly ``data`` (text or bytes; never a stream)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, (bytes, bytearray)):
        return False
    try:
        return os.lstat(path).st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def check_output_file(path: str | Path, inputs: Iterable[str | Path] = (), what: str = "output file",
                      data: str | bytes | Iterable[bytes] | None = None) -> Path:
    """The guard every write of glassformer passes: ``path`` as a Path when a file may be written there.

    Allowed: nothing there, or a regular file with one name (no other hard link) that is none of
    ``inputs`` and that glassformer wrote (:func:`recognised`, by content) or that already holds ``data``;
    never inside a folder among ``inputs`` (a checkpoint read: it would hold a file glassformer cannot
    account for). A link, a folder, a FIFO or device, a hard-linked file,
    an input or a user's file is a :class:`NotOursError` naming the path, before anything is touched.
    """
    path = Path(path)
    inputs = list(inputs)
    where = path.parent.resolve()
    for source in inputs:
        folder = Path(source)
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
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise NotOursError(f"{what} {str(path)!r}: {str(parent)!r} is a file, not a folder")
    return path


def claim_outputs(paths: Iterable[str | Path], inputs: Iterable[str | Path] = (), what: str = "output") -> None:
    """Check every file a command will write (:func:`check_output_file`) before it does any work, so a
    refused output costs nothing; each write checks again when it happens."""
    inputs = list(inputs)
    for path in paths:
        check_output_file(path, inputs, what)


def _head(path: Path, size: int = 4096) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(size)


JSON_KEYS: dict[str, frozenset[str]] = {
    "results.json": frozenset({"task", "generation"}),  # a recipe's results, the demo's
    "metrics.json": frozenset({"tokens"}),  # an SAE's held-out metrics
    "features.json": frozenset({"features"}),
    "lesson2.json": frozenset({"attention_vs_torch"}),
    "tracker.json": frozenset({"run_id"}),
    "microscope.json": frozenset({"watch"}),
    "config.json": frozenset({"vocab_size", "model_type"}),  # a checkpoint's ModelConfig, a Hugging Face config
    "sae.json": frozenset({"format"}),
}
"""JSON files glassformer writes under these names always hold one of these keys: a user's own JSON under
such a name (notes in ``mywork/metrics.json``) is not recognised as glassformer's."""


def _is_json_file(path: Path) -> bool:
    """A JSON document (an object or a list), at most :data:`RECOGNISED_JSON_BYTES` long; under a name
    of :data:`JSON_KEYS`, an object with one of its keys."""
    if os.lstat(path).st_size > RECOGNISED_JSON_BYTES:
        return False
    try:
        value = json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        return False
    keys = JSON_KEYS.get(path.name)
    if keys is not None:
        return isinstance(value, dict) and not keys.isdisjoint(value)
    return isinstance(value, (dict, list))


def _is_records_file(path: Path) -> bool:
    """JSON lines whose first line is an object with an integer ``step`` (metrics.jsonl, microscope.jsonl)."""
    line = _head(path, 1 << 16).split(b"\n", 1)[0]
    if not line.strip():
        return os.lstat(path).st_size == len(line)
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and type(record.get("step")) is int


RECOGNISED_JSON_BYTES = 256 << 20
"""The largest JSON file :func:`recognised` parses to tell whether glassformer wrote it."""

MARKER = "glassformer"
"""The word glassformer puts in the files it writes whose format has room for it: the ``Software`` text of
its PNG figures, the ``generator`` meta of its HTML pages."""

_RECOGNISERS = {
    ".json": _is_json_file,
    ".jsonl": _is_records_file,
    ".html": lambda p: MARKER.encode() in _head(p) and b"<!doctype html" in _head(p).lower(),
    ".png": lambda p: _head(p, 8) == b"\x89PNG\r\n\x1a\n" and MARKER.encode() in _head(p),
    ".safetensors": lambda p: len(_head(p, 9)) == 9 and _head(p, 9)[8:9] == b"{",
    ".pt": lambda p: _head(p, 4) == b"PK\x03\x04",
}


def recognised(path: str | Path) -> bool:
    """Whether the regular file ``path`` is one glassformer may replace, by its content: empty, or in the
    format its name promises (JSON, JSON-lines records, a safetensors or torch file, a PNG or HTML page
    carrying :data:`MARKER`, a lock file holding a pid). Any other file (plain text included) is a user's."""
    path = Path(path)
    try:
        if os.lstat(path).st_size == 0:
            return True
        if path.name == LOCK_FILE:
            return re.fullmatch(rb"\d{0,20}\n?", _head(path, 64)) is not None
        check = _RECOGNISERS.get(path.suffix.lower())
        return bool(check and check(path))
    except OSError:
        return False


@contextmanager
def run_lock(folder: str | Path) -> Iterator[Path]:
    """Hold an exclusive lock on ``folder/.glassformer.lock`` for the block: a second writer of the same
    folder (another trainer) gets a one-line :class:`NotOursError` instead of mixing its files in.

    The lock is ``flock``: the operating system releases it when the process ends, even by ``kill -9``,
    so a crash never leaves a stale lock (only the file, holding the owner's pid, which the next holder
    takes over and removes when done). Where ``fcntl`` is missing (Windows) the block runs unlocked.
    """
    folder = Path(folder)
    file = folder / LOCK_FILE
    try:
        import fcntl
    except ImportError:  # pragma: no cover (Windows)
        yield file
        return
    while True:
        info = _entry(file)
        if info is not None:
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


# ---------------------------------------------------------------------- atomic writers
def atomic_write(path: str | Path, data: str | bytes | Iterable[bytes], *, inputs: Iterable[str | Path] = (),
                 what: str = "file") -> Path:
    """Write ``path`` atomically: into ``.NAME.tmp-PID-RANDOM`` next to it, flushed to disk, renamed over
    ``path`` (its folder fsynced), so a crash or a full disk leaves the old content or the new, never a
    mix, and no temporary file.

    Args:
        data: text (UTF-8), bytes, or an iterable of byte chunks (streamed: a download, a token cache).
        inputs: files the command reads; ``path`` may not be one (:func:`check_output_file`).
        what: how the error message calls the file.
    Raises:
        NotOursError when ``path`` is a folder, a device, a link or an input; a :class:`GlassformerError`
        naming the file when the disk is full.
    """
    path = check_output_file(path, inputs, what, data)
    temp = path.parent / f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with open(temp, "xb") as handle:
            if isinstance(data, str):  # a path name that is not UTF-8 is written as \\udcXX (valid in JSON)
                handle.write(data.encode("utf-8", "backslashreplace"))
            elif isinstance(data, (bytes, bytearray, memoryview)):
                handle.write(data)
            else:
                for chunk in data:
                    handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except OSError as error:
        if is_disk_full(error):
            raise disk_full_error(path) from None
        raise
    finally:
        if _entry(temp) is not None:
            temp.unlink()
    fsync_dir(path.parent)
    return path


@contextmanager
def rust_path(path: str | Path, write: bool = False) -> Iterator[str]:
    """``path`` as a string that a library written in Rust (safetensors, tokenizers) can open.

    Rust takes UTF-8 paths only, while Linux allows any bytes in a name (Python spells those with lone
    surrogates, os.fsdecode). A UTF-8 path is passed as it is. Otherwise the file's folder is opened here
    and the file named through it, ``/proc/self/fd/N/NAME`` (valid while the block runs; a writer may put
    a temporary file beside NAME); a NAME that is itself not UTF-8 is opened for reading as
    ``/proc/self/fd/N``.

    Args:
        path: the file.
        write: the library will create ``path`` (its name must then be UTF-8; its folder need not be).
    Raises:
        GlassformerError naming the path where the system has no /proc/self/fd, or for a file to write
        whose own name is not UTF-8.
    """
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
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_text(text: str) -> str:
    """``text`` with every lone surrogate (a byte of a path name that is not UTF-8, as os.fsdecode spells
    it) written as a ``\\udcXX`` escape: the form any UTF-8 stream, JSON file or page can hold."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` says the disk (or a quota) is full: an OSError ENOSPC/EDQUOT, or what the writers
    underneath say instead (safetensors' Rust ``IoError(... StorageFull ...)``, torch.save's "file write
    failed", tokenizers' "No space left on device (os error 28)")."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    text = str(error)
    return any(words in text for words in ("No space left", "StorageFull", "file write failed", "Disk quota",
                                           "os error 28", "os error 122"))


@contextmanager
def disk_full_names(path: str | Path) -> Iterator[None]:
    """Inside the block, any error that says the disk is full (:func:`is_disk_full`) becomes the one line
    of :func:`disk_full_error` naming ``path``; every other error passes unchanged."""
    try:
        yield
    except Exception as error:
        if is_disk_full(error):
            raise disk_full_error(path) from None
        raise


def disk_full_error(path: str | Path) -> GlassformerError:
    """The one line a full disk gives while ``path`` is written: ``No space left on device: 'PATH'``."""
    return GlassformerError(f"No space left on device: {str(path)!r} (the disk is full; nothing was replaced "
                            "and no partial file is left)")


@contextmanager
def atomic_directory(path: str | Path, names: Collection[str] = MODEL_FILES,
                     sources: Iterable[str | Path] = ()) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``path``; when the block succeeds, it becomes ``path``.

    An existing ``path`` is replaced only when glassformer wrote it (:func:`check_replaceable` with
    ``names``: the files the block writes) and it is none of ``sources`` nor a folder above one
    (:func:`check_not_source`); otherwise :class:`NotOursError` before anything is touched.

    The files are flushed to disk before the rename. An existing ``path`` is moved aside and removed
    only after the new folder is in place, so an exception in the block leaves the previous folder
    intact and no half-written one. A crash between the two renames leaves the previous folder as
    ``.NAME.old-PID``; the next call for the same ``path`` puts it back first. Training checkpoints
    do not use this swap: they are new step folders plus a pointer (:func:`new_directory`,
    :func:`replace_symlink`), which has no such window.

    Args:
        path: the folder to (re)create.
    Yields:
        The temporary folder to write into.
    """
    path = Path(path)
    check_not_source(path, sources)
    check_replaceable(path, names, "destination")
    path.parent.mkdir(parents=True, exist_ok=True)
    restore_moved_aside(path, names)
    temp = _temp_dir_next_to(path)
    try:
        with disk_full_names(path):
            yield temp
            fsync_tree(temp)
        old = None
        if path.exists():
            old = path.parent / f".{path.name}.old-{os.getpid()}"
            os.replace(path, old)
        os.replace(temp, path)
        fsync_dir(path.parent)
        if old is not None:
            shutil.rmtree(old)
    finally:
        if temp.exists():
            shutil.rmtree(temp)


def _temp_dir_next_to(path: Path) -> Path:
    """A new empty folder ``.NAME.tmp-PID-RANDOM`` next to ``path``, with the permissions of any new
    folder (``tempfile.mkdtemp`` would make it private to the user, and so the checkpoint)."""
    while True:
        temp = path.parent / f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            temp.mkdir()
            return temp
        except FileExistsError:
            continue


def restore_moved_aside(path: Path, names: Collection[str] = MODEL_FILES) -> None:
    """Undo a crash between the two renames of :func:`atomic_directory`: ``path`` is missing but the
    previous folder survives as ``.NAME.old-PID``; put the newest such folder back (one glassformer wrote)."""
    if path.exists() or path.is_symlink():
        return
    olds = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if olds and owned_folder(olds[-1], names):
        os.replace(olds[-1], path)


@contextmanager
def new_directory(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``path``; when the block succeeds, its files are
    flushed to disk and the folder is renamed to ``path``, which must not exist yet.

    Nothing is ever replaced, so there is no moment at which neither the old nor the new folder
    exists: a crash leaves either no ``path`` or a complete one (plus a ``.NAME.tmp-*`` leftover
    that :func:`remove_path` can clean). An exception in the block removes the temporary folder.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        raise FileExistsError(f"{str(path)!r} already exists")
    temp = _temp_dir_next_to(path)
    try:
        with disk_full_names(path):
            yield temp
            fsync_tree(temp)
        os.rename(temp, path)
        fsync_dir(path.parent)
    finally:
        if temp.exists():
            shutil.rmtree(temp)


def replace_symlink(link: str | Path, target: str, names: Collection[str] = MODEL_FILES,
                    pattern: re.Pattern[str] | None = None) -> None:
    """Point the symbolic link ``link`` at ``target`` (a name relative to the link's folder) in one
    atomic step: a new link is made under a temporary name and renamed over the old one, so readers
    see the old target or the new one, never no link. A real folder at ``link`` (an older layout)
    is removed first when glassformer wrote it (files among ``names``). A link is replaced only when
    it points to a plain name that ``pattern`` matches (default: any plain name); anything else at
    ``link`` is a :class:`NotOursError`, before anything is touched."""
    link = Path(link)
    if link.is_symlink() and os.readlink(link) == target:
        return
    pattern = pattern or re.compile(r"[^/]+")
    info = _entry(link)
    if info is not None and not owned_link(link, pattern):
        check_replaceable(link, names, "pointer")
    temp = link.parent / f".{link.name}.tmp-{os.getpid()}"
    remove_owned(temp, (), pattern, "temporary link")
    os.symlink(target, temp)
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    os.replace(temp, link)
    fsync_dir(link.parent)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace the file ``path`` with ``text`` (UTF-8) by :func:`atomic_write`."""
    atomic_write(path, text)


def fsync_file(path: str | Path) -> None:
    """Flush the file ``path`` to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | Path) -> None:
    """Flush a folder's entries (names created, renamed or removed) to disk; a no-op where the
    platform cannot open folders (Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_tree(path: str | Path) -> None:
    """Flush every file under ``path``, then the folders themselves (deepest first). Files get the
    ordinary mode of a new file (0644 under umask 022): a library that writes them private (safetensors
    writes 0600) does not decide who may read a checkpoint."""
    folders, mode = [], 0o666 & ~_umask()
    for root, _dirs, files in os.walk(path):
        folders.append(root)
        for name in files:
            os.chmod(os.path.join(root, name), mode)
            fsync_file(os.path.join(root, name))
    for folder in reversed(folders):
        fsync_dir(folder)


def remove_path(path: str | Path) -> None:
    """Remove a file, a symbolic link (not what it points to) or a folder tree; nothing if absent."""
    path = Path(path)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)

"""Writing files and folders so that a crash never leaves a half-written one under the real name.

Every writer builds under a temporary name next to its target, flushes the data to disk (fsync), and
only then renames into place (a rename within a folder is atomic on POSIX filesystems), and fsyncs
the parent folder so that the rename itself survives a power cut.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``path``; when the block succeeds, it becomes ``path``.

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
    path.parent.mkdir(parents=True, exist_ok=True)
    _restore_moved_aside(path)
    temp = _temp_dir_next_to(path)
    try:
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


def _restore_moved_aside(path: Path) -> None:
    """Undo a crash between the two renames of :func:`atomic_directory`: ``path`` is missing but the
    previous folder survives as ``.NAME.old-PID``; put the newest such folder back."""
    if path.exists() or path.is_symlink():
        return
    olds = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if olds and olds[-1].is_dir():
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
        yield temp
        fsync_tree(temp)
        os.rename(temp, path)
        fsync_dir(path.parent)
    finally:
        if temp.exists():
            shutil.rmtree(temp)


def replace_symlink(link: str | Path, target: str) -> None:
    """Point the symbolic link ``link`` at ``target`` (a name relative to the link's folder) in one
    atomic step: a new link is made under a temporary name and renamed over the old one, so readers
    see the old target or the new one, never no link. A real folder at ``link`` (an older layout)
    is removed first."""
    link = Path(link)
    if link.is_symlink() and os.readlink(link) == target:
        return
    temp = link.parent / f".{link.name}.tmp-{os.getpid()}"
    remove_path(temp)
    os.symlink(target, temp)
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    os.replace(temp, link)
    fsync_dir(link.parent)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace the file ``path`` with ``text`` (UTF-8): written to a temporary file, flushed to
    disk and renamed over ``path``, so a crash leaves the old content or the new, never a mix."""
    path = Path(path)
    temp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    fsync_dir(path.parent)


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


def fsync_tree(path: str | Path) -> None:
    """Flush every file under ``path``, then the folders themselves (deepest first)."""
    folders = []
    for root, _dirs, files in os.walk(path):
        folders.append(root)
        for name in files:
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

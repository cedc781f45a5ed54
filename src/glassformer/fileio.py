"""Writing folders atomically: build under a temporary name, then rename into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``path``; when the block succeeds, it becomes ``path``.

    An existing ``path`` is moved aside and removed only after the new folder is in place, so a crash
    (or an exception in the block) leaves the previous folder intact and no half-written one.

    Args:
        path: the folder to (re)create.
    Yields:
        The temporary folder to write into.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        yield temp
        old = None
        if path.exists():
            old = path.parent / f".{path.name}.old-{os.getpid()}"
            os.replace(path, old)
        os.replace(temp, path)
        if old is not None:
            shutil.rmtree(old)
    finally:
        if temp.exists():
            shutil.rmtree(temp)

"""A training run's folder: its step folders and pointers, which of them a resumed run continues
from, how a resume or a fresh start puts the folder in order, and the ownership rule (glassformer
removes or replaces only what it wrote).

    ckpt-000200/        one complete checkpoint per saved step (with train_state.pt)
    last -> ckpt-000200 the newest (a symbolic link, replaced atomically)
    best -> ckpt-000100 the lowest validation loss

:func:`find_resumable` picks the newest complete step folder (the pointers are conveniences for
readers, repaired on resume); :func:`tidy_run` removes what a crash or a pruning left behind. Saving
one step (:func:`~glassformer.training.checkpoint.commit_checkpoint`) is in checkpoint.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..errors import BadFileError, GlassformerError
from ..fileio import (
    LOCK_FILE,
    NotOursError,
    check_output_file,
    foreign,
    owned_folder,
    owned_link,
    remove_owned,
    replace_symlink,
)

# The files of one checkpoint folder (written by glassformer.training.checkpoint).
WEIGHTS, CONFIG, TOKENIZER, TRAINING, STATE = (
    "model.safetensors", "config.json", "tokenizer.json", "training.json", "train_state.pt")

# ---------------------------------------------------------------------- a training run's checkpoints
LAST, BEST = "last", "best"
_STEP_FOLDER = re.compile(r"ckpt-(\d+)")
# What a crash can leave: a step folder, a pointer or metrics.jsonl under construction, or (older
# versions) a folder moved aside by the two-rename swap.
_LEFTOVER = re.compile(r"\.(ckpt-\d+|last|best|metrics\.jsonl)\.(tmp|old)-.*")
_RESUMABLE = (CONFIG, TOKENIZER, WEIGHTS, STATE)
CHECKPOINT_FILES = frozenset({WEIGHTS, CONFIG, TOKENIZER, TRAINING, STATE})
"""What a checkpoint folder holds: a folder with anything else is not one glassformer wrote."""
_POINTS_TO_STEP = re.compile(r"ckpt-\d+")
RUN_FILES = frozenset({"metrics.jsonl", "loss.png", "microscope.jsonl", "microscope.json", "tracker.json",
                       LOCK_FILE})
"""The files a run writes into its out_dir beside the checkpoints (a user's file there is refused at start)."""


def step_folder(out_dir: str | Path, step: int) -> Path:
    """``out_dir/ckpt-000200`` for step 200 (six digits at least; more when the step needs them)."""
    return Path(out_dir) / f"ckpt-{step:06d}"


def _missing(folder: Path) -> list[str]:
    return [name for name in _RESUMABLE if not (folder / name).is_file()]


def _step_folders(out: Path) -> dict[int, Path]:
    """Every ``ckpt-N`` folder of ``out`` (complete or not), by step."""
    found = {}
    for entry in out.iterdir() if out.is_dir() else ():
        match = _STEP_FOLDER.fullmatch(entry.name)
        if match and entry.is_dir() and not entry.is_symlink():
            found[int(match.group(1))] = entry
    return found


def _pointer(out: Path, name: str) -> Path | None:
    """The folder ``out/name`` points to (None when it is not a symbolic link)."""
    link = out / name
    return out / os.readlink(link) if link.is_symlink() else None


Read = TypeVar("Read")


def resolve_pointer(path: str | Path) -> Path:
    """The step folder a run's pointer ``out/last`` (or ``out/best``) names now, read once (the trainer
    may move it at any moment); any other path as it is."""
    path = Path(path)
    try:
        target = os.readlink(path)
    except OSError:  # not a link (or gone): not a pointer
        return path
    return path.parent / target if path.name in (LAST, BEST) and _POINTS_TO_STEP.fullmatch(target) else path


def read_pointed(path: str | Path, read: Callable[[Path], Read], attempts: int = 20) -> Read:
    """``read(folder)`` on the one folder ``path`` names, while a trainer may be moving it.

    ``path`` may be a run's pointer (``out/last``): it is resolved once, so every file comes from the same
    step folder. When reading fails and the pointer has moved meanwhile (the trainer saved a newer step
    and removed the folder read), the new folder is read; a failure with the pointer unmoved is raised.

    Args:
        path: a checkpoint folder, or a run's ``last``/``best`` pointer.
        read: reads one folder (it names the files it reads in its errors).
        attempts: how many moves to follow before giving up (the last failure is raised).
    Returns:
        What ``read`` returned.
    """
    for _ in range(attempts - 1):
        folder = resolve_pointer(path)
        try:
            return read(folder)
        except (GlassformerError, OSError):
            if folder == Path(path) or resolve_pointer(path) == folder:
                raise
    return read(resolve_pointer(path))


def find_resumable(out_dir: str | Path) -> Path | None:
    """The folder a resumed run continues from: the newest complete step folder of ``out_dir``.

    A step folder is complete when it holds config.json, tokenizer.json, model.safetensors and
    train_state.pt; the saver makes one appear under its real name only when it is, so a crash at
    any moment leaves the previous one as the newest. The ``last`` pointer is not trusted (a crash
    between a new folder and its pointer leaves it one step behind or dangling). Checkpoints of the
    older layout (a real ``last/`` folder, or the ``.last.old-PID`` folder that a crash inside its
    swap left) are used when there is no step folder.

    Returns:
        The folder, or None when ``out_dir`` holds no checkpoint at all (then a run starts afresh).
    Raises:
        BadFileError when there are checkpoints but none to resume from (a step folder newer than the
        newest complete one lacks a file, or ``last``/``best`` exist without a complete folder):
        starting afresh would silently throw the run away.
    """
    out = Path(out_dir)
    folders = _step_folders(out)
    complete = {step: folder for step, folder in folders.items() if not _missing(folder)}
    newest = max(complete, default=None)
    damaged = [folder for step, folder in sorted(folders.items()) if step not in complete
               and (newest is None or step > newest)]
    if damaged:
        fallback = f"resume from {complete[newest].name}" if newest is not None else "start afresh"
        lacks = ", ".join(_missing(damaged[-1]))
        raise BadFileError(f"checkpoint folder {str(damaged[-1])!r} is incomplete (no {lacks}): glassformer never "
                           f"leaves one, so it was damaged or copied in part; remove it to {fallback}")
    if newest is not None:
        return complete[newest]
    legacy = [out / LAST, *sorted(out.glob(".last.old-*"), key=lambda p: p.stat().st_mtime, reverse=True)]
    for folder in legacy:
        if folder.is_dir() and not folder.is_symlink() and not _missing(folder):
            return folder
    for name in (LAST, BEST):
        link = out / name
        if link.is_symlink():
            raise BadFileError(f"{str(link)!r} points to {os.readlink(link)!r}, which does not exist, and "
                               f"{str(out)!r} holds no complete checkpoint folder to resume from")
        if link.is_dir():
            raise BadFileError(f"{str(link)!r} cannot be resumed from: it has no {', '.join(_missing(link))}")
    return None


def recover_run(out_dir: str | Path, resumed: Path, best_step: int = -1) -> Path:
    """Put ``out_dir`` in order after resuming from ``resumed`` (what :func:`find_resumable` found):
    ``last`` points at it, ``best`` at the folder of ``best_step`` (recorded in the training state;
    -1: none), and :func:`tidy_run` removes every other step folder and the leftovers of a crash.

    Returns:
        The path that names the resumed checkpoint from now on (``out_dir/last``, or ``resumed``
        itself for a folder of the older layout, which is left where it is until the next save).
    """
    out, resumed = Path(out_dir), Path(resumed)
    check_run_dir(out)
    if _STEP_FOLDER.fullmatch(resumed.name) and resumed.parent.resolve() == out.resolve():
        best = step_folder(out, best_step)
        if best_step >= 0 and not _missing(best):
            replace_symlink(out / BEST, best.name, CHECKPOINT_FILES, _POINTS_TO_STEP)
        replace_symlink(out / LAST, resumed.name, CHECKPOINT_FILES, _POINTS_TO_STEP)
        tidy_run(out, keep=[resumed, _pointer(out, BEST)])
        return out / LAST
    tidy_run(out, keep=[resumed, _pointer(out, BEST)])
    return resumed


def tidy_run(out_dir: str | Path, keep: list[Path | None]) -> list[Path]:
    """Remove leftovers from ``out_dir``: step folders not in ``keep``, temporary folders and links
    of an interrupted save, folders of an older layout moved aside, and dangling pointers.

    Returns:
        What was removed.
    """
    out = Path(out_dir)
    kept = {Path(k).name for k in keep if k is not None}
    removed = []
    for entry in sorted(out.iterdir()) if out.is_dir() else ():
        stale = _STEP_FOLDER.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink()
        if (stale or _LEFTOVER.fullmatch(entry.name)) and entry.name not in kept:
            _remove_ours(entry)
            removed.append(entry)
    for name in (LAST, BEST):
        link = out / name
        if link.is_symlink() and not link.exists() and owned_link(link, _POINTS_TO_STEP):
            link.unlink()
            removed.append(link)
    return removed


def _remove_ours(entry: Path) -> None:
    """Remove one of a run's own entries (a step folder, a pointer, a leftover); anything else is a
    NotOursError and stays."""
    if entry.name.startswith(".metrics.jsonl.") and entry.is_file() and not entry.is_symlink():
        entry.unlink()  # a metrics file under construction
        return
    cut = _LEFTOVER.fullmatch(entry.name) is not None  # a save a crash cut short: its files may be cut too
    remove_owned(entry, CHECKPOINT_FILES, _POINTS_TO_STEP, "checkpoint folder", content=not cut)


def _not_ours(entry: Path) -> str | None:
    """Why ``entry`` of an out_dir, under a name a run writes, is not the run's own (None when it is)."""
    name = entry.name
    if _STEP_FOLDER.fullmatch(name) or name in (LAST, BEST) or _LEFTOVER.fullmatch(name):
        if owned_link(entry, _POINTS_TO_STEP) or owned_folder(entry, CHECKPOINT_FILES,
                                                              content=not _LEFTOVER.fullmatch(name)):
            return None
        if name.startswith(".metrics.jsonl.") and entry.is_file() and not entry.is_symlink():
            return None
        return f"{str(entry)!r} holds {foreign(entry, CHECKPOINT_FILES, content=not _LEFTOVER.fullmatch(name))}"
    if name in RUN_FILES:
        try:
            check_output_file(entry, (), "run file")
        except NotOursError as error:
            return str(error)
    return None


def check_run_dir(out_dir: str | Path) -> None:
    """Refuse, before anything is removed, an ``out_dir`` whose names a run writes (``ckpt-*``,
    ``last``, ``best``, leftovers of a save, :data:`RUN_FILES`) hold something glassformer did not write
    (:func:`~glassformer.fileio.check_output_file`: a link, a hard link, a FIFO, a user's file): a user's
    folder ``best/``, a file ``last``, a folder ``ckpt-5/`` with other files.

    Raises:
        NotOursError naming the first such path and what is in it.
    """
    out = Path(out_dir)
    if not out.is_dir():
        return
    for entry in sorted(out.iterdir()):
        reason = _not_ours(entry)
        if reason is not None:
            raise NotOursError(f"out_dir {str(out)!r} holds a path glassformer did not write: {reason}; glassformer "
                               "removes or replaces only its own checkpoints: move it away or choose another out_dir")


def clear_run(out_dir: str | Path) -> None:
    """Remove a run's checkpoints from ``out_dir`` (step folders, pointers, leftovers, and ``last/``,
    ``best/`` of the older layout): what a run that starts afresh in a used ``out_dir`` does first."""
    out = Path(out_dir)
    check_run_dir(out)
    for name in (LAST, BEST):
        if (out / name).exists() or (out / name).is_symlink():
            _remove_ours(out / name)
    tidy_run(out, keep=[])

"""A training run's folder: step folders (``ckpt-000200/``), pointers (links ``last``, ``best``), ownership."""

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from ..errors import BadFileError, GlassformerError
from ..io.checks import first_line
from ..io.fileio import (
    LOCK_FILE,
    NotOursError,
    check_output_file,
    foreign,
    owned_folder,
    owned_link,
    remove_owned,
    replace_symlink,
)

# The files of one checkpoint folder.
WEIGHTS, CONFIG, TOKENIZER, TRAINING, STATE = (
    "model.safetensors", "config.json", "tokenizer.json", "training.json", "train_state.pt")
LAST, BEST = "last", "best"
_STEP_FOLDER = re.compile(r"ckpt-(\d+)")
# What a crash can leave: a step folder, pointer or metrics.jsonl under construction, or an old swap's folder.
_LEFTOVER = re.compile(r"\.(ckpt-\d+|last|best|metrics\.jsonl)\.(tmp|old)-.*")
_RESUMABLE = (CONFIG, TOKENIZER, WEIGHTS, STATE)
CHECKPOINT_FILES = frozenset({WEIGHTS, CONFIG, TOKENIZER, TRAINING, STATE})  # anything else: not glassformer's
_POINTS_TO_STEP = re.compile(r"ckpt-\d+")
# the files a run writes into its out_dir beside the checkpoints (a user's file there is refused at start)
RUN_FILES = frozenset({"metrics.jsonl", "loss.png", "microscope.jsonl", "microscope.json", "tracker.json",
                       LOCK_FILE})


def step_folder(out_dir: str | Path, step: int) -> Path:
    """``out_dir/ckpt-000200`` for step 200 (six digits at least)."""
    return Path(out_dir) / f"ckpt-{step:06d}"


def _missing(folder: Path) -> list[str]:
    return [name for name in _RESUMABLE if not (folder / name).is_file()]


def _step_folders(out: Path) -> dict[int, Path]:
    """Every ``ckpt-N`` folder of ``out`` (complete or not), by step."""
    return {int(entry.name[5:]): entry for entry in (out.iterdir() if out.is_dir() else ())
            if _STEP_FOLDER.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink()}


def _pointer(out: Path, name: str) -> Path | None:
    """The folder ``out/name`` points to (None when it is not a symbolic link)."""
    link = out / name
    return out / os.readlink(link) if link.is_symlink() else None


Read = TypeVar("Read")


def resolve_pointer(path: str | Path) -> Path:
    """The step folder a run's pointer ``out/last`` (or ``best``) names now, read once; any other path as it is."""
    path = Path(path)
    try:
        target = os.readlink(path)
    except OSError:  # not a link (or gone): not a pointer
        return path
    return path.parent / target if path.name in (LAST, BEST) and _POINTS_TO_STEP.fullmatch(target) else path


def read_pointed(path: str | Path, read: Callable[[Path], Read], attempts: int = 20) -> Read:
    """``read(folder)`` on the one folder ``path`` (or a run's pointer) names; when reading fails because
    a trainer moved the pointer meanwhile, the new folder is read (up to ``attempts`` times)."""
    tries = 0
    while True:
        folder, tries = resolve_pointer(path), tries + 1
        try:
            return read(folder)
        except Exception as error:  # torch's and safetensors' RuntimeErrors too: a file removed while read
            if folder == Path(path) or resolve_pointer(path) == folder:
                raise  # nothing moved: the folder's own error (or a bug) as it is
            if tries >= attempts:
                raise GlassformerError(f"{str(path)!r} moved to another checkpoint {tries} times while it was "
                                       "read (a training is writing it): try again, or read a ckpt-NNNNNN folder "
                                       f"({first_line(error)[:120]})") from None


def find_resumable(out_dir: str | Path) -> Path | None:
    """The newest complete step folder of ``out_dir`` (else an older layout's ``last/``), or None when it
    holds no checkpoint; a BadFileError when it holds checkpoints but none to resume from."""
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


def recover_run(out_dir: str | Path, resumed: Path, best_step: int, keep: list[Path]) -> Path:
    """Put ``out_dir`` in order after resuming from ``resumed``: ``last`` points at it, ``best`` at
    ``best_step``'s folder (-1: none), and :func:`tidy_run` removes the rest but ``keep`` (a kept series).
    Returns the path naming the resumed checkpoint from now on (``out_dir/last``, or ``resumed`` itself for
    the older layout)."""
    out, resumed = Path(out_dir), Path(resumed)
    check_run_dir(out)
    step_layout = _STEP_FOLDER.fullmatch(resumed.name) and resumed.parent.resolve() == out.resolve()
    if not step_layout:
        tidy_run(out, keep=[resumed, _pointer(out, BEST), *keep])
        return resumed
    best = step_folder(out, best_step)
    point_and_tidy(out, resumed, best if best_step >= 0 and not _missing(best) else None, keep)
    return out / LAST


def point_and_tidy(out: Path, last: Path, best: Path | None, keep: Iterable[Path] = ()) -> None:
    """Point ``out/last`` (and ``out/best``, given its folder) at step folders of ``out``, then :func:`tidy_run`
    removes the step folders no pointer needs and ``keep`` (a kept series) does not name."""
    if best is not None:
        replace_symlink(out / BEST, best.name, CHECKPOINT_FILES, _POINTS_TO_STEP)
    replace_symlink(out / LAST, last.name, CHECKPOINT_FILES, _POINTS_TO_STEP)
    tidy_run(out, keep=[last, _pointer(out, BEST), *keep])


def tidy_run(out_dir: str | Path, keep: list[Path | None]) -> list[Path]:
    """Remove and return ``out_dir``'s step folders not in ``keep``, a save's leftovers and dangling pointers."""
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
    """Remove one of a run's own entries; anything else is a NotOursError and stays."""
    if entry.name.startswith(".metrics.jsonl.") and entry.is_file() and not entry.is_symlink():
        entry.unlink()  # a metrics file under construction
        return
    cut = _LEFTOVER.fullmatch(entry.name) is not None  # a save a crash cut short: its files may be cut too
    remove_owned(entry, CHECKPOINT_FILES, _POINTS_TO_STEP, "checkpoint folder", content=not cut)


def _not_ours(entry: Path) -> str | None:
    """Why ``entry`` of an out_dir, under a name a run writes, is not the run's own (None when it is)."""
    name, whole = entry.name, not _LEFTOVER.fullmatch(entry.name)  # a cut save's files may be cut too
    if _STEP_FOLDER.fullmatch(name) or name in (LAST, BEST) or not whole:
        if owned_link(entry, _POINTS_TO_STEP) or owned_folder(entry, CHECKPOINT_FILES, content=whole):
            return None
        if name.startswith(".metrics.jsonl.") and entry.is_file() and not entry.is_symlink():
            return None
        return f"{str(entry)!r} holds {foreign(entry, CHECKPOINT_FILES, content=whole)}"
    if name in RUN_FILES:
        try:
            check_output_file(entry, (), "run file")
        except NotOursError as error:
            return str(error)
    return None


def check_run_dir(out_dir: str | Path) -> None:
    """A NotOursError, before anything is removed, when a name a run writes in ``out_dir`` (``ckpt-*``,
    ``last``, ``best``, a save's leftovers, :data:`RUN_FILES`) holds something glassformer did not write."""
    out = Path(out_dir)
    if not out.is_dir():
        return
    for entry in sorted(out.iterdir()):
        reason = _not_ours(entry)
        if reason is not None:
            raise NotOursError(f"out_dir {str(out)!r} holds a path glassformer did not write: {reason}; glassformer "
                               "removes or replaces only its own checkpoints: move it away or choose another out_dir")


def clear_run(out_dir: str | Path) -> None:
    """Remove a run's checkpoints, pointers and leftovers from ``out_dir`` (a fresh run in a used one)."""
    out = Path(out_dir)
    check_run_dir(out)
    for name in (LAST, BEST):
        if (out / name).exists() or (out / name).is_symlink():
            _remove_ours(out / name)
    tidy_run(out, keep=[])

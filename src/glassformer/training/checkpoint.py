"""Checkpoints: a folder written atomically, loaded with no pickle of arbitrary objects.

    model.safetensors   the weights (safetensors: a header and raw tensor bytes, no code)
    config.json         the ModelConfig
    tokenizer.json      the tokenizer (Tokenizer.save)
    training.json       the training config (written by the trainer; optional)
    train_state.pt      step, optimizer state, RNG states (optional; read with weights_only=True)

The folder is written under a temporary name next to the target, flushed to disk and renamed into
place, so a crash while saving leaves the previous checkpoint intact.

A training run keeps its checkpoints in step folders with pointers (:func:`commit_checkpoint`):

    ckpt-000200/        one complete checkpoint per saved step (with train_state.pt)
    last -> ckpt-000200 the newest (a symbolic link, replaced atomically)
    best -> ckpt-000100 the lowest validation loss

A step folder appears under its real name only once every file in it is on disk, and a pointer is
moved only after its new folder exists, so no crash loses the previous checkpoint.
:func:`find_resumable` picks the newest complete step folder (the pointers are conveniences for
readers, repaired on resume); :func:`tidy_run` removes what a crash or a pruning left behind.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from torch import nn

from ..config import ModelConfig
from ..errors import BadFileError, GlassformerError, MissingFileError, check_inside, load_json
from ..fileio import (
    NotOursError,
    atomic_directory,
    foreign,
    new_directory,
    owned_folder,
    owned_link,
    remove_owned,
    replace_symlink,
)
from ..models import build_model, upgrade_state_dict
from ..models.legacy import upgrade_key
from ..safetensors_header import first_line, torch_dtype
from ..tokenizers import Tokenizer
from .weights import check_sizes, load_tensors, meta_specs, read_header

WEIGHTS, CONFIG, TOKENIZER, TRAINING, STATE = (
    "model.safetensors", "config.json", "tokenizer.json", "training.json", "train_state.pt")


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` read: the model (in eval mode), its tokenizer, and the optional
    training config and training state."""

    model: nn.Module
    tokenizer: Tokenizer
    training: dict[str, Any] | None
    train_state: dict[str, Any] | None


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside DistributedDataParallel and/or torch.compile wrappers."""
    while hasattr(model, "module") or hasattr(model, "_orig_mod"):
        model = getattr(model, "module", None) or model._orig_mod
    return model


def save_checkpoint(path: str | Path, model: nn.Module, tokenizer: Tokenizer, *,
                    training: dict[str, Any] | None = None, train_state: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint folder atomically (temp folder + rename); an existing one is replaced.

    Args:
        model: a TransformerLM or EncoderDecoder (wrappers are removed).
        training: the training config as a JSON-able dict (``training.json``).
        train_state: tensors, numbers, strings and containers of them (``train_state.pt``).
    Returns:
        The checkpoint path.
    """
    path = Path(path)
    with _disk_full_is_one_line(path), atomic_directory(path) as temp:
        _write_files(temp, model, tokenizer, training, train_state)
    return path


class _disk_full_is_one_line:  # noqa: N801 (used as a context manager)
    """Turn a full disk (or quota) while a checkpoint is written into one GlassformerError naming the folder;
    the writers' temporary folder is already gone, and the previous checkpoint is untouched."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, error: BaseException | None, _tb: Any) -> bool:
        if error is None:
            return False
        full = getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or (
            isinstance(error, (OSError, RuntimeError, SafetensorError))
            and any(text in str(error) for text in ("No space left", "file write failed", "Disk quota")))
        if full:
            raise GlassformerError(f"could not write checkpoint {str(self.path)!r}: the disk is full "
                                   f"({str(error).splitlines()[0][:120] if str(error) else 'ENOSPC'}); nothing was "
                                   "replaced and no temporary files are left") from None
        return False


def _write_files(folder: Path, model: nn.Module, tokenizer: Tokenizer, training: dict[str, Any] | None,
                 train_state: dict[str, Any] | None, weights: dict[str, torch.Tensor] | None = None) -> None:
    """The files of a checkpoint, written into ``folder`` (the caller makes it appear atomically);
    ``weights``: the model's full state dict when ``model`` itself holds only shards (FSDP)."""
    model = unwrap(model)
    weights = model.state_dict() if weights is None else weights
    weights = {k: v.detach().to("cpu").contiguous() for k, v in weights.items()}
    save_file(weights, str(folder / WEIGHTS), metadata={"format": "pt"})
    model.config.to_json(folder / CONFIG)
    tokenizer.save(folder / TOKENIZER)
    if training is not None:
        (folder / TRAINING).write_text(json.dumps(training, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if train_state is not None:
        torch.save(train_state, folder / STATE)


def _need(path: Path, name: str) -> Path:
    file = check_inside(path, name)  # no symbolic link out of the folder
    if not file.is_file():
        inside = [str(path / p) for p in ("best", "last") if (path / p).exists()]
        hint = (f"it is a training run's folder: give {' or '.join(repr(p) for p in inside)} (best: the lowest "
                "validation loss)" if inside else "is it a glassformer checkpoint folder?")
        raise MissingFileError(f"checkpoint {str(path)!r} has no {name} ({hint})")
    return file


def load_state_file(file: str | Path) -> dict[str, Any]:
    """Read a ``train_state.pt`` with ``torch.load(weights_only=True)``: tensors and plain containers
    only. A file whose pickle would build other objects (or run code) is refused, never executed."""
    if Path(file).is_file() and Path(file).stat().st_size == 0:
        raise BadFileError(f"{str(file)!r} is empty (zero bytes): the checkpoint was damaged or copied in part")
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


def load_checkpoint(path: str | Path, *, map_location: str | torch.device = "cpu",
                    with_state: bool = False) -> Checkpoint:
    """Read a checkpoint folder written by :func:`save_checkpoint`.

    Args:
        path: the folder.
        map_location: the device the model is moved to.
        with_state: also read ``train_state.pt`` (needed to resume training).
    Raises:
        MissingFileError (a FileNotFoundError) for a missing folder or file; BadFileError (a
        GlassformerError, a ValueError) for a corrupt, truncated or mismatched file (weights that do
        not fit config.json: found from the safetensors header, before any weight is allocated), a
        file that links outside the folder, and a refused pickle. A tokenizer smaller than the
        model's vocabulary is accepted (a padded vocabulary); a larger one is an error.
    """
    path = Path(path)
    if not path.is_dir():
        raise MissingFileError(f"checkpoint folder {str(path)!r} does not exist")
    try:
        device = torch.device(map_location)
    except (RuntimeError, TypeError):
        raise GlassformerError(f"map_location must be a device such as 'cpu' or 'cuda', got {map_location!r}") from None
    for name in (CONFIG, TOKENIZER, WEIGHTS):
        file = _need(path, name)
        if file.stat().st_size == 0:
            raise BadFileError(f"{str(file)!r} is empty (zero bytes): the checkpoint was damaged or copied in part")
    config = ModelConfig.from_json(_need(path, CONFIG))
    tokenizer = Tokenizer.load(_need(path, TOKENIZER))
    if tokenizer.vocab_size > config.vocab_size:  # smaller is fine: a padded vocabulary (ids never produced)
        raise BadFileError(f"checkpoint {str(path)!r} does not match itself: its tokenizer has "
                           f"{tokenizer.vocab_size} ids but config.json says vocab_size={config.vocab_size}")
    # Sizes first, from the safetensors header: nothing is allocated for a config that does not fit.
    files = [_need(path, WEIGHTS)]
    header = read_header(files)
    check_sizes(config, header, str(path / CONFIG))
    names = {upgrade_key(name): name for name in header}  # names written by earlier versions -> today's
    if len(names) < len(header):
        raise BadFileError(f"{path / WEIGHTS} holds a tensor under both an old and a new name")
    specs = meta_specs(config)
    expected = {k: shape for k, (shape, _) in specs.items()}
    missing, unexpected = sorted(set(expected) - set(names)), sorted(set(names) - set(expected))
    wrong = [f"{k}: file {header[names[k]][0]} vs config {tuple(v)}" for k, v in expected.items()
             if k in names and header[names[k]][0] != tuple(v)]
    wrong += [f"{k}: dtype {header[names[k]][1]} in the file, {dtype} in the model" for k, (_, dtype) in specs.items()
              if k in names and torch_dtype(header[names[k]][1]) != dtype]
    if missing or unexpected or wrong:
        detail = "; ".join(filter(None, [f"missing {missing[:3]}" if missing else "",
                                         f"unexpected {unexpected[:3]}" if unexpected else "", "; ".join(wrong[:3])]))
        raise BadFileError(f"{path / WEIGHTS} does not match config.json: {detail}")
    weights = upgrade_state_dict(load_tensors(files))  # NaN or infinity refused there
    model = build_model(config)
    model.load_state_dict(weights)
    model.to(device).eval()
    training = None
    if (path / TRAINING).is_file():
        training = load_json(check_inside(path, TRAINING), "training config")
        if not isinstance(training, dict):
            raise BadFileError(f"training config {str(path / TRAINING)!r} must hold a JSON object, "
                               f"got {type(training).__name__}")
    state = load_state_file(_need(path, STATE)) if with_state else None
    return Checkpoint(model, tokenizer, training, state)


def load(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[nn.Module, Tokenizer]:
    """``(model, tokenizer)`` from a checkpoint folder; the model is in eval mode."""
    checkpoint = load_checkpoint(path, map_location=map_location)
    return checkpoint.model, checkpoint.tokenizer


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
_PNG = b"\x89PNG\r\n\x1a\n"


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


def commit_checkpoint(out_dir: str | Path, step: int, model: nn.Module, tokenizer: Tokenizer, *,
                      training: dict[str, Any] | None, train_state: dict[str, Any], best: bool = False,
                      weights: dict[str, torch.Tensor] | None = None) -> Path:
    """Save the checkpoint of ``step`` as ``out_dir/ckpt-NNNNNN`` and point ``last`` (and, when
    ``best``, ``best``) at it; then remove the folders no pointer needs.

    The order makes every moment safe: the folder is written under a temporary name, flushed to disk
    and renamed (only now does it count); ``best`` then ``last`` are replaced atomically; only then
    are older folders removed. A complete folder of the same step is kept as it is (a run saves a
    step's state once; saving it again, after resuming at the last step, would write the same state).
    ``weights`` stands in for ``model.state_dict()`` when the model is sharded (FSDP): the full one.

    Returns:
        The step folder.
    """
    out = Path(out_dir)
    folder = step_folder(out, step)
    if folder.exists() and _missing(folder):
        remove_owned(folder, CHECKPOINT_FILES, what="checkpoint folder")
    if not folder.exists():
        with _disk_full_is_one_line(folder), new_directory(folder) as temp:
            _write_files(temp, model, tokenizer, training, train_state, weights)
    if best:
        replace_symlink(out / BEST, folder.name, CHECKPOINT_FILES, _POINTS_TO_STEP)
    replace_symlink(out / LAST, folder.name, CHECKPOINT_FILES, _POINTS_TO_STEP)
    tidy_run(out, keep=[folder, _pointer(out, BEST)])
    return folder


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
    remove_owned(entry, CHECKPOINT_FILES, _POINTS_TO_STEP, "checkpoint folder")


def _not_ours(entry: Path) -> str | None:
    """Why ``entry`` of an out_dir, under a name a run writes, is not the run's own (None when it is)."""
    name = entry.name
    if _STEP_FOLDER.fullmatch(name) or name in (LAST, BEST) or _LEFTOVER.fullmatch(name):
        if owned_link(entry, _POINTS_TO_STEP) or owned_folder(entry, CHECKPOINT_FILES):
            return None
        if name.startswith(".metrics.jsonl.") and entry.is_file() and not entry.is_symlink():
            return None
        return f"{str(entry)!r} holds {foreign(entry, CHECKPOINT_FILES)}"
    if name == "metrics.jsonl" and (entry.exists() or entry.is_symlink()):
        if entry.is_symlink() or not entry.is_file():
            return f"{str(entry)!r} is not a regular file"
        if not _is_metrics_file(entry):
            return f"{str(entry)!r} is not a metrics file glassformer wrote (not one JSON record with a 'step' a line)"
    if name == "loss.png" and (entry.exists() or entry.is_symlink()):
        if entry.is_symlink() or not entry.is_file():
            return f"{str(entry)!r} is not a regular file"
        with open(entry, "rb") as handle:
            if handle.read(len(_PNG)) != _PNG:
                return f"{str(entry)!r} is not a PNG image (glassformer draws its loss curve there)"
    return None


def _is_metrics_file(file: Path) -> bool:
    """Whether every complete line of ``file`` is a JSON record with an integer ``step`` (a last line
    without its newline is one a crash cut short, and is not judged)."""
    try:
        lines = file.read_bytes().decode("utf-8").split("\n")[:-1]
        records = [json.loads(line) for line in lines if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return all(isinstance(r, dict) and isinstance(r.get("step"), int) for r in records)


def check_run_dir(out_dir: str | Path) -> None:
    """Refuse, before anything is removed, an ``out_dir`` whose names a run writes (``ckpt-*``,
    ``last``, ``best``, leftovers of a save, ``metrics.jsonl``, ``loss.png``) hold something glassformer
    did not write: a user's folder ``best/``, a file ``last``, a folder ``ckpt-5/`` with other files.

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

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
The run's folder (which step folder a resumed run continues from, its repair, the ownership rule)
is :mod:`glassformer.training.run_dir`'s.
"""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from torch import nn

from ..config import ModelConfig
from ..errors import BadFileError, GlassformerError, MissingFileError, check_inside
from ..fileio import atomic_directory, new_directory, remove_owned, replace_symlink, rust_path, shown_text
from ..loaders import load_json, load_state_file
from ..models import build_model, upgrade_state_dict
from ..models.legacy import upgrade_key
from ..safetensors_header import torch_dtype
from ..tokenizers import Tokenizer

# A run's folder (step folders, pointers, resume, ownership) is run_dir.py's; its names are
# re-exported here, where the trainer and the commands have always imported them.
from .run_dir import (  # noqa: F401
    _POINTS_TO_STEP,
    BEST,
    CHECKPOINT_FILES,
    CONFIG,
    LAST,
    STATE,
    TOKENIZER,
    TRAINING,
    WEIGHTS,
    _missing,
    _pointer,
    check_run_dir,
    clear_run,
    find_resumable,
    read_pointed,
    recover_run,
    step_folder,
    tidy_run,
)
from .weights import check_sizes, load_tensors, meta_specs, read_header


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
    with rust_path(folder / WEIGHTS, write=True) as name_for_rust:
        save_file(weights, name_for_rust, metadata={"format": "pt"})
    model.config.to_json(folder / CONFIG)
    tokenizer.save(folder / TOKENIZER)
    if training is not None:
        (folder / TRAINING).write_text(shown_text(json.dumps(training, indent=2, ensure_ascii=False)) + "\n",
                                       encoding="utf-8")  # a data path that is not UTF-8: \udcXX
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

    A run's pointer (``out/last``) is read once, so every file comes from one step folder, and a read
    the trainer cut short by saving a newer step is done again on it (:func:`~.run_dir.read_pointed`).
    """
    return read_pointed(path, lambda folder: _load_folder(folder, map_location, with_state))


def _load_folder(path: Path, map_location: str | torch.device, with_state: bool) -> Checkpoint:
    """:func:`load_checkpoint` of one folder (not a pointer that may move)."""
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

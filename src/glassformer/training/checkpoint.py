"""Checkpoints: a folder (model.safetensors, config.json, tokenizer.json, training.json, train_state.pt)
written atomically (a crash leaves the previous one intact) and loaded with no pickle of arbitrary objects."""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from ..config import ModelConfig
from ..errors import BadFileError, GlassformerError, MissingFileError
from ..io.checks import check_inside
from ..io.fileio import atomic_directory, disk_full_names, new_directory, remove_owned, rust_path, shown_text
from ..io.loaders import MAX_CONFIG_BYTES, load_json, load_state_file
from ..io.safetensors_header import DTYPES, read_header
from ..models import build_model, upgrade_state_dict
from ..models.legacy import upgrade_key
from ..tokenizers import Tokenizer
from .run_dir import (
    CHECKPOINT_FILES,
    CONFIG,
    STATE,
    TOKENIZER,
    TRAINING,
    WEIGHTS,
    _missing,
    point_and_tidy,
    read_pointed,
    step_folder,
)
from .weights import check_sizes, load_tensors, meta_specs


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` read: the model (in eval mode), tokenizer, optional training config and state."""

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
    """Write ``model`` (wrappers removed), ``tokenizer``, ``training`` (JSON-able) and ``train_state``
    (tensors, numbers, strings) as a checkpoint folder, atomically (replacing one); returns ``path``."""
    path = Path(path)
    with disk_full_names(path), atomic_directory(path) as temp:
        _write_files(temp, model, tokenizer, training, train_state)
    return path


def _write_files(folder: Path, model: nn.Module, tokenizer: Tokenizer, training: dict[str, Any] | None,
                 train_state: dict[str, Any] | None, weights: dict[str, torch.Tensor] | None = None) -> None:
    """A checkpoint's files, written into ``folder``; ``weights``: the full state dict of a sharded (FSDP) model."""
    model = unwrap(model)
    full = model.state_dict() if weights is None else weights
    weights = {k: v.detach().to("cpu").contiguous() for k, v in full.items()}
    with rust_path(folder / WEIGHTS, write=True) as name_for_rust:
        save_file(weights, name_for_rust, metadata={"format": "pt"})
    # into the new folder (nothing else is there): plain writes, whose temporary names no crash could leave behind
    (folder / CONFIG).write_text(model.config.to_json(), encoding="utf-8")
    (folder / TOKENIZER).write_text(json.dumps(tokenizer.to_dict(), ensure_ascii=False), encoding="utf-8")
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
    if file.stat().st_size == 0:
        raise BadFileError(f"{str(file)!r} is empty (zero bytes): the checkpoint was damaged or copied in part")
    return file


def load_checkpoint(path: str | Path, *, map_location: str | torch.device = "cpu",
                    with_state: bool = False) -> Checkpoint:
    """Read a checkpoint folder (``with_state``: also ``train_state.pt``; a run's ``out/last`` is read once). A
    missing file is a MissingFileError, a corrupt, mismatched or linked-out one a BadFileError (before allocation)."""
    return read_pointed(path, lambda folder: _load_folder(folder, map_location, with_state))


def _load_folder(path: Path, map_location: str | torch.device, with_state: bool) -> Checkpoint:
    if not path.is_dir():
        raise MissingFileError(f"checkpoint folder {str(path)!r} does not exist")
    try:
        device = torch.device(map_location)
    except (RuntimeError, TypeError):
        raise GlassformerError(f"map_location must be a device such as 'cpu' or 'cuda', got {map_location!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise GlassformerError(f"map_location={map_location!r} asks for a GPU, but torch {torch.__version__} sees no "
                               "CUDA device here: use map_location='cpu'")
    config_file, tokenizer_file, weights_file = [_need(path, name) for name in (CONFIG, TOKENIZER, WEIGHTS)]
    config = ModelConfig.from_json(config_file)
    tokenizer = Tokenizer.load(tokenizer_file)
    if tokenizer.vocab_size > config.vocab_size:  # smaller is fine: a padded vocabulary (ids never produced)
        raise BadFileError(f"checkpoint {str(path)!r} does not match itself: its tokenizer has "
                           f"{tokenizer.vocab_size} ids but config.json says vocab_size={config.vocab_size}")
    # sizes first, from the safetensors header: nothing is allocated for a config that does not fit
    header = read_header([weights_file])
    check_sizes(config, header, str(path / CONFIG))
    names = {upgrade_key(name): name for name in header}  # names written by earlier versions -> today's
    if len(names) < len(header):
        raise BadFileError(f"{path / WEIGHTS} holds a tensor under both an old and a new name")
    specs = meta_specs(config)
    missing, unexpected = sorted(set(specs) - set(names)), sorted(set(names) - set(specs))
    wrong = [f"{k}: file {header[names[k]][0]} vs config {tuple(v)}" for k, (v, _) in specs.items()
             if k in names and header[names[k]][0] != tuple(v)]
    wrong += [f"{k}: dtype {header[names[k]][1]} in the file, {dtype} in the model" for k, (_, dtype) in specs.items()
              if k in names and DTYPES.get(header[names[k]][1]) != dtype]
    if missing or unexpected or wrong:
        detail = "; ".join(filter(None, [f"missing {missing[:3]}" if missing else "",
                                         f"unexpected {unexpected[:3]}" if unexpected else "", "; ".join(wrong[:3])]))
        raise BadFileError(f"{path / WEIGHTS} does not match config.json: {detail}")
    weights = upgrade_state_dict(load_tensors([weights_file]))  # NaN or infinity refused there
    model = build_model(config)
    model.load_state_dict(weights)
    model.to(device).eval()
    training = load_json(check_inside(path, TRAINING), "training config", MAX_CONFIG_BYTES) \
        if (path / TRAINING).is_file() else None
    if (path / TRAINING).is_file() and not isinstance(training, dict):
        raise BadFileError(f"training config {str(path / TRAINING)!r} must hold a JSON object, "
                           f"got {type(training).__name__}")
    return Checkpoint(model, tokenizer, training, load_state_file(_need(path, STATE)) if with_state else None)


def load(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[nn.Module, Tokenizer]:
    """``(model, tokenizer)`` from a checkpoint folder; the model is in eval mode."""
    checkpoint = load_checkpoint(path, map_location=map_location)
    return checkpoint.model, checkpoint.tokenizer


def commit_checkpoint(out_dir: str | Path, step: int, model: nn.Module, tokenizer: Tokenizer, *,
                      training: dict[str, Any] | None, train_state: dict[str, Any], best: bool = False,
                      weights: dict[str, torch.Tensor] | None = None, keep: Iterable[Path] = ()) -> Path:
    """Save ``step``'s checkpoint (``weights``: a sharded model's full state) as ``out_dir/ckpt-NNNNNN`` unless
    complete already, point ``last`` (and ``best``) at it, remove folders no pointer needs and ``keep`` does
    not name (a kept series); returns the folder."""
    out = Path(out_dir)
    folder = step_folder(out, step)
    if folder.exists() and _missing(folder):
        remove_owned(folder, CHECKPOINT_FILES, what="checkpoint folder")
    if not folder.exists():
        with disk_full_names(folder), new_directory(folder) as temp:
            _write_files(temp, model, tokenizer, training, train_state, weights)
    point_and_tidy(out, folder, folder if best else None, keep)
    return folder

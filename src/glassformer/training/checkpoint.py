"""Checkpoints: a folder written atomically, loaded with no pickle of arbitrary objects.

    model.safetensors   the weights (safetensors: a header and raw tensor bytes, no code)
    config.json         the ModelConfig
    tokenizer.json      the tokenizer (Tokenizer.save)
    training.json       the training config (written by the trainer; optional)
    train_state.pt      step, optimizer state, RNG states (optional; read with weights_only=True)

The folder is written under a temporary name next to the target and renamed into place, so a
crash while saving leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..config import ModelConfig
from ..errors import GlassformerError, MissingFileError
from ..fileio import atomic_directory
from ..models import build_model, upgrade_state_dict
from ..tokenizers import Tokenizer

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
    model = unwrap(model)
    with atomic_directory(path) as temp:
        weights = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        save_file(weights, str(temp / WEIGHTS), metadata={"format": "pt"})
        model.config.to_json(temp / CONFIG)
        tokenizer.save(temp / TOKENIZER)
        if training is not None:
            (temp / TRAINING).write_text(json.dumps(training, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if train_state is not None:
            torch.save(train_state, temp / STATE)
    return path


def _need(path: Path, name: str) -> Path:
    file = path / name
    if not file.is_file():
        raise MissingFileError(f"checkpoint {str(path)!r} has no {name} (is it a glassformer checkpoint folder?)")
    return file


def load_state_file(file: str | Path) -> dict[str, Any]:
    """Read a ``train_state.pt`` with ``torch.load(weights_only=True)``: tensors and plain containers
    only. A file whose pickle would build other objects (or run code) is refused, never executed."""
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise GlassformerError(f"refused to load {str(file)!r}: it holds objects other than tensors and plain "
                               f"containers, so it was not unpickled ({str(error).splitlines()[0]})") from None
    except (RuntimeError, EOFError, OSError) as error:
        raise GlassformerError(f"{str(file)!r} is corrupt or truncated ({str(error).splitlines()[0]})") from None
    if not isinstance(state, dict):
        raise GlassformerError(f"{str(file)!r} must hold a dict, got {type(state).__name__}")
    return state


def load_checkpoint(path: str | Path, *, map_location: str | torch.device = "cpu",
                    with_state: bool = False) -> Checkpoint:
    """Read a checkpoint folder written by :func:`save_checkpoint`.

    Args:
        path: the folder.
        map_location: the device the model is moved to.
        with_state: also read ``train_state.pt`` (needed to resume training).
    Raises:
        FileNotFoundError for a missing folder or file; ValueError for a corrupt, truncated or
        mismatched file (weights that do not fit config.json) and for a refused pickle.
    """
    path = Path(path)
    if not path.is_dir():
        raise MissingFileError(f"checkpoint folder {str(path)!r} does not exist")
    try:
        config = ModelConfig.from_json(_need(path, CONFIG))
    except json.JSONDecodeError as error:
        raise GlassformerError(f"{path / CONFIG} is not valid JSON ({error.msg})") from None
    try:
        tokenizer = Tokenizer.load(_need(path, TOKENIZER))
    except (json.JSONDecodeError, KeyError) as error:
        raise GlassformerError(f"{path / TOKENIZER} is corrupt ({error})") from None
    if tokenizer.vocab_size != config.vocab_size:
        raise GlassformerError(f"checkpoint {str(path)!r} does not match itself: tokenizer has {tokenizer.vocab_size} "
                               f"ids but config.json says vocab_size={config.vocab_size}")
    try:
        weights = load_file(str(_need(path, WEIGHTS)))
    except FileNotFoundError:
        raise
    except Exception as error:  # safetensors raises its own SafetensorError for bad headers and sizes
        raise GlassformerError(f"{path / WEIGHTS} is corrupt or truncated ({str(error).splitlines()[0]})") from None
    weights = upgrade_state_dict(weights)  # names written by earlier versions -> today's
    model = build_model(config)
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    wrong = [f"{k}: file {tuple(weights[k].shape)} vs config {tuple(v.shape)}" for k, v in expected.items()
             if k in weights and weights[k].shape != v.shape]
    if missing or unexpected or wrong:
        detail = "; ".join(filter(None, [f"missing {missing[:3]}" if missing else "",
                                         f"unexpected {unexpected[:3]}" if unexpected else "", "; ".join(wrong[:3])]))
        raise GlassformerError(f"{path / WEIGHTS} does not match config.json: {detail}")
    model.load_state_dict(weights)
    model.to(map_location).eval()
    training = None
    if (path / TRAINING).is_file():
        training = json.loads((path / TRAINING).read_text(encoding="utf-8"))
    state = load_state_file(_need(path, STATE)) if with_state else None
    return Checkpoint(model, tokenizer, training, state)


def load(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[nn.Module, Tokenizer]:
    """``(model, tokenizer)`` from a checkpoint folder; the model is in eval mode."""
    checkpoint = load_checkpoint(path, map_location=map_location)
    return checkpoint.model, checkpoint.tokenizer

"""Replay the training microscope over saved checkpoints: load each and record what training would have
recorded at its step (:func:`glassformer.interpret.microscope.replay`), the user's measurements too."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import GlassformerError, MissingFileError, check_int
from ..interpret.microscope import Measurement, replay
from .checkpoint import load

Checkpoints = Sequence[str | Path] | dict[int, str | Path] | str | Path


def checkpoint_steps(checkpoints: Checkpoints) -> list[tuple[int, Path]]:
    """(step, folder) pairs, by step: a {step: folder} mapping as given; one folder holding checkpoint
    folders (``ckpt-000200``...) expanded; a list's step read from the last number in each folder's
    name (else its place in the list).

    Raises:
        GlassformerError when no checkpoint folder is found.
    """
    if isinstance(checkpoints, dict):
        pairs = [(check_int("checkpoints step", s, 0), Path(p)) for s, p in checkpoints.items()]
    else:
        paths = [Path(checkpoints)] if isinstance(checkpoints, (str, Path)) else [Path(p) for p in checkpoints]
        if len(paths) == 1 and paths[0].is_dir() and not (paths[0] / "config.json").is_file():
            paths = sorted(p for p in paths[0].iterdir()
                           if p.is_dir() and not p.is_symlink() and (p / "config.json").is_file())
        pairs = []
        for place, path in enumerate(paths):
            numbers = re.findall(r"\d+", path.name)
            pairs.append((int(numbers[-1]) if numbers else place, path))
    if not pairs:
        raise GlassformerError(f"no checkpoint folders in {str(checkpoints)!r:.80}")
    missing = [str(path) for _, path in pairs if not (path / "config.json").is_file()]
    if missing:
        raise MissingFileError(f"not a checkpoint folder (no config.json): {missing[0]!r}"
                               + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    return sorted(pairs, key=lambda pair: pair[0])


def replay_checkpoints(checkpoints: Checkpoints, out_dir: str | Path | None = None, *,
                       measurements: dict[str, Measurement] | None = None, watch: dict[str, Any] | None = None,
                       probe_text: torch.Tensor | None = None,
                       map_location: str | torch.device = "cpu") -> list[dict[str, Any]]:
    """Load each checkpoint (one at a time) and record the microscope's probes and ``measurements`` on it.

    Args:
        checkpoints: folders (see :func:`checkpoint_steps`).
        out_dir, measurements, watch, probe_text: as :func:`~glassformer.interpret.microscope.replay`.
        map_location: where the models are loaded.
    Returns:
        The records, one per checkpoint, by step.
    """
    pairs = checkpoint_steps(checkpoints)

    def series() -> Iterator[tuple[int, Any, Any]]:
        for step, folder in pairs:
            model, tokenizer = load(folder, map_location)
            yield step, model, tokenizer
    return replay(series(), out_dir, measurements=measurements, watch=watch, probe_text=probe_text)

"""Replay the training microscope over saved checkpoints (:func:`glassformer.training.microscope.replay`)."""

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import GlassformerError, MissingFileError, NotOursError
from ..io.checks import check_int
from ..io.fileio import check_not_source
from .checkpoint import load
from .metrics import METRICS
from .microscope import Measurement, recorded_probe, replay

Checkpoints = Sequence[str | Path] | dict[int, str | Path] | str | Path


def checkpoint_steps(checkpoints: Checkpoints) -> list[tuple[int, Path]]:
    """(step, folder) pairs, by step: a {step: folder} mapping as given; a folder of checkpoint folders
    expanded; a list's step read from the last number in each name (else its place). None found: an error."""
    if isinstance(checkpoints, dict):
        pairs = [(check_int("checkpoints step", s, 0), Path(p)) for s, p in checkpoints.items()]
    else:
        paths = [Path(checkpoints)] if isinstance(checkpoints, (str, Path)) else [Path(p) for p in checkpoints]
        if len(paths) == 1 and paths[0].is_dir() and not (paths[0] / "config.json").is_file():
            paths = sorted(p for p in paths[0].iterdir()
                           if p.is_dir() and not p.is_symlink() and (p / "config.json").is_file())
        numbers = [re.findall(r"\d+", path.name) for path in paths]
        pairs = [(int(n[-1]) if n else place, path) for place, (n, path) in enumerate(zip(numbers, paths))]
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
    """The microscope's records of each checkpoint (loaded one at a time), by step; see ``microscope.replay``.
    Checkpoints of a watched training run (folders beside its ``microscope.json``) replay with the run's probe
    text and, unless ``watch`` is given, its watch settings: a record and its replay are equal.
    ``out_dir`` may not hold a checkpoint read nor a training's records (its microscope.jsonl would be replaced):
    a NotOursError, before any checkpoint is loaded."""
    steps = checkpoint_steps(checkpoints)
    if out_dir is not None:
        check_not_source(out_dir, [folder for _, folder in steps], "replay out_dir")
        if (Path(out_dir) / METRICS).exists() or (Path(out_dir) / "last").exists():
            raise NotOursError(f"replay out_dir {str(out_dir)!r} is a training's run folder (it has {METRICS} or "
                               "last): its microscope.jsonl would be replaced; choose another out_dir")
    if probe_text is None:  # a training run's series: its microscope's probe text and settings, as recorded
        recorded = next(filter(None, map(recorded_probe, dict.fromkeys(folder.parent for _, folder in steps))), None)
        if recorded is not None:
            probe_text = recorded[0]
            watch = recorded[1] if watch is None else watch
    series = ((step, *load(folder, map_location)) for step, folder in steps)
    return replay(series, out_dir, measurements=measurements, watch=watch, probe_text=probe_text)

"""A series of kept checkpoints (``keep_checkpoints``): which steps a run keeps beside ``last`` and ``best``
(every N steps, or log-spaced), and the disk they take, said and checked before training (docs/training.md)."""

import json
import math
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import GlassformerError
from ..io.budget import human
from ..io.checks import shown

KEEP_CHOICES = "'none', 'log' or a number of steps N >= 1 (every N-th step's checkpoint is kept)"


def parse_keep(value: Any) -> str:
    """``keep_checkpoints`` as stored: "none", "log", or N (digits, N >= 1) from its text (TrainConfig makes
    YAML's int a string first); an error else."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("none", "0", "log"):
            return "none" if text == "0" else text
        if text.isdigit() and int(text) >= 1:
            return str(int(text))
    raise GlassformerError(f"keep_checkpoints must be {KEEP_CHOICES}, got {shown(value)}")


def kept_steps(keep: str, max_steps: int) -> list[int]:
    """The steps whose checkpoints a run keeps (``keep`` as :func:`parse_keep` stores it), from 0 (the
    weights before training) to ``max_steps``: "log" keeps about two per doubling (0, 1, 2, 3, 4, 6, 8, 11,
    16, 23, ...) and the last step; N every N-th step and the last; "none" nothing."""
    if keep == "none":
        return []
    if keep == "log":
        steps = {0, max_steps} | {round(2 ** (k / 2)) for k in range(int(2 * math.log2(max(max_steps, 1))) + 1)}
    else:
        steps = {*range(0, max_steps + 1, int(keep)), max_steps}
    return sorted(s for s in steps if 0 <= s <= max_steps)


def checkpoint_bytes(model: nn.Module, tokenizer: Any, optimizer: Any, training: dict[str, Any],
                     stepped: bool = True) -> int:
    """About what one checkpoint folder of ``model`` takes on disk: the weights (safetensors), the optimizer's
    state as it is once training has stepped (AdamW: two moments per parameter; Muon: one buffer; none at step
    0: ``stepped`` False), the RNG state and the JSON files; within a few percent for any size (a tiny model's
    is mostly per-tensor headers)."""
    weights = model.state_dict()
    size = sum(t.numel() * t.element_size() + len(name) + 64 for name, t in weights.items()) + 128
    parts = getattr(optimizer, "parts", {"": optimizer}).values() if stepped else ()  # Optimizers(...) or one
    for part in parts:
        moments = 2 if isinstance(part, torch.optim.AdamW) else 1
        for group in part.param_groups:
            for p in group["params"]:
                # each state tensor: its bytes and ~290 of zip entry and pickle; AdamW's step counter is one more
                size += moments * (p.numel() * p.element_size() + 290) + (290 if moments == 2 else 0)
    size += torch.get_rng_state().numel() + 1_000  # the CPU generator's state, the rest of the pickle and zip
    size += len(model.config.to_json()) + len(json.dumps(tokenizer.to_dict(), ensure_ascii=False).encode())
    return size + len(json.dumps(training, indent=2, ensure_ascii=False).encode()) + 1


def check_series_disk(out_dir: str | Path, steps: list[int], each: int, first: int, after: int = -1) -> str:
    """The start line of a run keeping ``steps`` (those after ``after`` still to write, ``each`` bytes
    apiece, ``first`` for step 0's); a GlassformerError, before training, when they do not fit the free disk
    of ``out_dir``."""
    to_write = [s for s in steps if s > after]
    place = next((p for p in (Path(out_dir), *Path(out_dir).parents) if p.exists()), Path("."))  # out_dir may be new
    needed, free = sum(first if s == 0 else each for s in to_write), shutil.disk_usage(place).free
    line = (f"keep_checkpoints: {len(steps)} checkpoints (steps {_listed(steps)}), about {human(each)} each: "
            f"{human(needed)} more on disk ({human(free)} free)")
    if needed > free:
        raise GlassformerError(f"keep_checkpoints needs about {human(needed)} for {len(to_write)} checkpoints of "
                               f"{human(each)} in {str(out_dir)!r}, whose disk has {human(free)} free: keep fewer "
                               "(a larger N, or 'log') or free some space")
    return line


def _listed(steps: list[int]) -> str:
    return ", ".join(map(str, steps)) if len(steps) <= 8 else \
        f"{', '.join(map(str, steps[:5]))}, ..., {', '.join(map(str, steps[-2:]))}"


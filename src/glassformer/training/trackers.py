"""Experiment trackers (``log``: none, tensorboard, wandb, or both joined by a comma); W&B is offline unless
``WANDB_MODE=online``. A resumed run continues the same tracker run and never logs a step twice."""

import contextlib
import importlib.util
import json
import math
import os
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import GlassformerError
from ..io.checks import is_int
from ..io.fileio import NotOursError
from ..io.loaders import load_json

KINDS = ("none", "tensorboard", "wandb")  # each tracker's package (and extra) has its name
EVENTS = "events.out.tfevents."  # the names of the event files TensorBoard writes
STATE = "tracker.json"  # the tracker run's id and the last step each tracker holds


def parse_log(value: str, installed: bool = True) -> list[str]:
    """The trackers ``value`` names ("none" -> []); an unknown one (or with ``installed``, one whose library is
    not installed) is a GlassformerError."""
    names = [part.strip() for part in str(value).split(",") if part.strip()]
    if not names or any(name not in KINDS for name in names):
        raise GlassformerError(f"log must be one of {list(KINDS)} or several joined by commas, got {value!r}")
    names = [name for name in dict.fromkeys(names) if name != "none"]
    for name in names if installed else ():
        if importlib.util.find_spec(name) is None:
            raise GlassformerError(f"log {name!r} needs the {name} package: pip install 'glassformer[{name}]'")
    return names


def finite_numbers(values: Mapping[str, Any]) -> dict[str, float]:
    """The finite int/float entries of ``values`` as floats."""
    return {str(k): float(v) for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class Tracker:
    """The interface, and the tracker of ``log: none``: every method does nothing."""

    name = "none"

    def log(self, step: int, values: Mapping[str, Any]) -> None:
        """Record ``values`` (name -> number) at ``step``."""

    def text(self, name: str, text: str) -> None:
        """Record a piece of text (the precision line, the kernel choices) once."""

    def close(self) -> None:
        """Write everything out and end the run (the object is not used after)."""


class TensorBoardTracker(Tracker):
    """Scalars and text as TensorBoard event files in ``folder`` (``torch.utils.tensorboard``)."""

    name = "tensorboard"

    def __init__(self, folder: Path, config: Mapping[str, Any], resume_step: int | None):
        from torch.utils.tensorboard import SummaryWriter
        if resume_step is None and folder.is_dir():  # a fresh run: remove the earlier run's curves (only event files)
            foreign = [e.name for e in folder.iterdir() if not (e.is_file() and e.name.startswith(EVENTS))]
            if foreign:
                raise NotOursError(f"{str(folder)!r} holds {foreign[0]!r}, which glassformer did not write there; "
                                   "move it away or choose another out_dir")
            shutil.rmtree(folder)
        # purge_step: events after the checkpoint resumed from (a crashed run's last ones) are hidden
        self.writer = SummaryWriter(str(folder), purge_step=None if resume_step is None else resume_step + 1)
        if resume_step is None:
            self.text("config", "```\n" + json.dumps(dict(config), indent=2, default=str) + "\n```")

    def log(self, step: int, values: Mapping[str, Any]) -> None:
        for key, value in finite_numbers(values).items():
            self.writer.add_scalar(key, value, step)

    def text(self, name: str, text: str) -> None:
        self.writer.add_text(name, text)

    def close(self) -> None:
        self.writer.close()


class WandbTracker(Tracker):
    """A W&B run in ``folder``/wandb, offline unless ``WANDB_MODE=online``; resumed by its saved id."""

    name = "wandb"

    def __init__(self, folder: Path, config: Mapping[str, Any], run_id: str, resumed: bool):
        import wandb
        folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(dir=str(folder), id=run_id, resume="allow" if resumed else None,
                              mode=os.environ.get("WANDB_MODE", "offline"),  # online only when the user says so
                              project=os.environ.get("WANDB_PROJECT", "glassformer"), name=folder.name or None,
                              config=dict(config), settings=wandb.Settings(silent=True, console="off"))

    def log(self, step: int, values: Mapping[str, Any]) -> None:
        self.run.log(finite_numbers(values), step=step)

    def text(self, name: str, text: str) -> None:
        self.run.summary[name] = text

    def close(self) -> None:
        self.run.finish()


class Trackers(Tracker):
    """The trackers of one run, as one (``trainer.tracker``). ``log`` passes each step on once: a step a
    tracker already holds (``logged_through``, kept in ``out_dir/tracker.json``) is skipped there."""

    def __init__(self, out_dir: Path, trackers: list[Tracker], state: dict[str, Any]):
        self.out, self.trackers, self.state = out_dir, trackers, state
        self.held = dict(state["logged_through"])  # what each tracker held when the run (re)started

    def log(self, step: int, values: Mapping[str, Any]) -> None:
        if not self.trackers:
            return
        for tracker in self.trackers:
            if step > self.held.get(tracker.name, -1):
                tracker.log(step, values)
                self.state["logged_through"][tracker.name] = step
        _write_state(self.out, self.state)

    def text(self, name: str, text: str) -> None:
        for tracker in self.trackers:
            tracker.text(name, text)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()
        self.trackers = []


def _write_state(out: Path, state: dict[str, Any]) -> None:
    """``out_dir/tracker.json`` replaced at once (no fsync: it is written at every log)."""
    temp = out / f".{STATE}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    with open(temp, "x", encoding="utf-8") as handle:  # a new name: never through a link someone put there
        handle.write(json.dumps(state) + "\n")
    os.replace(temp, out / STATE)


def open_trackers(log: str, out_dir: str | Path, config: Mapping[str, Any], resume_step: int | None) -> Trackers:
    """Start (or, given ``resume_step``, continue) the trackers ``log`` names for the run in ``out_dir``."""
    names = parse_log(log)
    out = Path(out_dir)
    state: dict[str, Any] = {}
    if names and resume_step is not None and (out / STATE).is_file():
        with contextlib.suppress(OSError, ValueError):  # unreadable: a new tracker run, as for a damaged one below
            state = load_json(out / STATE, "tracker state")
    held = state.get("logged_through") if isinstance(state, dict) else None  # a damaged file: a new tracker run
    if not (isinstance(held, dict) and isinstance(state.get("run_id"), str) and all(map(is_int, held.values()))):
        resume_step, state = None, {"run_id": f"gf-{secrets.token_hex(4)}", "logged_through": {}}
    resumed = resume_step is not None
    if resumed:  # steps after the checkpoint are logged again by a tracker that can replace them
        state["logged_through"]["tensorboard"] = resume_step
    trackers: list[Tracker] = [TensorBoardTracker(out / "tensorboard", config, resume_step) if name == "tensorboard"
                               else WandbTracker(out, config, state["run_id"], resumed) for name in names]
    if names:
        out.mkdir(parents=True, exist_ok=True)
        _write_state(out, state)
    return Trackers(out, trackers, state)


def console_line(record: Mapping[str, Any], max_steps: int) -> str:
    """One line for a log record where no progress bar is drawn:
    ``step 50/2000 | train_loss 2.4312 | lr 1.00e-03 | 3,412 tok/s`` or ``step 250/2000 | val_loss ...``."""
    parts = [f"step {record['step']}/{max_steps}"]
    for key, value in record.items():
        if key == "step" or key.endswith("_tokens") or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        parts.append(f"{value:,.0f} tok/s" if key == "tokens_per_s" else f"lr {value:.2e}" if key == "lr"
                     else f"{key} {value:.4f}")
    return " | ".join(parts)

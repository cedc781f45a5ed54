"""One call from a model (or a checkpoint) to a trained, measured SAE with its feature pages: ``out_dir``
gets ``sae/``, ``metrics.json``, ``features.json`` and the training ``state/`` (docs/sae.md).
"""

import json
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from torch import nn

from ...errors import GlassformerError
from ...io.fileio import (
    LOCK_FILE,
    atomic_write,
    check_folder,
    claim_outputs,
    owned_folder,
    remove_owned,
    remove_path,
    restore_moved_aside,
    run_lock,
)
from .features import feature_summary
from .loop import STATE_DIR, STATE_FILE, ActivationTrainer
from .metrics import evaluate_sae
from .model import SAE_FILES, SparseAutoencoder, is_sae_folder, save_sae
from .train import SAETrainConfig, SAETrainer

OUTPUT_FILES = ("metrics.json", "features.json", "features.html", "tracker.json", LOCK_FILE)
"""The files an SAE run writes into its out_dir beside the folders sae/ and state/."""


def _check_out_dir(out: Path, inputs: list[Path]) -> None:
    """Refuse, touching nothing, an out_dir whose sae/, state/ or :data:`OUTPUT_FILES` are not ours."""
    for name in ("sae", STATE_DIR):
        if ((out / name).exists() or (out / name).is_symlink()) and not is_sae_folder(out / name):
            raise GlassformerError(f"{str(out / name)!r} exists and glassformer did not write it; choose "
                                   "another out_dir (it was left untouched)")
    claim_outputs([out / name for name in OUTPUT_FILES], inputs, "SAE output")


def tidy_out_dir(out: Path, folders: dict[str, Collection[str]], resume: bool, what: str) -> None:
    """With ``out`` locked: undo what a kill left mid-save in each of ``folders`` (name -> the files it may
    hold): put a folder moved aside back, remove a ``.NAME.tmp-*`` or ``.NAME.old-*`` a save cut short; then,
    unless resuming, remove the ``what`` state folder (a fresh start)."""
    for name, names in folders.items():
        restore_moved_aside(out / name, names)
        for leftover in sorted([*out.glob(f".{name}.tmp-*"), *out.glob(f".{name}.old-*")]):
            if owned_folder(leftover, names, content=False):  # a save cut short: its files may be cut too
                remove_path(leftover)
    if not resume:
        remove_owned(out / STATE_DIR, folders[STATE_DIR], what=f"{what} state folder")


def run_in_out_dir(config: Any, checkpoint: str | Path | None, default: str,
                   check: Callable[[Path, list[Path]], None], folders: dict[str, Collection[str]], what: str,
                   body: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """What an SAE run and a transcoder run do around their work: settle ``config.out_dir`` (when unset: the
    folder named ``default`` next to the ``checkpoint`` folder), check that it can be a folder and
    ``check(out, inputs)`` it, touching nothing, make and lock it (a second run of it is refused before anything
    is removed), :func:`tidy_out_dir` it, then return ``body(out)``.
    A failure (a refusal: past the memory budget, a bad hook) removes the folders this made while still empty."""
    if config.out_dir is None:
        if checkpoint is None:
            raise GlassformerError("out_dir must be set when no checkpoint folder is given")
        config.out_dir = str(Path(checkpoint).parent / default)
    out = check_folder("out_dir", config.out_dir)
    check(out, [Path(d) for d in config.data] + ([Path(checkpoint)] if checkpoint else []))
    made = [folder for folder in (out, *out.parents) if not folder.exists()]  # deepest first
    out.mkdir(parents=True, exist_ok=True)
    try:
        with run_lock(out):
            tidy_out_dir(out, folders, config.resume, what)
            return body(out)
    except BaseException:
        for folder in made:
            try:
                folder.rmdir()  # only when empty: a state an interrupted run saved stays
            except OSError:
                break
        raise


def train_resumed(trainer: ActivationTrainer, what: str,
                  on_record: Callable[[dict[str, float], int | None], None] | None) -> dict[str, Any]:
    """Resume ``trainer`` when its config says so (saying on stderr where from), pass each logged record to
    ``on_record(record, resumed step or None)`` and train; returns {"steps", "final", "wall_s"}."""
    out, config, started = trainer.out, trainer.config, time.perf_counter()
    resumed = trainer.resume() if config.resume else False
    if config.resume and not resumed:
        print(f"resume: {out} holds no {what} state to resume from; starting at step 0", file=sys.stderr)
    elif resumed:  # said under progress: false too (it is not progress)
        print(f"resuming {out}/{STATE_DIR} at step {trainer.step} of {config.steps}", file=sys.stderr, flush=True)
    if on_record is not None:
        start = trainer.step if resumed else None
        trainer.on_record = lambda record: on_record(record, start)
    training = trainer.train()
    return {"steps": training["steps"], "final": training["final"], "wall_s": round(time.perf_counter() - started, 2)}


def run_sae(config: SAETrainConfig, model: nn.Module, tokenizer: Any, *, checkpoint: str | Path | None = None,
            source: Any = None, d_in: int | None = None,
            on_record: Callable[[dict[str, float], int | None], None] | None = None) -> dict[str, Any]:
    """Train ``config``'s SAE on ``model`` (on ``source`` rows of width ``d_in`` when given), measure it on
    held-out text, save it and its feature pages; ``on_record(record, resumed step or None)`` sees each
    logged record. Returns {"out_dir", "sae", "metrics", "features" (or None), "training"}."""
    def locked(out: Path) -> dict[str, Any]:  # the work, while ``out`` is locked
        trainer = SAETrainer(config, model, tokenizer, source=source, d_in=d_in)
        training = train_resumed(trainer, "SAE", on_record)
        sae = trainer.sae.eval()
        held_out = config.activation_source(model, tokenizer, config.hook, "val", config.seed + 10)
        metrics = evaluate_sae(sae, held_out, config.eval_batches)
        info = {"hook": config.hook, "checkpoint": None if checkpoint is None else str(checkpoint),
                "steps": trainer.step, "metrics": metrics, "config": config.to_dict()}
        save_sae(sae, out / "sae", info)
        atomic_write(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        summary = None
        if config.feature_windows:
            pages = config.activation_source(model, tokenizer, config.hook, "val", config.seed + 20)
            summary = feature_summary(sae, pages, config.feature_windows)
            atomic_write(out / "features.json", json.dumps(summary, ensure_ascii=False) + "\n")
        return {"out_dir": str(out), "sae": sae, "metrics": metrics, "features": summary, "training": training}

    names = SAE_FILES | {STATE_FILE}
    return run_in_out_dir(config, checkpoint, f"sae-{config.hook}", _check_out_dir,
                          {"sae": names, STATE_DIR: names}, "SAE", locked)


def train_sae(model: nn.Module, tokenizer: Any, hook: str, data: list[str | Path], *, out_dir: str | Path,
              **options: Any) -> SparseAutoencoder:
    """Train an SAE on ``hook`` of ``model`` over the text files ``data``; keys of :class:`SAETrainConfig`
    as keywords (``kind="relu"``, ``steps=500``...). Writes ``out_dir`` as :func:`run_sae` does and
    returns the SAE (its metrics: ``out_dir/metrics.json``)."""
    config = SAETrainConfig.from_dict({"hook": hook, "data": [str(d) for d in data], "out_dir": str(out_dir),
                                       **options})
    return run_sae(config, model, tokenizer)["sae"]

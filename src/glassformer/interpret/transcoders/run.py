"""One call from a model (or a checkpoint) to trained, measured transcoders with their feature pages:
``out_dir`` becomes circuit-tracer's local transcoder folder (``config.yaml`` + safetensors files, which
``circuit_tracer`` and :func:`~glassformer.interpret.transcoders.load_transcoders` read) and also holds
``metrics.json``, ``features.json``, ``features-L{i}.html`` and the training ``state/`` (docs/transcoders.md).
"""

import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from ...errors import NotOursError
from ...io.fileio import (
    LOCK_FILE,
    atomic_write,
    check_output_file,
    claim_outputs,
    fsync_dir,
    fsync_tree,
    move_in,
    owned_folder,
    remove_path,
)
from ..sae.loop import STATE_DIR, STATE_FILE
from ..sae.run import run_in_out_dir, train_resumed
from .features import transcoder_feature_summaries
from .format import CONFIG, Transcoders, file_names, is_transcoder_file, is_transcoder_folder, write_transcoder_files
from .metrics import evaluate_transcoders
from .model import TrainableTranscoders
from .train import TranscoderTrainConfig, TranscoderTrainer, mlp_hooks

OUTPUT_FILES = ("metrics.json", "features.json", "tracker.json", LOCK_FILE)
"""The files a transcoder run writes into its out_dir beside the transcoder files, the pages and state/."""
STAGING = "transcoders"  # the transcoder files are written into .transcoders.tmp-* first


def _transcoder_names(n_layers: int) -> set[str]:
    """Every name a transcoder folder of ``n_layers`` layers may hold (either kind)."""
    return {CONFIG} | {name for i in range(n_layers)
                       for name in (f"layer_{i}.safetensors", f"W_enc_{i}.safetensors", f"W_dec_{i}.safetensors")}


def _check_out_dir(out: Path, inputs: list[Path], n_layers: int) -> None:
    """Refuse, touching nothing, an out_dir whose transcoder files, state/ or outputs glassformer did not write."""
    state = out / STATE_DIR
    if (state.exists() or state.is_symlink()) and not owned_folder(state, {STATE_FILE}):
        raise NotOursError(f"{str(state)!r} exists and glassformer did not write it; choose another out_dir "
                           "(it was left untouched)")
    found = sorted(p.name for p in out.iterdir() if is_transcoder_file(p.name)) if out.is_dir() else []
    if found and not is_transcoder_folder(out):
        raise NotOursError(f"out_dir {str(out)!r} holds {found[0]!r}, which is not part of a transcoder folder "
                           "glassformer wrote; choose another out_dir (it was left untouched)")
    config = out / CONFIG  # ours (said so above): it may be replaced while a single-linked regular file
    ours = config.read_bytes() if config.is_file() and not config.is_symlink() else None
    check_output_file(config, inputs, "transcoder output", data=ours)
    pages = [f"features-L{i}.html" for i in range(n_layers)]
    claim_outputs([out / name for name in (*OUTPUT_FILES, *pages, *found) if name != CONFIG], inputs,
                  "transcoder output")


def write_transcoder_folder(out: Path, tc: Transcoders) -> None:
    """Make ``out`` (a folder the caller owns and checked) circuit-tracer's transcoder folder for ``tc``: the
    files are written into ``.transcoders.tmp-*`` inside it first and moved in one by one, config.yaml last;
    transcoder files of an earlier run that ``tc`` does not have are removed."""
    names = file_names(tc)
    staging = out / f".{STAGING}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        write_transcoder_files(staging, tc)
        fsync_tree(staging)
        for name in [*names[1:], names[0]]:
            move_in(staging / name, out / name)
        for path in out.iterdir():
            if is_transcoder_file(path.name) and path.name not in names and path.is_file():
                path.unlink()
        fsync_dir(out)
    finally:
        remove_path(staging)


def run_transcoders(config: TranscoderTrainConfig, model: nn.Module, tokenizer: Any, *,
                    checkpoint: str | Path | None = None,
                    on_record: Callable[[dict[str, float], int | None], None] | None = None) -> dict[str, Any]:
    """Train ``config``'s transcoders for every MLP of ``model``, measure them on held-out text, write them as
    circuit-tracer's folder and their feature pages' data; ``on_record(record, resumed step or None)`` sees each
    logged record. Returns {"out_dir", "transcoders", "metrics", "features" (or None), "training"}."""
    inputs, outputs = mlp_hooks(model)

    def locked(out: Path) -> dict[str, Any]:  # the work, while ``out`` is locked
        trainer = TranscoderTrainer(config, model, tokenizer)
        training = train_resumed(trainer, "transcoder", on_record)
        files = trainer.transcoders.to_transcoders()  # the scales folded in: what the folder holds
        transcoders = TrainableTranscoders.from_transcoders(files).to(trainer.device)
        held_out = config.activation_source(model, tokenizer, inputs + outputs, "val", config.seed + 10)
        metrics = evaluate_transcoders(transcoders, held_out, config.eval_batches)
        metrics.update(steps=trainer.step, wall_s=training["wall_s"],
                       checkpoint=None if checkpoint is None else str(checkpoint))
        write_transcoder_folder(out, files)
        atomic_write(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        summaries = None
        if config.feature_windows:
            summaries = transcoder_feature_summaries(
                transcoders, model, tokenizer, config.data, config.feature_windows,
                context=config.context or model.config.max_len, batch=config.model_batch,
                val_fraction=config.val_fraction, seed=config.seed + 20, prefix_len=config.prefix_len)
            atomic_write(out / "features.json", json.dumps({"features": summaries}, ensure_ascii=False) + "\n")
        return {"out_dir": str(out), "transcoders": transcoders, "metrics": metrics, "features": summaries,
                "training": training}

    return run_in_out_dir(config, checkpoint, f"transcoders-{config.kind}",
                          lambda out, paths: _check_out_dir(out, paths, len(inputs)),
                          {STATE_DIR: {STATE_FILE}, STAGING: _transcoder_names(len(inputs))}, "transcoder", locked)


def train_transcoders(model: nn.Module, tokenizer: Any, data: list[str | Path], *, out_dir: str | Path,
                      **options: Any) -> TrainableTranscoders:
    """Train transcoders for every MLP of ``model`` over the text files ``data``; keys of
    :class:`TranscoderTrainConfig` as keywords (``kind="clt"``, ``steps=500``...). Writes ``out_dir`` as
    :func:`run_transcoders` does and returns the transcoders (their metrics: ``out_dir/metrics.json``)."""
    config = TranscoderTrainConfig.from_dict({"data": [str(d) for d in data], "out_dir": str(out_dir), **options})
    return run_transcoders(config, model, tokenizer)["transcoders"]

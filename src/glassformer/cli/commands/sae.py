"""``glassformer sae CHECKPOINT --hook NAME --data FILE [--key value ...]``: train a sparse autoencoder on a
hook point, measure it and write its feature pages; every key of ``SAETrainConfig`` is an option (docs/sae.md)."""

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...io.fileio import Writes

WRITES = (Writes(("sae", "{ck}", "--hook", "blocks.0.hook_resid_post", "--data", "{text}", "--steps", "2",
                  "--out_dir", "{out}"),
                 ("{out}/metrics.json", "{out}/features.json", "{out}/features.html", "{out}/tracker.json",
                  "{out}/.glassformer.lock")),)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``sae`` verb to the ``glassformer`` subparsers (it takes ``--key value`` overrides)."""
    parser = sub.add_parser(
        "sae", help="train a sparse autoencoder on a hook point of a checkpoint; metrics and feature pages",
        description="Train a sparse autoencoder (TopK or ReLU+L1) on the activations of one hook point, streamed "
                    "from text files through the model. Any key can be given as --key value or in --config; "
                    "writes out_dir (default CHECKPOINT/../sae-HOOK): sae/ (safetensors + JSON), metrics.json, "
                    "features.html and state/ (--resume true continues from it). Keys: docs/sae.md.",
        epilog="example: glassformer sae out/sc/best --hook blocks.2.hook_resid_post --data input.txt --steps 1000")
    parser.add_argument("checkpoint", type=Path, help="a glassformer checkpoint folder (e.g. out/run/best)")
    parser.add_argument("--config", type=Path, help="YAML file of SAE keys (optional: --key value alone works)")
    parser.set_defaults(overrides=[])


def train_features(args: argparse.Namespace, config_class: Any, what: str, prefix: str, train: Callable[..., dict],
                   eval_scalars: Callable[[dict], dict]) -> tuple[Any, dict[str, Any]]:
    """What ``sae`` and ``transcoders`` share: ``config_class`` from --config's YAML and the overrides (--data
    required), the checkpoint on the config's device, ``train(config, model, tokenizer, ...)`` with trackers
    opened at its first record (``prefix``/key, then ``eval_scalars(metrics)`` as ``prefix``_eval/key), and the
    metrics printed as one JSON line -> (config, result)."""
    from ...errors import GlassformerError, UsageError
    from ...training.checkpoint import load_checkpoint
    from ...training.config import apply_overrides, read_yaml
    from ...training.distributed import pick_device
    from ...training.trackers import open_trackers, parse_log
    from .overrides import overrides_from_argv

    data = read_yaml(args.config, f"{what} config file") if args.config is not None else {}
    if not isinstance(data, dict):
        raise GlassformerError(f"{what} config file {str(args.config)!r} must hold a mapping of keys to values")
    config = config_class.from_dict(apply_overrides(data, overrides_from_argv(args.overrides), sections=()))
    if not config.data:
        raise UsageError("--data is required: one or more text files to read activations from")
    checkpoint = load_checkpoint(args.checkpoint, map_location=pick_device(config.device))
    parse_log(config.log)  # an unknown tracker or a missing extra: one line, before any work
    trackers = None  # opened at the first record (out_dir is settled by then)

    def on_record(record: dict[str, float], resumed_from: int | None) -> None:
        nonlocal trackers
        if trackers is None:
            trackers = open_trackers(config.log, config.out_dir, config.to_dict(), resumed_from)
        trackers.log(int(record["step"]), {f"{prefix}/{k}": v for k, v in record.items() if k != "step"})

    try:
        result = train(config, checkpoint.model, checkpoint.tokenizer, checkpoint=args.checkpoint, on_record=on_record)
        if trackers is not None:
            scalars = eval_scalars(result["metrics"])
            trackers.log(result["training"]["steps"], {f"{prefix}_eval/{k}": v for k, v in scalars.items()})
    finally:
        if trackers is not None:
            trackers.close()
    print(json.dumps({"metrics": shown(result["metrics"]), "steps": result["training"]["steps"],
                      "wall_s": result["training"]["wall_s"]}))
    return config, result


def shown(value: object) -> object:
    """``value`` with floats rounded to 4 digits and NaN/inf as None (JSON-safe), lists and dicts walked."""
    if isinstance(value, float):
        return round(value, 4) if math.isfinite(value) else None
    if isinstance(value, list):
        return [shown(v) for v in value]
    if isinstance(value, dict):
        return {k: shown(v) for k, v in value.items()}
    return value


def run(args: argparse.Namespace) -> int:
    """Train as the config and overrides say; print the metrics and where everything went; 0."""
    from ...interpret.sae import SAETrainConfig, run_sae
    from ...locale import locale_lang
    from ...viz.i18n import text as ui_text
    from ...viz.report_sae import write_feature_pages

    config, result = train_features(args, SAETrainConfig, "SAE", "sae", run_sae, lambda metrics: metrics)
    pages = None
    if result["features"] is not None:
        pages = write_feature_pages(result["features"], Path(result["out_dir"]) / "features.html",
                                    metrics=result["metrics"], title=f"SAE features: {config.hook}",
                                    lang=locale_lang())
    print(ui_text("cli.sae_in", args.ui_lang, path=Path(result["out_dir"]) / "sae")
          + (ui_text("cli.feature_pages", args.ui_lang, pages=pages) if pages else ""))
    return 0

"""``glassformer transcoders CHECKPOINT --data FILE --out_dir DIR [--kind plt|clt] [--key value ...]``: train
transcoders for every MLP of a checkpoint, measure them and write circuit-tracer's transcoder folder with
feature pages; every key of ``TranscoderTrainConfig`` is an option (docs/transcoders.md)."""

import argparse
import json
import math
from pathlib import Path

from ..fileio import Writes

WRITES = (Writes(("transcoders", "{ck}", "--data", "{text}", "--steps", "2", "--out_dir", "{out}"),
                 ("{out}/config.yaml", "{out}/layer_0.safetensors", "{out}/metrics.json", "{out}/features.json",
                  "{out}/features-L0.html", "{out}/tracker.json", "{out}/.glassformer.lock")),)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``transcoders`` verb to the ``glassformer`` subparsers (it takes ``--key value`` overrides)."""
    parser = sub.add_parser(
        "transcoders", help="train per-layer or cross-layer transcoders for every MLP of a checkpoint; "
                            "circuit-tracer's folder, metrics and feature pages",
        description="Train transcoders (sparse features that read each MLP's input and predict its output) on "
                    "activations streamed from text files through the model: --kind plt (one per layer, "
                    "--skip true adds W_skip) or clt (cross-layer), --activation relu, jumprelu or topk. Any key "
                    "can be given as --key value or in --config; writes out_dir (default "
                    "CHECKPOINT/../transcoders-KIND) as circuit-tracer's transcoder folder (config.yaml + "
                    "safetensors) with metrics.json, features-L{i}.html and state/ (--resume true continues from "
                    "it). Keys: docs/transcoders.md.",
        epilog="example: glassformer transcoders out/sc/best --data input.txt --out_dir out/sc/tc --kind plt "
               "--steps 2000",
        allow_abbrev=False)
    parser.add_argument("checkpoint", type=Path, help="a glassformer checkpoint folder (e.g. out/run/best)")
    parser.add_argument("--config", type=Path, help="YAML file of transcoder keys (optional: --key value alone works)")
    parser.set_defaults(func=run, overrides=[])


def run(args: argparse.Namespace) -> int:
    """Train as the config and overrides say; print the metrics and where everything went; 0."""
    from ..errors import GlassformerError, UsageError
    from ..interpret.transcoders import TranscoderTrainConfig, run_transcoders
    from ..training.checkpoint import load_checkpoint
    from ..training.config import apply_overrides, read_yaml
    from ..training.distributed import pick_device
    from ..training.trackers import Trackers, open_trackers, parse_log
    from ..viz.i18n import resolve_lang
    from ..viz.i18n import text as ui_text
    from ..viz.report_sae import write_transcoder_pages
    from .overrides import overrides_from_argv

    data = read_yaml(args.config, "transcoder config file") if args.config is not None else {}
    if not isinstance(data, dict):
        raise GlassformerError(f"transcoder config file {str(args.config)!r} must hold a mapping of keys to values")
    config = TranscoderTrainConfig.from_dict(apply_overrides(data, overrides_from_argv(args.overrides), sections=()))
    if not config.data:
        raise UsageError("--data is required: one or more text files to read activations from")
    device = pick_device(config.device)
    checkpoint = load_checkpoint(args.checkpoint, map_location=device)
    parse_log(config.log)  # an unknown tracker or a missing extra: one line, before any work
    trackers: list[Trackers] = []

    def to_trackers(record: dict[str, float], resumed_from: int | None) -> None:
        if not trackers:  # opened at the first record: out_dir is settled by then
            trackers.append(open_trackers(config.log, config.out_dir, config.to_dict(), resumed_from))
        trackers[0].log(int(record["step"]), {f"transcoders/{k}": v for k, v in record.items() if k != "step"})

    try:
        result = run_transcoders(config, checkpoint.model, checkpoint.tokenizer, checkpoint=args.checkpoint,
                                 on_record=to_trackers)
        if trackers:
            metrics = result["metrics"]
            scalars = {f"transcoders_eval/{k}": v for k, v in metrics.items() if isinstance(v, float)}
            scalars.update({f"transcoders_eval/nmse_L{i}": v for i, v in enumerate(metrics["nmse"])})
            trackers[0].log(result["training"]["steps"], scalars)
    finally:
        for tracker in trackers:
            tracker.close()
    pages = None
    if result["features"] is not None:
        pages = write_transcoder_pages(result["features"], result["out_dir"], metrics=result["metrics"],
                                       lang=resolve_lang(None))  # the locale's language (en or zh)
    print(json.dumps({"metrics": _shown(result["metrics"]), "steps": result["training"]["steps"],
                      "wall_s": result["training"]["wall_s"]}))
    print(ui_text("cli.transcoders_in", args.ui_lang, path=result["out_dir"])
          + (ui_text("cli.feature_pages", args.ui_lang, pages=pages[0].parent / "features-L*.html") if pages else ""))
    return 0


def _shown(value: object) -> object:
    """``value`` with floats rounded to 4 digits and NaN/inf as None (JSON-safe), lists and dicts walked."""
    if isinstance(value, float):
        return round(value, 4) if math.isfinite(value) else None
    if isinstance(value, list):
        return [_shown(v) for v in value]
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    return value

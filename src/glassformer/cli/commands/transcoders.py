"""``glassformer transcoders CHECKPOINT --data FILE --out_dir DIR [--kind plt|clt] [--key value ...]``: train
transcoders for every MLP of a checkpoint, measure them and write circuit-tracer's transcoder folder with
feature pages; every key of ``TranscoderTrainConfig`` is an option (docs/transcoders.md)."""

import argparse
from pathlib import Path

from ...io.fileio import Writes

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
               "--steps 2000")
    parser.add_argument("checkpoint", type=Path, help="a glassformer checkpoint folder (e.g. out/run/best)")
    parser.add_argument("--config", type=Path, help="YAML file of transcoder keys (optional: --key value alone works)")
    parser.set_defaults(overrides=[])


def run(args: argparse.Namespace) -> int:
    """Train as the config and overrides say; print the metrics and where everything went; 0."""
    from ...interpret.transcoders import TranscoderTrainConfig, run_transcoders
    from ...locale import locale_lang
    from ...viz.i18n import text as ui_text
    from ...viz.report_sae import write_transcoder_pages
    from .sae import train_features

    def eval_scalars(metrics: dict) -> dict:  # the overall figures, and each layer's NMSE
        return {**{k: v for k, v in metrics.items() if isinstance(v, float)},
                **{f"nmse_L{i}": v for i, v in enumerate(metrics["nmse"])}}

    _, result = train_features(args, TranscoderTrainConfig, "transcoder", "transcoders", run_transcoders, eval_scalars)
    pages = None
    if result["features"] is not None:
        pages = write_transcoder_pages(result["features"], result["out_dir"], metrics=result["metrics"],
                                       lang=locale_lang())
    print(ui_text("cli.transcoders_in", args.ui_lang, path=result["out_dir"])
          + (ui_text("cli.feature_pages", args.ui_lang, pages=pages[0].parent / "features-L*.html") if pages else ""))
    return 0

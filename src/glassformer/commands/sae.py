"""``glassformer sae CHECKPOINT --hook NAME --data FILE [--key value ...]``: train a sparse autoencoder on a
hook point, measure it and write its feature pages; every key of ``SAETrainConfig`` is an option (docs/sae.md)."""

import argparse
import json
import math
from pathlib import Path

from ..fileio import Writes

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
        epilog="example: glassformer sae out/sc/best --hook blocks.2.hook_resid_post --data input.txt --steps 1000",
        allow_abbrev=False)
    parser.add_argument("checkpoint", type=Path, help="a glassformer checkpoint folder (e.g. out/run/best)")
    parser.add_argument("--config", type=Path, help="YAML file of SAE keys (optional: --key value alone works)")
    parser.set_defaults(func=run, overrides=[])


def run(args: argparse.Namespace) -> int:
    """Train as the config and overrides say; print the metrics and where everything went; 0."""
    from ..errors import GlassformerError, UsageError
    from ..interpret.sae import SAETrainConfig, run_sae
    from ..training.checkpoint import load_checkpoint
    from ..training.config import apply_overrides, read_yaml
    from ..training.distributed import pick_device
    from ..training.trackers import Trackers, open_trackers, parse_log
    from ..viz.i18n import resolve_lang
    from ..viz.i18n import text as ui_text
    from ..viz.report_sae import write_feature_pages
    from .overrides import overrides_from_argv

    data = read_yaml(args.config, "SAE config file") if args.config is not None else {}
    if not isinstance(data, dict):
        raise GlassformerError(f"SAE config file {str(args.config)!r} must hold a mapping of keys to values")
    config = SAETrainConfig.from_dict(apply_overrides(data, overrides_from_argv(args.overrides), sections=()))
    if not config.data:
        raise UsageError("--data is required: one or more text files to read activations from")
    device = pick_device(config.device)
    checkpoint = load_checkpoint(args.checkpoint, map_location=device)
    parse_log(config.log)  # an unknown tracker or a missing extra: one line, before any work
    trackers: list[Trackers] = []

    def to_trackers(record: dict[str, float], resumed_from: int | None) -> None:
        if not trackers:  # opened at the first record: out_dir is settled by then
            trackers.append(open_trackers(config.log, config.out_dir, config.to_dict(), resumed_from))
        trackers[0].log(int(record["step"]), {f"sae/{k}": v for k, v in record.items() if k != "step"})

    try:
        result = run_sae(config, checkpoint.model, checkpoint.tokenizer, checkpoint=args.checkpoint,
                         on_record=to_trackers)
        if trackers:
            trackers[0].log(result["training"]["steps"], {f"sae_eval/{k}": v for k, v in result["metrics"].items()})
    finally:
        for tracker in trackers:
            tracker.close()
    pages = None
    if result["features"] is not None:
        pages = write_feature_pages(result["features"], Path(result["out_dir"]) / "features.html",
                                    metrics=result["metrics"], title=f"SAE features: {config.hook}",
                                    lang=resolve_lang(None))  # the locale's language (en or zh)
    shown = {k: (round(v, 4) if math.isfinite(v) else None) if isinstance(v, float) else v
             for k, v in result["metrics"].items()}
    print(json.dumps({"metrics": shown, "steps": result["training"]["steps"],
                      "wall_s": result["training"]["wall_s"]}))
    print(ui_text("cli.sae_in", args.ui_lang, path=Path(result["out_dir"]) / "sae")
          + (ui_text("cli.feature_pages", args.ui_lang, pages=pages) if pages else ""))
    return 0

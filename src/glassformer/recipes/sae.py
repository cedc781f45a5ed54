"""The ``sae`` recipe task: train the language model, then a sparse autoencoder on one of its hook points.

The recipe section holds ``task: sae``, the corpus, and any key of
:class:`glassformer.interpret.sae.SAETrainConfig` (``hook``, ``kind``, ``k``, ``steps``...), overridable as
``--recipe.KEY value``. The SAE reads the same text the model trained on (its held-out tail for the
metrics and feature pages) and is written to ``out_dir/sae-HOOK/``; the results list the most frequent
features with their top contexts (the peak token in brackets), for a reader to name them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..interpret.sae import SAETrainConfig, run_sae
from ..training import TrainConfig, load, prepare_run
from ..viz.report_sae import write_feature_pages

RECIPE_KEYS = ("task", "corpus", "source", "features_listed")  # the recipe's own keys; the rest are the SAE's


def _context_text(context: dict[str, Any], vocab: dict[str, str]) -> str:
    pieces = [vocab[str(t)] for t in context["tokens"]]
    peak = context["peak"]
    pieces[peak] = "[" + pieces[peak] + "]"
    return "".join(pieces)


def run_sae_recipe(config: TrainConfig, spec: dict[str, Any], train: Any) -> dict[str, Any]:
    """Train the model (``train(config, model, tokenizer, batches)`` is the recipe runner's trainer), then
    the SAE; returns {"training", "sae": {"metrics", "training", "out_dir", "features_html", "features"}}."""
    run = prepare_run(config)
    training = train(config, run.model, run.tokenizer, run.batches)
    checkpoint = Path(config.out_dir) / "best"
    model, tokenizer = load(checkpoint)
    options = {k: v for k, v in spec.items() if k not in RECIPE_KEYS}
    options.setdefault("data", list(config.data))
    options.setdefault("progress", config.progress)
    sae_config = SAETrainConfig.from_dict(options)
    found = run_sae(sae_config, model, tokenizer, checkpoint=checkpoint)
    listed = int(spec.get("features_listed", 40))
    features, pages, summary = [], None, found["features"]
    if summary is not None:
        pages = str(write_feature_pages(summary, Path(found["out_dir"]) / "features.html", metrics=found["metrics"],
                                        title=f"SAE features of the Shakespeare char model: {sae_config.hook}"))
        for feature in summary["features"][:listed]:
            features.append({"id": feature["id"], "frequency": feature["frequency"], "max": feature["max"],
                             "contexts": [_context_text(c, summary["vocab"]) for c in feature["contexts"][:5]],
                             "up": [summary["vocab"][str(t)] for t, _ in feature.get("up", [])[:5]]})
    return {"training": training,
            "sae": {"out_dir": found["out_dir"], "metrics": found["metrics"], "training": found["training"],
                    "features_html": pages, "features": features}}

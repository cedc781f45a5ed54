"""The ``sae`` recipe task: train the language model, then a sparse autoencoder (any SAETrainConfig key) on one
of its hook points; list the top features and, for a char-level model, those firing on one kind of character."""

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..interpret.sae import ActivationSource, SAETrainConfig, SparseAutoencoder, run_sae
from ..training import TrainConfig
from ..viz.report_sae import write_feature_pages
from .progress import say

RECIPE_KEYS = ("task", "corpus", "source", "features_listed", "naming_batches")  # the rest: SAE keys
NAME_LINE = re.compile(r"[A-Z][A-Za-z' ]{0,30}:")  # a speaker's line: "ROMEO:", "First Citizen:"
VOWELS = set("aeiou")
# (name, test of (previous character, character, the whole line or None when the window cuts it)),
# most specific first: a feature is named after the first kind that holds >= 90% of its firings.
CHARACTER_KINDS: list[tuple[str, Callable[[str, str, str | None], bool]]] = [
    ("newline ending a speaker's name", lambda p, c, line: c == "\n" and line is not None
     and bool(NAME_LINE.fullmatch(line))),
    ("in a speaker's name line", lambda p, c, line: line is not None and bool(NAME_LINE.fullmatch(line))
     and c != "\n"),
    ("first character of a line", lambda p, c, line: p == "\n" and c != "\n"),
    ("newline", lambda p, c, line: c == "\n"),
    ("space", lambda p, c, line: c == " "),
    ("punctuation", lambda p, c, line: not c.isalnum() and not c.isspace()),
    ("first letter of a word", lambda p, c, line: c.isalpha() and not (p.isalpha() or p == "'")),
    ("capital letter", lambda p, c, line: c.isupper()),
    ("vowel after a consonant", lambda p, c, line: c in VOWELS and p.isalpha() and p.lower() not in VOWELS),
    ("vowel", lambda p, c, line: c in VOWELS),
    ("consonant", lambda p, c, line: c.isalpha() and c.lower() not in VOWELS),
]


def _kind_of_each_position(text: str) -> list[list[bool]]:
    """For each character of ``text``: which CHARACTER_KINDS it is (a newline's line is the one it ends)."""
    found = []
    for i, c in enumerate(text):
        before = text.rfind("\n", 0, i)
        after = text.find("\n", i)
        line = text[before + 1:after] if before >= 0 and after >= 0 else None
        prev = text[i - 1] if i else ""
        found.append([test(prev, c, line) for _, test in CHARACTER_KINDS])
    return found


@torch.no_grad()
def name_features(sae: SparseAutoencoder, source: ActivationSource, batches: int = 8, share: float = 0.9,
                  at_least: int = 20) -> dict[str, Any] | None:
    """Features (firing on >= ``at_least`` tokens) that fire on one kind of character ``share`` of the time:
    {"kinds": {kind: [feature ids]}, "named", "live", "tokens", ...}, or None for a tokenizer not char-level."""
    tokenizer = source.tokenizer
    counts = torch.zeros(sae.config.d_sae, len(CHARACTER_KINDS))
    fired = torch.zeros(sae.config.d_sae)
    tokens = 0
    for _ in range(batches):
        inputs = source.next_inputs()
        f = sae.encode(source.activations(inputs)) > 0  # (B, T, d_sae)
        for row, active in zip(inputs.tokens.tolist(), f, strict=True):
            pieces = [tokenizer.id_to_token(i) for i in row]
            if any(len(p) != 1 for p in pieces):
                return None
            kinds = torch.tensor(_kind_of_each_position("".join(pieces)), dtype=torch.float)  # (T, kinds)
            counts += active.float().t() @ kinds
            fired += active.float().sum(0)
            tokens += len(row)
    named: dict[str, list[int]] = {name: [] for name, _ in CHARACTER_KINDS}
    for feature in range(sae.config.d_sae):
        if fired[feature] < at_least:
            continue
        for k, (name, _) in enumerate(CHARACTER_KINDS):
            if counts[feature, k] >= share * fired[feature]:
                named[name].append(feature)
                break
    return {"kinds": {k: v for k, v in named.items() if v}, "named": sum(len(v) for v in named.values()),
            "live": int((fired > 0).sum()), "tokens": tokens, "share": share, "at_least": at_least}


def _context_text(context: dict[str, Any], vocab: dict[str, str]) -> str:
    pieces = [vocab[str(t)] for t in context["tokens"]]
    pieces[context["peak"]] = f"[{pieces[context['peak']]}]"
    return "".join(pieces)


def run_sae_recipe(config: TrainConfig, spec: dict[str, Any], model: Any, tokenizer: Any) -> dict[str, Any]:
    """The SAE on the model the recipe trained (``model``, ``tokenizer``: read from ``out_dir/best``):
    {"metrics", "training", "out_dir", "features_html", "features", "character_kinds"}."""
    checkpoint = Path(config.out_dir) / "best"
    sae_config = SAETrainConfig.from_dict({"data": list(config.data), "progress": config.progress,
                                           **{k: v for k, v in spec.items() if k not in RECIPE_KEYS}})
    say(f"sparse autoencoder on {sae_config.hook} of {checkpoint}: {sae_config.steps} steps (a line per "
        f"{sae_config.log_every} steps when no progress bar is drawn)", config.progress)
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
    source = sae_config.activation_source(model, tokenizer, sae_config.hook, "val", sae_config.seed + 30)
    named = name_features(found["sae"], source, batches=int(spec.get("naming_batches", 8)))
    return {"out_dir": found["out_dir"], "metrics": found["metrics"], "training": found["training"],
            "features_html": pages, "features": features, "character_kinds": named}

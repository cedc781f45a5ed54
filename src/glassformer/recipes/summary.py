"""What ``glassformer recipe`` prints at the end: a few readable lines per task (samples as text, numbers
rounded, a one-line verdict for the prefix-LM vs causal-LM comparison); every number stays in
``out_dir/results.json`` (and on standard output behind ``--json``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..training.report import summary_lines


def verdict(models: Mapping[str, Mapping[str, Any]]) -> str:
    """The comparison's one line: ``prefix-LM wins: 0.980 vs 0.623 exact match`` (ties broken by symbol
    accuracy, then a tie is said), from {name: {"exact_match", "symbol_accuracy", ...}} of two models."""
    (a, ra), (b, rb) = sorted(models.items(), key=lambda item: (-item[1]["exact_match"], -item[1]["symbol_accuracy"]))
    if ra["exact_match"] > rb["exact_match"]:
        return f"{a} wins: {ra['exact_match']:.3f} vs {rb['exact_match']:.3f} exact match ({b})"
    if ra["symbol_accuracy"] > rb["symbol_accuracy"]:
        return (f"{a} wins on symbols: both {ra['exact_match']:.3f} exact match, {ra['symbol_accuracy']:.3f} vs "
                f"{rb['symbol_accuracy']:.3f} symbol accuracy ({b})")
    return f"a tie: both {ra['exact_match']:.3f} exact match and {ra['symbol_accuracy']:.3f} symbol accuracy"


def _indented(text: str, prefix: str = "    ") -> list[str]:
    return [prefix + line for line in text.splitlines()] or [prefix]


def _training(training: Mapping[str, Any], max_steps: int, name: str = "training") -> list[str]:
    head, *rest = summary_lines(training, max_steps)
    return [f"{name}: {head}", *("  " + line for line in rest)]


def recipe_summary(results: Mapping[str, Any], out_dir: str) -> list[str]:
    """The lines ``glassformer recipe`` prints for ``results`` (:func:`~glassformer.recipes.run_recipe`'s
    return value); ``out_dir``: where results.json was written."""
    task, config = results["task"], results.get("config", {})
    max_steps = int(config.get("max_steps", 0))
    corpus = f" on {results['corpus']}" if results.get("corpus") else ""
    lines = [f"recipe {task}{corpus}: {results['wall_s']:.1f} s"]
    if "training" in results:
        lines += _training(results["training"], max_steps)
    for n, sample in enumerate(results.get("samples", []), 1):
        lines += [f"sample {n} (prompt {sample['prompt']!r}):", *_indented(sample["text"])]
    for example in results.get("fill_mask", []):
        guesses = ", ".join(f"{piece!r} {p:.2f}" for piece, p in example["top5"])
        lines += [f"fill-mask: {example['text']}", f"    answer {example['answer']!r}; top 5: {guesses}"]
    if "bleu" in results:
        scores = results["bleu"]
        names = [name for name in scores if isinstance(scores[name], Mapping)]
        lines.append(f"BLEU on {scores['split']} ({scores['sentences']:,} sentences): "
                     + ", ".join(f"{name} {scores[name]['bleu']:.1f}" for name in names))
        for example in scores[names[-1]]["examples"][:2] if names else []:
            lines += [f"  source:    {example['src']}", f"  reference: {example['ref']}",
                      f"  {names[-1]}:{' ' * max(1, 10 - len(names[-1]))}{example['hyp']}"]
    if "models" in results:
        for name, found in results["models"].items():
            lines += _training(found["training"], max_steps, name)
            lines.append(f"  exact match {found['exact_match']:.3f}, symbol accuracy {found['symbol_accuracy']:.3f}; "
                         + ", ".join(f"{x!r} -> {y!r}" for x, y in found.get("examples", [])[:2]))
        lines.append(verdict(results["models"]))
    for name, run in results.get("runs", {}).items():
        final = run.get("final", {})
        change = run.get("phase_change_step")
        heads = "; ".join(f"{kind.replace('_', '-')} head L{h['layer']}H{h['head']} {h['score']:.2f}"
                          for kind, h in run.get("best_heads", {}).items())
        lines.append(f"{name}: phase change {'at step ' + str(change) if change is not None else 'not seen'}; "
                     f"{heads}; loss on the repeat {final.get('loss_repeat', float('nan')):.3f} "
                     f"(first half {final.get('loss_first', float('nan')):.3f})")
    if "sae" in results:
        metrics = results["sae"]["metrics"]
        formats = {"explained_variance": ".3f", "mse": ".4g", "l0": ".1f", "dead": "", "ce_recovered": ".3f"}
        shown = ", ".join(f"{key} {metrics[key]:{spec}}" for key, spec in formats.items() if key in metrics)
        lines.append(f"SAE: {shown}")
        if results["sae"].get("features_html"):
            lines.append(f"  feature pages: {results['sae']['features_html']}")
    lines.append(f"everything in {out_dir.rstrip('/')}/results.json")
    return lines

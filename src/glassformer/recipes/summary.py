"""What ``glassformer recipe`` prints at the end: a few readable lines per task (every number: results.json)."""

from collections.abc import Mapping
from typing import Any

from ..training.report import say, summary_lines


def verdict(models: Mapping[str, Mapping[str, Any]]) -> str:
    """The comparison's line (``prefix-LM wins: 0.980 vs 0.623 exact match``; ties broken by symbol accuracy)
    of two models {name: {"exact_match", "symbol_accuracy", ...}}."""
    (a, ra), (b, rb) = sorted(models.items(), key=lambda item: (-item[1]["exact_match"], -item[1]["symbol_accuracy"]))
    if ra["exact_match"] > rb["exact_match"]:
        return say("wins", a=a, b=b, ea=ra["exact_match"], eb=rb["exact_match"])
    if ra["symbol_accuracy"] > rb["symbol_accuracy"]:
        return say("wins_symbols", a=a, b=b, ea=ra["exact_match"], sa=ra["symbol_accuracy"], sb=rb["symbol_accuracy"])
    return say("tie", ea=ra["exact_match"], sa=ra["symbol_accuracy"])



def _training(training: Mapping[str, Any], max_steps: int, name: str | None = None) -> list[str]:
    head, *rest = summary_lines(training, max_steps)
    return [f"{name or say('training')}: {head}", *("  " + line for line in rest)]


def recipe_summary(results: Mapping[str, Any], out_dir: str) -> list[str]:
    """The lines ``glassformer recipe`` prints for ``run_recipe``'s ``results`` written to ``out_dir``."""
    task, config = results["task"], results.get("config", {})
    max_steps = int(config.get("max_steps", 0))
    corpus = say("on_corpus", corpus=results["corpus"]) if results.get("corpus") else ""
    lines = [say("recipe", task=task, corpus=corpus, wall=results["wall_s"])]
    if "training" in results:
        lines += _training(results["training"], max_steps)
    for n, sample in enumerate(results.get("samples", []), 1):
        text = ["    " + line for line in sample["text"].splitlines()] or ["    "]
        lines += [say("sample", n=n, prompt=sample["prompt"]), *text]
    for example in results.get("fill_mask", []):
        guesses = ", ".join(f"{piece!r} {p:.2f}" for piece, p in example["top5"])
        lines += [f"fill-mask: {example['text']}", f"    answer {example['answer']!r}; top 5: {guesses}"]
    if "bleu" in results:
        scores = results["bleu"]
        names = [name for name in scores if isinstance(scores[name], Mapping)]
        lines.append(say("bleu", split=scores["split"], n=scores["sentences"])
                     + ", ".join(f"{name} {scores[name]['bleu']:.1f}" for name in names))
        for example in scores[names[-1]]["examples"][:2] if names else []:
            lines += [f"  {say('source')} {example['src']}", f"  {say('reference')} {example['ref']}",
                      f"  {names[-1]}:{' ' * max(1, 10 - len(names[-1]))}{example['hyp']}"]
    if "models" in results:
        for name, found in results["models"].items():
            lines += _training(found["training"], max_steps, name)
            lines.append("  " + say("exact", em=found["exact_match"], sa=found["symbol_accuracy"])
                         + ", ".join(f"{x!r} -> {y!r}" for x, y in found.get("examples", [])[:2]))
        lines.append(verdict(results["models"]))
    for name, run in results.get("runs", {}).items():
        final = run.get("final", {})
        change = run.get("phase_change_step")
        heads = "; ".join(f"{kind.replace('_', '-')} head L{h['layer']}H{h['head']} {h['score']:.2f}"
                          for kind, h in run.get("best_heads", {}).items())
        when = say("phase_at", step=change) if change is not None else say("phase_none")
        lines.append(say("phase", name=name, when=when, heads=heads, repeat=final.get("loss_repeat", float("nan")),
                         first=final.get("loss_first", float("nan"))))
    if "sae" in results:
        metrics = results["sae"]["metrics"]
        formats = {"explained_variance": ".3f", "mse": ".4g", "l0": ".1f", "dead": "", "ce_recovered": ".3f"}
        shown = ", ".join(f"{key} {metrics[key]:{spec}}" for key, spec in formats.items() if key in metrics)
        lines.append(f"SAE: {shown}")
        if results["sae"].get("features_html"):
            lines.append("  " + say("feature_pages", path=results["sae"]["features_html"]))
    lines.append(say("everything", out=out_dir.rstrip("/")))
    return lines

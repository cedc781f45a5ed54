"""Run a recipe: a training YAML plus a ``recipe:`` section saying which corpus to read and how to
evaluate the result. One call trains and evaluates, and writes ``out_dir/results.json``.

    recipe:
      task: lm | mlm | translation | prefix-vs-causal
      corpus: tinyshakespeare | multi30k | tang300     (fills data/src/tgt when the config leaves them out)
      ...                                              task options, see each ``_evaluate_*`` below

Every other key is a :class:`~glassformer.training.TrainConfig` key, so ``--key value`` overrides
work as for ``glassformer train``; ``--recipe.key value`` overrides the recipe section.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from ..data import corpora
from ..generation import fill_mask, generate_text
from ..models import build_model
from ..training import TrainConfig, Trainer, load, parse_overrides, prepare
from .sequence_task import SequenceTask, exact_match
from .translation import bleu, translate

TASKS = ("lm", "mlm", "translation", "prefix-vs-causal")
CORPORA = ("tinyshakespeare", "multi30k", "tang300")


@dataclass
class Recipe:
    """A parsed recipe: the training config (data filled in) and the recipe section."""

    train: TrainConfig
    spec: dict[str, Any]


def load_recipe(path: str | Path, overrides: Sequence[str] = (), data_dir: str | Path | None = None,
                download: bool = False) -> Recipe:
    """Read a recipe YAML, apply ``--key value`` overrides and attach its corpus.

    Args:
        data_dir: the corpus folder (see :mod:`glassformer.data.corpora`); default $GLASSFORMER_DATA or ./data.
        download: fetch a missing corpus from its public URL.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"recipe file {str(path)!r} does not exist")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or not isinstance(data.get("recipe"), dict):
        raise ValueError(f"{path} must be a mapping with a 'recipe:' section (task, corpus, ...)")
    spec = dict(data.pop("recipe"))
    data["model"] = dict(data.get("model") or {})
    for key, value in parse_overrides(list(overrides)):
        head, _, rest = key.partition(".")
        target = spec if head == "recipe" else data["model"] if head == "model" else data
        target[rest if head in ("recipe", "model") else key] = value
    if spec.get("task") not in TASKS:
        raise ValueError(f"recipe.task must be one of {TASKS}, got {spec.get('task')!r}")
    _attach_corpus(spec, data, data_dir, download)
    return Recipe(TrainConfig.from_dict(data), spec)


def _attach_corpus(spec: dict[str, Any], data: dict[str, Any], data_dir: str | Path | None, download: bool) -> None:
    corpus = spec.get("corpus")
    if corpus is None:
        return
    if corpus not in CORPORA:
        raise ValueError(f"recipe.corpus must be one of {CORPORA}, got {corpus!r}")
    if corpus == "tinyshakespeare" and not data.get("data"):
        data["data"] = [str(corpora.tinyshakespeare(data_dir, download))]
    elif corpus == "multi30k" and not (data.get("src") or data.get("pairs")):
        (src, tgt), (val_src, val_tgt) = (corpora.multi30k(s, data_dir, download) for s in ("train", "val"))
        data.update(src=str(src), tgt=str(tgt), val_src=str(val_src), val_tgt=str(val_tgt))
    elif corpus == "tang300" and not data.get("data"):
        poems = corpora.tang_poems(spec.get("source", corpora.TANG300))
        text = corpora.write_poem_text(poems, Path(data.get("out_dir", "out")) / "tang300.txt")
        data["data"] = [str(text)]


def _load_average() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def run_recipe(recipe: Recipe, data_dir: str | Path | None = None, download: bool = False) -> dict[str, Any]:
    """Train and evaluate; returns the results (also written to ``out_dir/results.json``)."""
    config, spec = recipe.train, recipe.spec
    started, load_before = time.perf_counter(), _load_average()
    if spec["task"] == "prefix-vs-causal":
        results: dict[str, Any] = {"models": _prefix_vs_causal(config, spec)}
    else:
        run = prepare(config)
        training = Trainer(config, run.model, run.tokenizer, run.batches).train()
        model, tokenizer = load(Path(config.out_dir) / "best")
        results = {"training": training}
        if spec["task"] == "lm":
            results["samples"] = _lm_samples(model, tokenizer, spec)
        elif spec["task"] == "mlm":
            results["fill_mask"] = _fill_mask_examples(model, tokenizer, run.batches.val, spec)
        else:
            results["bleu"] = _translation_scores(model, tokenizer, spec, config, data_dir, download)
    results.update(task=spec["task"], corpus=spec.get("corpus"), wall_s=time.perf_counter() - started,
                   load_average=[load_before, _load_average()], cpu_count=os.cpu_count(),
                   torch_threads=torch.get_num_threads(), config=config.to_dict(), recipe=spec)
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return results


# ---------------------------------------------------------------------- evaluations
def _lm_samples(model: Any, tokenizer: Any, spec: dict[str, Any]) -> list[dict[str, str]]:
    """Sampled continuations of ``spec["prompts"]`` (temperature, top_k, sample_tokens, stop)."""
    samples = []
    for n, prompt in enumerate(spec.get("prompts", ["\n"])):
        text = generate_text(model, tokenizer, prompt, int(spec.get("sample_tokens", 200)), do_sample=True,
                             temperature=float(spec.get("temperature", 0.8)), top_k=spec.get("top_k"),
                             seed=int(spec.get("seed", 0)) + n, stop_strings=spec.get("stop"))
        samples.append({"prompt": prompt, "text": prompt + text})
    return samples


def _fill_mask_examples(model: Any, tokenizer: Any, val_ids: Any, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Mask one word in each of the first ``spec["examples"]`` validation lines that have one, and list
    the model's top-5 guesses (a word token: it starts with a space and has letters)."""
    text = tokenizer.decode([int(i) for i in val_ids[:20000]])
    wanted, found = int(spec.get("examples", 8)), []
    for line in text.splitlines()[1:]:  # the first line may start mid-line
        ids = tokenizer.encode(line)
        words = [i for i, t in enumerate(ids) if i >= 2 and tokenizer.id_to_token(t).startswith(" ")
                 and tokenizer.id_to_token(t).strip().isalpha() and len(tokenizer.id_to_token(t).strip()) > 2]
        if len(ids) < 6 or not words or len(ids) > model.config.max_len:
            continue
        position = words[len(words) // 2]
        answer = tokenizer.id_to_token(ids[position])
        masked = ids[:position] + [tokenizer.mask_id] + ids[position + 1:]
        guesses = fill_mask(model, masked, tokenizer=tokenizer, top_k=5)[0]["tokens"]
        found.append({"text": tokenizer.decode(ids[:position]) + "[MASK]" + tokenizer.decode(ids[position + 1:]),
                      "answer": answer, "top5": [[piece, round(p, 3)] for piece, p in guesses]})
        if len(found) == wanted:
            break
    return found


def _translation_scores(model: Any, tokenizer: Any, spec: dict[str, Any], config: TrainConfig,
                        data_dir: str | Path | None, download: bool) -> dict[str, Any]:
    """BLEU on ``spec["test_split"]`` (default test_2016_flickr) greedy and with ``spec["beams"]`` beams."""
    split = spec.get("test_split", "test_2016_flickr")
    src_file, ref_file = corpora.multi30k(split, data_dir, download)
    pairs = corpora.read_pairs(src_file, ref_file)
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    scores: dict[str, Any] = {"split": split, "sentences": len(sources)}
    for beams in [1, *spec.get("beams", [4])]:
        name = "greedy" if beams == 1 else f"beam{beams}"
        started = time.perf_counter()
        hyps = translate(model, tokenizer, sources, num_beams=beams, batch_size=int(spec.get("batch_size", 100)),
                         length_penalty=float(spec.get("length_penalty", 1.0)))
        score = bleu(hyps, refs)
        (Path(config.out_dir) / f"{split}.{name}.en").write_text("\n".join(hyps) + "\n", encoding="utf-8")
        scores[name] = {"bleu": score.score, "signature": str(score), "decode_s": time.perf_counter() - started,
                        "examples": [{"src": s, "ref": r, "hyp": h}
                                     for s, r, h in list(zip(sources, refs, hyps, strict=True))[:3]]}
    return scores


def _prefix_vs_causal(config: TrainConfig, spec: dict[str, Any]) -> dict[str, Any]:
    """Train the same TransformerLM twice on the sequence task, as a prefix-LM and as a causal LM."""
    keys = ("kind", "alphabet", "min_len", "max_len", "eval_examples", "max_count")
    options = {k: spec[k] for k in keys if k in spec}
    found = {}
    for objective in ("prefix", "clm"):
        task = SequenceTask(objective=objective, seed=config.seed, **options)
        run_config = TrainConfig.from_dict({**config.to_dict(), "objective": objective,
                                            "block_size": task.block_size,
                                            "out_dir": str(Path(config.out_dir) / objective)})
        torch.manual_seed(config.seed)
        model = build_model(run_config.model_config(task.tokenizer.vocab_size))
        training = Trainer(run_config, model, task.tokenizer, task).train()
        found["prefix-LM" if objective == "prefix" else "causal LM"] = {"training": training,
                                                                       **exact_match(model, task)}
    return found

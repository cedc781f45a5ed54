"""Run a recipe: a training YAML plus a ``recipe:`` section (``task``: one of :data:`TASKS`, ``corpus``, and
the task's options). One call trains, evaluates and writes ``out_dir/results.json``. Every other key is a
TrainConfig key (default ``precision: auto``); ``recipe.KEY`` overrides the recipe section.
"""

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..data import read_pairs
from ..errors import GlassformerError, MissingFileError
from ..generation import bleu, fill_mask, generate_text, translate
from ..io.checks import MAX_SEED, check_known_keys, is_int, is_number, shown
from ..io.fileio import atomic_write, claim_outputs
from ..models import build_model
from ..training import TrainConfig, Trainer, load, prepare_run
from ..training.config import Overrides, apply_overrides, read_yaml
from ..validate import untyped
from ..viz.plots import plot_losses
from . import corpora
from .induction import run_induction
from .progress import say
from .sequence_task import SequenceTask, exact_match

TASKS = ("lm", "mlm", "translation", "prefix-vs-causal", "induction", "sae")
CORPORA = ("tinyshakespeare", "multi30k", "tang300")
SHIPPED = Path(__file__).with_name("configs")  # the repository's configs/, shipped with the package


def shipped_recipes() -> list[str]:
    """Names of the recipes shipped with the package (``configs/*.yaml`` that have a ``recipe:`` section)."""
    return sorted(path.stem for path in SHIPPED.glob("*.yaml")
                  if "\nrecipe:" in "\n" + path.read_text(encoding="utf-8"))


def find_recipe(name_or_path: str | Path) -> Path:
    """The YAML file of a recipe: ``name_or_path`` itself when it is a file, else the shipped recipe of that
    name (with or without ``.yaml``); a MissingFileError naming the shipped recipes when neither exists."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = SHIPPED / (path.stem + ".yaml")
    if path.suffix in ("", ".yaml") and shipped.is_file():
        return shipped
    raise MissingFileError(f"recipe {str(name_or_path)!r} is neither a file nor a shipped recipe "
                           f"({', '.join(shipped_recipes())})")


@dataclass
class Recipe:
    """A parsed recipe: the training config (data filled in) and the recipe section."""

    train: TrainConfig
    spec: dict[str, Any]


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


_POSITIVE = (lambda v: is_int(v) and v >= 1, "an int >= 1")
_POSITIVE_LIST = (lambda v: isinstance(v, list) and bool(v) and all(is_int(x) and x >= 1 for x in v),
                  "a non-empty list of ints >= 1")
SEQUENCE_OPTIONS = ("kind", "alphabet", "min_len", "max_len", "eval_examples", "max_count")  # SequenceTask checks them
_COMMON = {"task": (lambda v: v in TASKS, f"one of {TASKS}"), "corpus": (lambda v: v is None or v in CORPORA,
           f"one of {CORPORA} or null"), "seed": (lambda v: is_int(v) and 0 <= v <= MAX_SEED, "an int >= 0"),
           "source": (lambda v: isinstance(v, str), "a path")}
# each task's options: (is it valid, what is expected); the sae and prefix-vs-causal tasks check their own further
RECIPE_OPTIONS: dict[str, dict[str, tuple[Any, str]]] = {
    "lm": {"prompts": (lambda v: _strings(v) and bool(v), "a non-empty list of strings"),
           "sample_tokens": _POSITIVE,
           "temperature": (lambda v: is_number(v) and 0 < v < math.inf, "a finite number > 0"),
           "top_k": (lambda v: v is None or is_int(v) and v >= 1, "an int >= 1 or null"),
           "stop": (lambda v: v is None or _strings(v), "a list of strings or null")},
    "mlm": {"examples": _POSITIVE},
    "translation": {"test_split": (lambda v: v in corpora.MULTI30K_SPLITS, f"one of {corpora.MULTI30K_SPLITS}"),
                    "beams": _POSITIVE_LIST, "batch_size": _POSITIVE,
                    "length_penalty": (lambda v: is_number(v) and math.isfinite(v), "a finite number")},
    "prefix-vs-causal": {k: (lambda v: True, "") for k in SEQUENCE_OPTIONS},
    "induction": {**{k: _POSITIVE for k in ("vocab", "min_len", "max_len", "measure_every", "probe_length",
                                            "probe_batch", "gpt2_steps", "gpt2_d_ff")},
                  "control_lengths": _POSITIVE_LIST,
                  "gpt2": (lambda v: isinstance(v, bool), "true or false"),
                  "mlp_from_step": (lambda v: v is None or is_int(v) and v >= 0, "an int >= 0 or null")},
}


def check_recipe_section(spec: dict[str, Any]) -> None:
    """Refuse a ``recipe:`` section with a key its task does not read or a value of the wrong kind, naming it."""
    known = {**_COMMON, **RECIPE_OPTIONS.get(spec.get("task"), {})}
    for key, (valid, expected) in known.items():
        if (key in spec or key == "task") and not valid(spec.get(key)):  # the task first; it must be there
            raise GlassformerError(f"recipe.{key} must be {expected}, got {shown(spec.get(key))}")
    if spec["task"] != "sae":  # the sae task passes its other keys to SAETrainConfig, which checks them
        check_known_keys(spec, set(known), f"recipe (task {spec['task']})")


def load_recipe(config: str | Path | dict[str, Any], overrides: Overrides = (),
                data_dir: str | Path | None = None, download: bool = False) -> Recipe:
    """Read a recipe (a YAML file, or its content as a mapping, not modified), apply ``overrides``
    (TrainConfig keys, ``model.KEY``, ``recipe.KEY``) and attach its corpus from ``data_dir`` (fetched when
    ``download``). Returns the validated TrainConfig with its data files set, and the recipe section."""
    if isinstance(config, dict):
        data, where = config, "the recipe"
    else:
        data, where = read_yaml(config, "recipe file"), str(config)
    if not isinstance(data, dict) or not isinstance(data.get("recipe"), dict):
        raise GlassformerError(f"{where} must be a mapping with a 'recipe:' section (task, corpus, ...)")
    data = apply_overrides(data, overrides, sections=("model", "recipe", "watch"))
    spec = {key: untyped(value, f"recipe.{key}") for key, value in data.pop("recipe").items()}  # no field types them
    check_recipe_section(spec)
    claim_recipe_outputs(data.get("out_dir", "out"), spec)  # before the corpus is written there
    _attach_corpus(spec, data, data_dir, download)
    if "precision" not in data:
        data["precision"] = "auto"  # recipes train in bfloat16 where it measures faster (docs/benchmarks.md)
    return Recipe(TrainConfig.from_dict(data), spec)


def claim_recipe_outputs(out_dir: str | Path, spec: dict[str, Any]) -> None:
    """Refuse, before any work, a user's file, a link or a FIFO where the recipe writes into ``out_dir``."""
    from ..training.run_dir import RUN_FILES

    out = Path(out_dir)
    hyps = [f"{spec.get('test_split', 'test_2016_flickr')}.{'greedy' if b == 1 else f'beam{b}'}.en"
            for b in [1, *spec.get("beams", [4])]] if spec.get("task") == "translation" else []
    claim_outputs([out / name for name in ["results.json", *hyps, *sorted(RUN_FILES)]], what="recipe output")


def _attach_corpus(spec: dict[str, Any], data: dict[str, Any], data_dir: str | Path | None, download: bool) -> None:
    """Fill ``data``'s data (or src/tgt) keys with ``spec["corpus"]``'s files (one of :data:`CORPORA`, checked with
    the section) unless it names its own."""
    corpus = spec.get("corpus")
    if corpus is None:
        return
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
    """The 1-minute load average (None where the OS has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _train(config: TrainConfig, model: Any, tokenizer: Any, batches: Any) -> dict[str, Any]:
    """Train, draw ``out_dir/loss.png`` (also when training fails); the trainer's summary without the history."""
    trainer = Trainer(config, model, tokenizer, batches)
    say(f"training {config.max_steps} steps into {config.out_dir} (metrics.jsonl there; a line per "
        f"{config.log_every} steps when no progress bar is drawn)", config.progress)
    try:
        result = trainer.train()
    finally:
        if trainer.history:
            plot_losses(trainer.history, Path(config.out_dir) / "loss.png")
    return {k: v for k, v in result.items() if k != "history"}


def run_recipe(recipe: Recipe, data_dir: str | Path | None = None, download: bool = False) -> dict[str, Any]:
    """Train and evaluate; returns the results, also written to ``out_dir/results.json``: "task", "corpus",
    "training" (or "models", "runs"), the evaluation ("samples", "fill_mask", "bleu"), "wall_s", the machine."""
    config, spec = recipe.train, recipe.spec
    out = Path(config.out_dir)
    started, load_before = time.perf_counter(), _load_average()
    if spec["task"] == "induction":
        results: dict[str, Any] = {"runs": run_induction(config, spec)}
    elif spec["task"] == "prefix-vs-causal":
        results = {"models": _prefix_vs_causal(config, spec)}
    else:
        say(f"preparing the data: {config.tokenizer} tokenizer and token cache ({spec.get('corpus') or 'your files'})",
            config.progress)
        run = prepare_run(config)
        results = {"training": _train(config, run.model, run.tokenizer, run.batches)}
        model, tokenizer = load(Path(config.out_dir) / "best")
        if spec["task"] == "sae":  # a sparse autoencoder on the model (recipes/sae.py)
            from .sae import run_sae_recipe
            results["sae"] = run_sae_recipe(config, spec, model, tokenizer)
        elif spec["task"] == "lm":
            say(f"sampling {len(spec.get('prompts', [chr(10)]))} continuation(s) from {config.out_dir}/best",
                config.progress)
            results["samples"] = _lm_samples(model, tokenizer, spec)
        elif spec["task"] == "mlm":
            say(f"fill-mask examples from the validation text ({config.out_dir}/best)", config.progress)
            results["fill_mask"] = _fill_mask_examples(model, tokenizer, run.batches.val, spec)
        else:
            results["bleu"] = _translation_scores(model, tokenizer, spec, config, data_dir, download)
    results.update(task=spec["task"], corpus=spec.get("corpus"), wall_s=time.perf_counter() - started,
                   load_average=[load_before, _load_average()], cpu_count=os.cpu_count(),
                   torch_threads=torch.get_num_threads(), config=config.to_dict(), recipe=spec)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "results.json", json.dumps(results, indent=2, ensure_ascii=False) + "\n", what="recipe output")
    return results


def _lm_samples(model: Any, tokenizer: Any, spec: dict[str, Any]) -> list[dict[str, str]]:
    """Sampled continuations of ``spec["prompts"]`` (temperature, top_k, sample_tokens, stop)."""
    options = dict(do_sample=True, temperature=float(spec.get("temperature", 0.8)), top_k=spec.get("top_k"),
                   stop_strings=spec.get("stop"))
    tokens, seed = int(spec.get("sample_tokens", 200)), int(spec.get("seed", 0))
    return [{"prompt": p, "text": p + generate_text(model, tokenizer, p, tokens, seed=seed + n, **options)}
            for n, p in enumerate(spec.get("prompts", ["\n"]))]


def _fill_mask_examples(model: Any, tokenizer: Any, val_ids: Any, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Mask one word (a token: a space, then 3+ letters) in each of the first ``spec["examples"]`` validation
    lines that have one, and list the model's top-5 guesses."""
    text = tokenizer.decode([int(i) for i in val_ids[:20000]])
    wanted, found = int(spec.get("examples", 8)), []
    for line in text.splitlines()[1:]:  # the first line may start mid-line
        ids = tokenizer.encode(line, add_special_tokens=False)
        pieces = [tokenizer.id_to_token(t) for t in ids]
        words = [i for i, p in enumerate(pieces) if i >= 2 and p.startswith(" ") and p.strip().isalpha()
                 and len(p.strip()) > 2]
        if len(ids) < 6 or not words or len(ids) > model.config.max_len:
            continue
        position = words[len(words) // 2]
        masked = ids[:position] + [tokenizer.mask_id] + ids[position + 1:]
        guesses = fill_mask(model, masked, tokenizer=tokenizer, top_k=5)[0]["tokens"]
        found.append({"text": tokenizer.decode(ids[:position]) + "[MASK]" + tokenizer.decode(ids[position + 1:]),
                      "answer": pieces[position], "top5": [[piece, round(p, 3)] for piece, p in guesses]})
        if len(found) == wanted:
            break
    return found


def _translation_scores(model: Any, tokenizer: Any, spec: dict[str, Any], config: TrainConfig,
                        data_dir: str | Path | None, download: bool) -> dict[str, Any]:
    """BLEU on ``spec["test_split"]``, greedy and with ``spec["beams"]`` beams."""
    split = spec.get("test_split", "test_2016_flickr")
    src_file, ref_file = corpora.multi30k(split, data_dir, download)
    pairs = read_pairs(src_file, ref_file)
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    scores: dict[str, Any] = {"split": split, "sentences": len(sources)}
    for beams in [1, *spec.get("beams", [4])]:
        name = "greedy" if beams == 1 else f"beam{beams}"
        say(f"translating the {len(sources):,} sentences of {split} ({'greedy' if beams == 1 else f'{beams} beams'}) "
            f"for BLEU", config.progress)
        started = time.perf_counter()
        hyps = translate(model, tokenizer, sources, num_beams=beams, batch_size=int(spec.get("batch_size", 100)),
                         length_penalty=float(spec.get("length_penalty", 1.0)))
        score = bleu(hyps, refs)
        atomic_write(Path(config.out_dir) / f"{split}.{name}.en", "\n".join(hyps) + "\n", what="recipe output")
        scores[name] = {"bleu": score.score, "signature": str(score), "decode_s": time.perf_counter() - started,
                        "examples": [{"src": s, "ref": r, "hyp": h}
                                     for s, r, h in list(zip(sources, refs, hyps, strict=True))[:3]]}
    return scores


def _prefix_vs_causal(config: TrainConfig, spec: dict[str, Any]) -> dict[str, Any]:
    """Train the same TransformerLM twice on the sequence task, as a prefix-LM and as a causal LM."""
    options = {k: spec[k] for k in SEQUENCE_OPTIONS if k in spec}
    found = {}
    for objective in ("prefix", "clm"):
        task = SequenceTask(objective=objective, seed=config.seed, **options)
        run_config = TrainConfig.from_dict({**config.to_dict(), "objective": objective, "block_size": task.block_size,
                                            "out_dir": str(Path(config.out_dir) / objective)})
        torch.manual_seed(config.seed)
        model = build_model(run_config.model_config(task.tokenizer.vocab_size))
        name = "prefix-LM" if objective == "prefix" else "causal LM"
        say(f"{name} ({len(found) + 1} of 2)", config.progress)
        training = _train(run_config, model, task.tokenizer, task)
        say(f"{name}: greedy answers to the {task.eval_examples} validation inputs (exact match)", config.progress)
        found[name] = {"training": training, **exact_match(model, task)}
    return found

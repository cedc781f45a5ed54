"""``glassformer train --config FILE.yaml [--key value ...]``: train with any of the four objectives, alone or
under ``torchrun --nproc_per_node=N`` (docs/training.md)."""

import argparse
import json
import sys
import textwrap
from pathlib import Path

from ...io.fileio import Writes, atomic_write, claim_outputs
from .overrides import check_keys, dataclass_keys, overrides_from_argv

WRITES = (Writes(("train", "--config", "{config}", "--out_dir", "{out}"),
                 ("{out}/metrics.jsonl", "{out}/loss.png", "{out}/microscope.jsonl", "{out}/microscope.json",
                  "{out}/tracker.json", "{out}/.glassformer.lock", "{out}/summary.json")),)


def _shown_default(default: str) -> str:
    """A dataclass default as written in Python, as a user writes it in YAML or on the command line."""
    return {"None": "null", "True": "true", "False": "false"}.get(default, default.strip('"'))


def _fields() -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """TrainConfig's and ModelConfig's fields (name, default, comment), read from their source (no torch)."""
    package = Path(__file__).resolve().parents[2]
    return (dataclass_keys(package / "training" / "config.py", "TrainConfig"),
            dataclass_keys(package / "config.py", "ModelConfig"))


def keys_help() -> str:
    """The help's list of config keys, defaults and meanings, read from the dataclasses' source (no torch)."""
    train, model = _fields()
    lines = ["config keys (in the YAML file, or as --key value; default, then what it is):"]
    for name, default, comment in train:
        lines.append((f"  --{name} {_shown_default(default)}".ljust(34) + f" {comment}").rstrip())
    shown = [f"{name}={_shown_default(default)}" for name, default, _ in model if name != "vocab_size"]
    lines.append("model keys (model: section, or --model.KEY value; vocab_size comes from the tokenizer):")
    lines += textwrap.wrap(" ".join(shown), 101, initial_indent="  ", subsequent_indent="  ",
                           break_long_words=False, break_on_hyphens=False)
    lines.append("  (objective clm without a preset starts from pos=learned scale_embeddings=false init_std=0.02)")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``train`` verb to the ``glassformer`` subparsers (it takes ``--key value`` overrides)."""
    description = ("Train from a YAML config; any key can be overridden on the command line as --key value "
                   "(model fields as --model.KEY value). Writes checkpoints (ckpt-NNNNNN/ folders, pointed to by "
                   "last and best), metrics.jsonl, loss.png and summary.json to out_dir and prints a short summary; "
                   "SIGTERM or Ctrl-C stops after saving and prints the command that resumes. --log tensorboard "
                   "(or wandb, or tensorboard,wandb) also sends the run to a tracker. More: docs/training.md.")
    parser = sub.add_parser(
        "train", help="train on your own text files from a YAML config (clm, mlm, prefix-LM or seq2seq)",
        description=textwrap.fill(description, 100),
        epilog=keys_help() + "\n\nexample: glassformer train --config configs/shakespeare_char.yaml --max_steps 500 "
                             "--out_dir out/sc",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, help="YAML file of training keys (optional: overrides alone work)")
    parser.add_argument("--json", action="store_true",
                        help="print the run's summary as one JSON line instead of the readable lines")
    parser.set_defaults(overrides=[], precheck=precheck)


def known_keys() -> dict[str, set[str] | None]:
    """The keys a training config takes ("") and those of its sections (None: checked where it is read), read
    from the dataclasses' source like :func:`keys_help` (no torch)."""
    train, model = _fields()
    return {"": {name for name, _, _ in train}, "model": {name for name, _, _ in model} | {"vocab_size", "preset"},
            "watch": None, "recipe": None}


def check_config_keys(config_file: Path | None, pairs: list[tuple[str, object]]) -> object:
    """Refuse an unknown key of the YAML file or of the command line, naming the closest known one; returns
    the file's content (None without a file)."""
    from ...io.loaders import load_yaml

    known = known_keys()
    data = None
    if config_file is not None:
        data = load_yaml(config_file, "config file")
        # anything else (not a mapping, a key that is no text): TrainConfig.from_yaml says what is wrong
        if isinstance(data, dict) and all(isinstance(key, str) for key in data):
            model = data.get("model")
            nested = [f"model.{key}" for key in model] if isinstance(model, dict) else []
            check_keys([str(key) for key in data if key != "model"] + nested, known, source=str(config_file))
    check_keys([key for key, _ in pairs], known)
    return data


def precheck(args: argparse.Namespace) -> None:
    """Run by ``cli.main`` before torch loads: the overrides parse and every key of them and of ``--config`` is
    a known one (else UsageError with "did you mean"); ``args.follows_load`` says whether the run's thread count
    will follow the load (no ``num_threads``), which decides how its threads wait (runtime/threads.py)."""
    pairs = overrides_from_argv(args.overrides)
    args.follows_load = count_follows_load(check_config_keys(args.config, pairs), pairs)


def count_follows_load(config: object, pairs: list[tuple[str, object]]) -> bool:
    """Whether a run of the YAML content ``config`` plus override ``pairs`` leaves the thread count to
    glassformer: no ``num_threads``, or 0 / null (the Trainer then follows the load)."""
    from ...validate import coerced

    count = config.get("num_threads") if isinstance(config, dict) else None
    for key, value in pairs:
        if key == "num_threads":
            count = coerced("num_threads", "int | None", value)  # "0" typed: 0
    return count is None or count == 0


def resume_command(args: argparse.Namespace) -> str:
    """The command line that continues this run: the same words, with ``--resume true``."""
    import shlex

    words, overrides = ["glassformer", "train"], iter(args.overrides)
    if args.config is not None:
        words += ["--config", str(args.config)]
    for word in overrides:
        key = "--" + word[2:].replace("-", "_") if word.startswith("--") else word  # --resume, --resume=true
        if key == "--resume":
            next(overrides, None)  # and its value
        elif not key.startswith("--resume="):
            words.append(word)
    return shlex.join([*words, "--resume", "true"])


def run(args: argparse.Namespace) -> int:
    """Train as ``args.config`` plus ``args.overrides`` (keys checked by :func:`precheck`) say; print a short
    summary (``--json``: one JSON line), write it to ``out_dir/summary.json`` and (rank 0, also after an
    error) draw ``out_dir/loss.png``. Returns 0, or 128 + the signal number when Ctrl-C (130) or SIGTERM
    (143) stopped the run after saving a checkpoint (then the command that resumes is printed).
    """
    from ...io.records import finite_or_null
    from ...training import TrainConfig, Trainer, prepare_run
    from ...training.distributed import init_distributed, shutdown
    from ...training.report import say, summary_lines, use_language
    from ...training.run_dir import find_resumable
    from ...training.setup import check_run
    from ...viz.plots import plot_losses

    use_language(args.ui_lang)  # the command line's language (--lang zh, a zh locale)
    config = TrainConfig.from_yaml(args.config, overrides_from_argv(args.overrides))
    check_run(config)  # data named, folders, trackers: before the summary's place is claimed
    summary_file = Path(config.out_dir) / "summary.json"
    dist = init_distributed(config.device)
    try:
        if dist.is_main:
            claim_outputs([summary_file], what="run summary")  # a user's file there is refused before training
        if dist.is_main and config.progress:  # reading files and training a BPE tokenizer can take a while
            files = [config.pairs] if config.pairs else [config.src] if config.src else config.data
            print(say("preparing", tokenizer=config.tokenizer, n=len(files)), file=sys.stderr, flush=True)
        run_ = prepare_run(config, checked=True)
        if config.resume and dist.is_main and find_resumable(config.out_dir) is None:
            print(say("nothing_to_resume", out=config.out_dir), file=sys.stderr)
        trainer = Trainer(config, run_.model, run_.tokenizer, run_.batches, dist=dist)
        try:
            result = trainer.train()
        finally:
            if dist.is_main and trainer.history:
                plot_losses(trainer.history, Path(config.out_dir) / "loss.png")
    finally:
        shutdown(dist)
    if dist.is_main:
        full = finite_or_null({k: v for k, v in result.items() if k != "history"})  # strict JSON: no NaN token
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in full.items()}
        atomic_write(summary_file, json.dumps(full, indent=1) + "\n", what="run summary")
        kept = [str(Path(config.out_dir) / name) for name in ("last", "best") if (Path(config.out_dir) / name).exists()]
        if args.json:  # the JSON line, then where the checkpoints are (what scripts read)
            print(json.dumps(shown))
            print(f"checkpoints in {' and '.join(kept)}" if kept else "no checkpoint was written")
        else:
            print("\n".join(summary_lines(result, config.max_steps)))
            print(say("kept", kept=say("and").join(kept), summary=summary_file) if kept
                  else say("none_kept", summary=summary_file))
        if result["stopped"] == "interrupted":
            print(say("resume_with", step=result["step"], max_steps=config.max_steps, command=resume_command(args))
                  + (say("same_torchrun") if dist.distributed else ""), file=sys.stderr, flush=True)
    return 128 + int(trainer.stop_signal or 2) if result["stopped"] == "interrupted" else 0

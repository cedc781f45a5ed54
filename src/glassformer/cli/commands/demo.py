"""``glassformer demo``: the lesson of :mod:`glassformer.lessons.tiny_char` (or ``lesson2``) end to end."""

import argparse
import json
import sys
from pathlib import Path

from ...io.fileio import Writes, atomic_write, claim_outputs

WRITES = (Writes(("demo", "--out", "{out}"), ("{out}/results.json", "{out}/loss_curve.png",
                                           "{out}/attention_layer1.png", "{out}/run/metrics.jsonl")),
          Writes(("demo", "--lesson2", "--out", "{out}"), ("{out}/lesson2.json",)))


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` verb to the ``glassformer`` subparsers."""
    parser = sub.add_parser(
        "demo", help="train the tiny character LM of the lessons and show every step",
        description="Train a 2-layer character Transformer on four built-in lines and show shapes, checks, "
                    "training history, a greedy generation trace and a checkpoint reload. Writes results.json, "
                    "a loss curve and attention maps to --out.")
    parser.add_argument("--out", type=Path, default=Path("demo-output"), help="output folder (default demo-output)")
    parser.add_argument("--lesson2", action="store_true",
                        help="run lesson 2's experiments instead (attention vs torch.nn, sqrt(d), positions)")
    parser.add_argument("--lang", metavar="LANG",
                        help="language of the printed steps: en or zh (default: the locale; LANG=zh_CN.UTF-8 gives zh)")


def run(args: argparse.Namespace) -> int:
    """Run the tiny char LM lesson into ``args.out`` (or lesson 2) and print its summary; 1 when the trained
    model does not generate the lesson's expected line, else 0."""
    import torch

    from ...lessons import tiny_char
    from ...viz.i18n import resolve_lang, text

    lang = resolve_lang(args.lang, "--lang")  # before training: a typo fails at once
    if args.lesson2:
        return run_lesson2(args.out, lang)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 32-wide model: more threads only add synchronisation
    print(text("demo.training_now", lang, steps=tiny_char.STEPS, seconds=15), flush=True)
    try:  # a progress bar on a terminal; elsewhere the line above says what happens
        result = tiny_char.run(args.out, progress=sys.stderr.isatty())
    finally:
        torch.set_num_threads(threads)
    print(tiny_char.summary(result, lang))
    if not result["generation"]["text"].startswith(tiny_char.EXPECTED):
        print(f"glassformer: error: expected the generation to start with {tiny_char.EXPECTED!r}")
        return 1
    return 0


def run_lesson2(out: Path, lang: str = "en") -> int:
    """Run lesson 2's experiments, print their summary and write the findings to ``out/lesson2.json``; 0."""
    from ...lessons import lesson2
    from ...viz.i18n import text

    claim_outputs([out / "lesson2.json"], what="--out")  # a user's file, a link: refused before the work
    findings = lesson2.run_all()
    print(lesson2.summary(findings, lang))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "lesson2.json", json.dumps(findings, indent=2), what="--out")
    print(text("lesson2.written", lang, path=out / "lesson2.json"))
    return 0

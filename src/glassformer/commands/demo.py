"""``glassformer demo``: the lessons' experiments, end to end, with no files needed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="run the lesson experiments and print what they show",
                            description="Run lesson 2's experiments (attention vs torch.nn, why scale by "
                                        "sqrt(d), permutation equivariance, positions) and print the findings.")
    parser.add_argument("--out", type=Path, default=Path("demo-output"), help="folder for findings.json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..lessons import lesson2

    findings = lesson2.run_all()
    print(lesson2.summary(findings))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lesson2.json").write_text(json.dumps(findings, indent=2), encoding="utf-8")
    print(f"findings written to {args.out / 'lesson2.json'}")
    return 0

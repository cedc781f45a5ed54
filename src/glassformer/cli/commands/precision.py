"""``--precision`` for the commands that run a model: float32, or autocast to
bfloat16/float16 on float32 weights; "auto" times the command's own work both ways here
(:mod:`glassformer.runtime.precision`). A choice other than float32 is printed to standard error."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported when a command runs, not when the command line is parsed
    from ...runtime.precision import Precision


def add_precision(parser: argparse.ArgumentParser) -> None:
    """Add ``--precision``, default float32."""
    parser.add_argument("--precision", dest="precision", default="float32", metavar="PRECISION",
                        help="auto, float32, bfloat16 or float16: bfloat16/float16 run under autocast; auto "
                             "measures whether bfloat16 is faster here (default: float32)")


def choose_precision(asked: str, model: Any, work: Callable[[], object], what: str) -> Precision:
    """Resolve ``--precision`` for ``model``; "auto" times ``work`` (a short piece of the command's job) in
    float32 and under bfloat16 autocast. ``what`` names the job and its shape ("generate | 1 row")."""
    from ...runtime.precision import autocast, check_precision, model_case, resolve_precision

    check_precision(asked, "--precision")
    device = next(model.parameters()).device

    def reduced() -> object:
        with autocast("bfloat16", device):
            return work()

    chosen = resolve_precision(asked, device, lambda: (work, reduced), f"{what} | {model_case(model.config)}")
    if asked != "float32":
        print(chosen.describe(), file=sys.stderr, flush=True)
    return chosen

"""What idle hook points cost: glassformer with its hook points against the same code without them.

The hook points (``self.tap(...)`` in nn/ and models/, see glassformer.nn.taps) must cost nothing
measurable while no hook is attached. This script imports a copy of the package from before they
existed under another name, builds both models with the same weights, and times them in alternation
(glassformer.bench.timing.paired): an inference forward and a training step for each benchmark size,
and one KV-cached decoding step (batch 1) of the generation model. Prints a Markdown table and writes
JSON. Figures and the machine: docs/interpret.md#what-hooks-cost.

    python benchmarks/bench_hooks_idle.py --before /tmp/before/src/glassformer [--rounds 15] [--out FILE]

``--before`` is a ``src/glassformer`` folder without the hook points, e.g. from
``git archive COMMIT src | tar -x -C /tmp/before`` with COMMIT the last commit before them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from glassformer.bench.runner import machine
from glassformer.bench.setups import SIZES, Size
from glassformer.bench.timing import paired, paired_ratio
from glassformer.models import TransformerLM


def import_copy(folder: Path, name: str = "glassformer_before"):
    """The package in ``folder`` imported as ``name`` (its imports are relative, so it keeps to itself)."""
    root = Path(tempfile.mkdtemp())
    shutil.copytree(folder, root / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, str(root))
    return importlib.import_module(f"{name}.models"), importlib.import_module(f"{name}.config")


def pair_of_models(before, size: Size) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(with hook points, without), same config and weights."""
    models, config_module = before
    config = size.config()
    torch.manual_seed(0)
    now = TransformerLM(config)
    fields = {k: v for k, v in config.to_dict().items() if k != "attn_only"}  # a field the old config lacks
    then = models.TransformerLM(config_module.ModelConfig.from_dict(fields))
    then.load_state_dict(now.state_dict())
    return now, then


def forward_and_step(model: torch.nn.Module, ids: torch.Tensor):
    """(inference forward, training step) closures for ``model`` on ``ids``."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def forward() -> None:
        with torch.inference_mode():
            model(ids)

    def step() -> None:
        logits = model(ids)
        F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return forward, step


def decode_step(model: torch.nn.Module, prompt: int = 64):
    """A closure running one KV-cached decoding step (batch 1) after a ``prompt``-token prefix."""
    ids = torch.randint(0, model.config.vocab_size, (1, prompt + 1), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        cache = model.new_cache(1, prompt + 1)
        model.hidden_states(ids[:, :prompt], cache=cache)

    def step() -> None:
        with torch.inference_mode():
            for layer in cache:
                layer.length = prompt  # rewind: every call decodes the same position
            model.logits(model.hidden_states(ids[:, prompt:], cache=cache))

    return step


CASES = ("forward", "training step", "decode step")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a src/glassformer folder without hook points")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    parser.add_argument("--out", type=Path, default=Path("hooks_idle.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    before = import_copy(args.before)
    results = {"machine": machine(), "rounds": args.rounds, "calls": args.calls, "rows": []}
    for size in (SIZES[name] for name in args.sizes):
        now, then = pair_of_models(before, size)
        ids = torch.randint(0, size.vocab_size, (size.batch, size.block), generator=torch.Generator().manual_seed(1))
        closures = {"forward": lambda m: forward_and_step(m, ids)[0],  # noqa: B023 (used within the loop)
                    "training step": lambda m: forward_and_step(m, ids)[1],  # noqa: B023
                    "decode step": decode_step}
        for case in args.cases:
            with_taps, without = closures[case](now), closures[case](then)
            timings = paired({"hook points": with_taps, "before": without}, rounds=args.rounds, calls=args.calls)
            results["rows"].append({
                "size": size.name, "case": case,
                "ms": {name: 1e3 * t.median for name, t in timings.items()},
                "ratio": paired_ratio(timings["hook points"], timings["before"]),
                "spread": {name: t.spread for name, t in timings.items()}})
    m = results["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['torch_threads']} torch threads, torch {m['torch']}, "
          f"load {m.get('load_1min', 0):.1f}; {args.rounds} paired rounds of {args.calls} calls")
    print("| size | case | before (ms) | hook points idle (ms) | time ratio | spread |")
    print("|---|---|---|---|---|---|")
    for r in results["rows"]:
        print(f"| {r['size']} | {r['case']} | {r['ms']['before']:.3f} | {r['ms']['hook points']:.3f} | "
              f"{r['ratio']:.3f} | {max(r['spread'].values()):.0%} |")
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"JSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

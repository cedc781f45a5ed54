"""Defaults that check themselves: each speed choice glassformer makes by default, timed against its
plain alternative on the machine at hand (``glassformer bench --defaults``).

A default is a bet that one way is faster here: Muon's Newton-Schulz precision (float32 or bfloat16),
``precision: auto`` (float32 or bfloat16 autocast), the few-row decoding route (or plain ``F.linear``),
the lean decoding step (or the model's own forward at every token), the thread count (glassformer's plan
or torch's), and no ``torch.compile`` (or compiling). Each check runs the default's way and the other
way in alternation (paired rounds, the order flipped every round: a slow moment slows both sides of a
pair) and reports the median of the per-round time ratios, default / alternative. A default *loses* when
that ratio exceeds ``1 + tolerance``. Where the default *is* the alternative (``precision: auto`` chose
float32 and float32 is the plain way), nothing is timed: the ratio is 1 by construction. Only ratios are
compared, never wall times, so a busy machine shifts both sides alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..config import ModelConfig
from ..errors import check_number
from ..models import TransformerLM
from ..runtime import kernel_choice, threads
from ..runtime.linear import set_batched_matvec
from ..runtime.precision import model_case, resolve_precision
from ..training.muon import resolve_ns_precision
from ..training.optim import muon_params
from .timing import cpu_line, paired, paired_ratio
from .train import ADAMW, train_step

TOLERANCE = 0.10  # a default may be at most 10% slower than its alternative
CHECKS = ("newton_schulz", "precision", "decode_route", "decode_step", "threads", "compile")


def recipe_model(n_layers: int = 2) -> TransformerLM:
    """The Shakespeare recipe's model (``shakespeare_char_fast``: 2 layers, d 128, RoPE, context 64), seeded."""
    torch.manual_seed(0)
    config = ModelConfig.preset("shakespeare-char", vocab_size=65, n_layers=n_layers, pos="rope", max_len=64,
                                dropout=0.0)
    return TransformerLM(config)


def decode_model() -> TransformerLM:
    """A model whose projections are large enough for the few-row route (d 384, 6 layers: nanoGPT's baby GPT)."""
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(vocab_size=65, d_model=384, n_heads=6, n_layers=6, d_ff=1536, max_len=256,
                                     dropout=0.0, bias=False))


def _compare(default: Callable[[], object], other: Callable[[], object], rounds: int, calls: int) -> dict[str, Any]:
    """Time ``default`` and ``other`` in alternation: each one's median seconds per call and the median
    of the per-round ratios default / other."""
    timings = paired({"default": default, "other": other}, rounds=rounds, calls=calls)
    return {"default_s": timings["default"].median, "other_s": timings["other"].median,
            "ratio": paired_ratio(timings["default"], timings["other"]),
            "ratios": [d / o for d, o in zip(timings["default"].rounds, timings["other"].rounds)]}


def _same(default: str, why: str) -> dict[str, Any]:
    """A check whose default is the plain way here: nothing to time, ratio 1."""
    return {"default": default, "other": default, "why": why, "ratio": 1.0, "timed": False}


def check_newton_schulz(rounds: int, calls: int) -> dict[str, Any]:
    """Muon's Newton-Schulz precision ("auto") against the other precision, on the recipe's matrices."""
    from ..training.muon import ns_ways

    shapes = [tuple(p.shape) for p in muon_params(recipe_model())]
    chosen, why = resolve_ns_precision("auto", "cpu", shapes)
    fp32, bf16 = ns_ways(shapes)
    ways = {"float32": fp32, "bfloat16": bf16}
    other = "bfloat16" if chosen == "float32" else "float32"
    timed = _compare(ways[chosen], ways[other], rounds, calls)
    return {"default": chosen, "other": other, "why": why, "timed": True, **timed}


def check_precision(rounds: int, calls: int, batch: int) -> dict[str, Any]:
    """``precision: auto`` for the recipe's training step (batch x 64) against the other precision."""
    model = recipe_model()
    ids = torch.randint(0, 65, (batch, 64), generator=torch.Generator().manual_seed(0))
    targets = ids.roll(-1, dims=1)
    steps = {name: train_step(model, _optimizer(model), ids, targets, precision=name)
             for name in ("float32", "bfloat16")}
    case = f"train | {model_case(model.config)} | batch {batch}x64"
    chosen = resolve_precision("auto", "cpu", lambda: (steps["float32"], steps["bfloat16"]), case)
    other = "bfloat16" if chosen.name == "float32" else "float32"
    timed = _compare(steps[chosen.name], steps[other], rounds, calls)
    return {"default": chosen.name, "other": other, "why": chosen.reason, "timed": True, **timed}


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    from ..training.optim import make_optimizer

    return make_optimizer(model, **ADAMW)


def check_decode_route(rounds: int, calls: int, new_tokens: int) -> dict[str, Any]:
    """Batch-1 greedy decoding with the few-row route (as measured here) against plain ``F.linear``."""
    from ..generation import generate

    model = decode_model().eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)

    def decode(route: bool) -> Callable[[], object]:
        def run() -> object:
            previous = set_batched_matvec(route)
            try:
                return generate(model, prompt, new_tokens, do_sample=False)
            finally:
                set_batched_matvec(previous)
        return run

    decode(True)()  # the route's choices are measured (once per machine) before anything is timed
    routed = [case for case, on in kernel_choice.choices().items() if case.startswith("linear few-row") and on]
    if not routed:
        return _same("F.linear", "the route measured not clearly faster for any decoding shape here: plain F.linear")
    timed = _compare(decode(True), decode(False), rounds, calls)
    return {"default": "few-row route", "other": "F.linear", "why": f"route taken for {len(routed)} shape(s)",
            "timed": True, **timed}


def check_decode_step(rounds: int, calls: int, new_tokens: int) -> dict[str, Any]:
    """Batch-1 greedy decoding through :class:`~glassformer.runtime.decode.LeanStep` (the default) against
    the model's own forward at every token (the same numbers, more Python per token)."""
    from ..generation import generate
    from ..runtime.decode import set_lean_step

    model = decode_model().eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)

    def decode(lean: bool) -> Callable[[], object]:
        def run() -> object:
            previous = set_lean_step(lean)
            try:
                return generate(model, prompt, new_tokens, do_sample=False)
            finally:
                set_lean_step(previous)
        return run

    timed = _compare(decode(True), decode(False), rounds, calls)
    return {"default": "lean step", "other": "model forward", "why": "a decoder-only model of plain blocks, no hooks",
            "timed": True, **timed}


def check_threads(rounds: int, calls: int, batch: int) -> dict[str, Any]:
    """glassformer's thread plan for the load now against torch's default count, on the recipe's step."""
    cpus = threads.usable_cpus()
    plan = threads.plan()
    default_count = getattr(threads, "_default", None) or torch.get_num_threads()  # torch's, before any plan
    planned = plan.threads or default_count
    if planned == default_count:
        return _same(_count(planned), plan.reason)
    model = recipe_model()
    ids = torch.randint(0, 65, (batch, 64), generator=torch.Generator().manual_seed(0))
    step = train_step(model, _optimizer(model), ids, ids.roll(-1, dims=1))

    def with_threads(n: int) -> Callable[[], None]:
        def run() -> None:
            previous = torch.get_num_threads()
            torch.set_num_threads(n)
            try:
                step()
            finally:
                torch.set_num_threads(previous)
        return run

    timed = _compare(with_threads(planned), with_threads(default_count), rounds, calls)
    return {"default": _count(planned), "other": f"{_count(default_count)} (torch's, {cpus} CPUs)",
            "why": plan.reason, "timed": True, **timed}


def _count(n: int) -> str:
    """``1 thread``, ``2 threads``."""
    return f"{n} thread{'s' * (n != 1)}"


def check_compile(rounds: int, calls: int, batch: int) -> dict[str, Any]:
    """No ``torch.compile`` (the default, ``compile: false``) against a compiled training step."""
    eager, compiled = recipe_model(), recipe_model()
    ids = torch.randint(0, 65, (batch, 64), generator=torch.Generator().manual_seed(0))
    targets = ids.roll(-1, dims=1)
    timed = _compare(train_step(eager, _optimizer(eager), ids, targets),
                     train_step(torch.compile(compiled), _optimizer(compiled), ids, targets), rounds, calls)
    return {"default": "eager", "other": "torch.compile", "why": "compile: false is the default", "timed": True,
            **timed}


def check_defaults(quick: bool = False, tolerance: float = TOLERANCE, only: tuple[str, ...] = CHECKS,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time every default in ``only`` against its alternative on this CPU.

    Args:
        quick: fewer rounds, smaller batches and fewer decoded tokens, and no compile check (which
            spends most of its time compiling): under a minute on 2 cores.
        tolerance: a default whose median time ratio (default / alternative) exceeds ``1 + tolerance`` loses.
        only: the checks to run, from CHECKS.
        progress: called with each check's name when it is done.

    Returns:
        {"machine", "tolerance", "quick", "checks": {name: {"default", "other", "why", "ratio",
        "timed", "default_s", "other_s", "ratios", "loses"}}, "losers": [names], "ok": bool}.
    """
    check_number("tolerance", tolerance, 0.0)
    unknown = [name for name in only if name not in CHECKS]
    if unknown:
        from ..errors import GlassformerError
        raise GlassformerError(f"unknown default check(s) {unknown}; available: {list(CHECKS)}")
    rounds, calls, batch = (5, 1, 8) if quick else (9, 3, 32)
    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "newton_schulz": lambda: check_newton_schulz(rounds, calls),
        "precision": lambda: check_precision(rounds, 1, batch),
        "decode_route": lambda: check_decode_route(rounds, 1, 8 if quick else 64),
        "decode_step": lambda: check_decode_step(rounds, 1, 8 if quick else 64),
        "threads": lambda: check_threads(rounds, calls, batch),
        "compile": lambda: check_compile(rounds, calls, batch),
    }
    checks: dict[str, dict[str, Any]] = {}
    for name in only:
        if quick and name == "compile":
            checks[name] = {"default": "eager", "other": "torch.compile", "why": "skipped by --quick (compiling takes "
                            "minutes)", "ratio": None, "timed": False, "loses": False}
        else:
            result = runs[name]()
            result["loses"] = result["ratio"] > 1 + tolerance
            checks[name] = result
        if progress:
            progress(name)
    losers = [name for name, result in checks.items() if result["loses"]]
    machine = {"cpu": cpu_line(), "cpus": threads.usable_cpus(), "threads": torch.get_num_threads(),
               "torch": torch.__version__, "others_running": kernel_choice.load_now()}
    return {"machine": machine, "tolerance": tolerance, "quick": quick, "checks": checks, "losers": losers,
            "ok": not losers}


def format_defaults(results: dict[str, Any]) -> str:
    """The table ``glassformer bench --defaults`` prints, with a last line naming any default that loses."""
    machine = results["machine"]
    lines = [f"machine: {machine['cpu']}, {machine['cpus']} CPUs, {machine['threads']} threads, torch "
             f"{machine['torch']}", "",
             "| default | here it is | alternative | default / alternative time | verdict | why |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, check in results["checks"].items():
        if check["ratio"] is None:
            ratio, verdict = "-", "not timed"
        elif not check["timed"]:
            ratio, verdict = "1.00 (same way)", "ok"
        else:
            spread = f" ({min(check['ratios']):.2f}-{max(check['ratios']):.2f})"
            ratio = f"{check['ratio']:.2f}{spread}"
            verdict = "**loses**" if check["loses"] else "ok"
        lines.append(f"| {name} | {check['default']} | {check['other']} | {ratio} | {verdict} | {check['why']} |")
    limit = f"more than {results['tolerance']:.0%} slower than its alternative"
    lines.append("")
    lines.append(f"defaults {limit}: {', '.join(results['losers'])}" if results["losers"]
                 else f"no default is {limit}")
    return "\n".join(lines)


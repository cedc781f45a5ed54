"""Defaults that check themselves (``glassformer bench --defaults``): each default speed choice against its
plain alternative here, by the median of paired per-round time ratios. A default *loses* when that ratio
exceeds ``1 + tolerance``; where it *is* the plain way here, nothing is timed and the ratio is 1."""

import math
import statistics
from collections.abc import Callable
from typing import Any

import torch

from ..config import ModelConfig
from ..errors import GlassformerError
from ..io.checks import check_number
from ..models import TransformerLM
from ..runtime import kernel_choice, pages, threads
from ..runtime.attention import bf16_units, use_bf16_attention
from ..runtime.linear import set_batched_matvec, streams
from ..runtime.precision import model_case, resolve_precision
from ..training.muon import resolve_ns_precision
from ..training.optim import make_optimizer, muon_params
from .timing import cpu_line, paired, paired_ratio, time_call, with_setting
from .train import ADAMW, train_step

TOLERANCE = 0.10  # a default may be at most 10% slower than its alternative
CHECKS = ("newton_schulz", "precision", "bf16_attention", "decode_route", "huge_pages", "threads", "compile")


def recipe_model() -> TransformerLM:
    """The Shakespeare recipe's model (``shakespeare_char_fast``: 2 layers, d 128, RoPE, context 64), seeded."""
    torch.manual_seed(0)
    config = ModelConfig.preset("shakespeare-char", vocab_size=65, n_layers=2, pos="rope", max_len=64,
                                dropout=0.0)
    return TransformerLM(config)


def decode_model() -> TransformerLM:
    """A model whose projections are large enough for the few-row route (d 384, 6 layers: nanoGPT's baby GPT)."""
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(vocab_size=65, d_model=384, n_heads=6, n_layers=6, d_ff=1536, max_len=256,
                                     dropout=0.0, bias=False))


def _step(model: TransformerLM, batch: int, precision: str = "float32", compiled: bool = False) -> Callable[[], None]:
    """One training step of ``model`` (compiled or not, its own AdamW) on a seeded batch x 64 batch."""
    ids = torch.randint(0, 65, (batch, 64), generator=torch.Generator().manual_seed(0))
    return train_step(torch.compile(model) if compiled else model, make_optimizer(model, **ADAMW), ids,
                      ids.roll(-1, dims=1), precision=precision)


def _decoding(new_tokens: int) -> Callable[[], object]:
    """Batch-1 greedy decoding of ``new_tokens`` tokens by :func:`decode_model`."""
    from ..generation import generate

    model, prompt = decode_model().eval(), torch.zeros(1, 1, dtype=torch.long)
    return lambda: generate(model, prompt, new_tokens, do_sample=False)


def _timed(default: str, other: str, why: str, ways: tuple[Callable[[], object], Callable[[], object]],
           rounds: int, calls: int) -> dict[str, Any]:
    """A check's record, ``ways`` (the default's, the other's) timed in paired rounds: each side's median
    seconds per call, the per-round ratios default / other and their median."""
    timings = paired(dict(zip(("default", "other"), ways)), rounds=rounds, calls=calls)
    d, o = timings["default"], timings["other"]
    return {"default": default, "other": other, "why": why, "timed": True, "default_s": d.median,
            "other_s": o.median, "ratio": paired_ratio(d, o), "ratios": [a / b for a, b in zip(d.rounds, o.rounds)],
            "default_rounds": d.rounds, "other_rounds": o.rounds}


def _same(default: str, why: str) -> dict[str, Any]:
    """A check whose default is the plain way here: nothing to time, ratio 1."""
    return {"default": default, "other": default, "why": why, "ratio": 1.0, "timed": False}


def check_newton_schulz(rounds: int, calls: int) -> dict[str, Any]:
    """Muon's Newton-Schulz precision ("auto") against the other precision, on the recipe's matrices."""
    from ..training.muon import ns_ways

    shapes = [tuple(p.shape) for p in muon_params(recipe_model())]
    chosen, why = resolve_ns_precision("auto", "cpu", shapes)
    ways = dict(zip(("float32", "bfloat16"), ns_ways(shapes)))
    other = "bfloat16" if chosen == "float32" else "float32"
    return _timed(chosen, other, why, (ways[chosen], ways[other]), rounds, calls)


def check_precision(rounds: int, calls: int, batch: int) -> dict[str, Any]:
    """``precision: auto`` for the recipe's training step (batch x 64) against the other precision."""
    model = recipe_model()
    use_bf16_attention(model)  # as the Trainer does before it measures
    steps = {name: _step(model, batch, name) for name in ("float32", "bfloat16")}
    case = f"train | {model_case(model.config)} | batch {batch}x64"
    chosen = resolve_precision("auto", "cpu", lambda: (steps["float32"], steps["bfloat16"]), case)
    other = "bfloat16" if chosen.name == "float32" else "float32"
    return _timed(chosen.name, other, chosen.reason, (steps[chosen.name], steps[other]), rounds, calls)


def check_bf16_attention(rounds: int, calls: int, batch: int) -> dict[str, Any]:
    """The recipe's bfloat16 training step (batch x 64) with the attention the Trainer gives it (the blocked
    bfloat16 kernel where measured faster here) against torch's fused kernel."""
    if not bf16_units():
        return _same("fused kernel", "no bfloat16 units (avx512_bf16, amx_bf16): the block's fused kernel")
    model = recipe_model()
    step = _step(model, batch, "bfloat16")

    def with_kernel(enabled: bool) -> Callable[[], None]:
        def run() -> None:
            use_bf16_attention(model, enabled)
            try:
                step()
            finally:
                use_bf16_attention(model, False)
        return run

    blocked, fused = with_kernel(True), with_kernel(False)
    blocked()  # the kernel's choice is measured (once per shape class) before anything is timed
    cases = {case: record for case, record in kernel_choice.records().items() if case.startswith("attention bfloat16")}
    taken = [case for case, record in cases.items() if kernel_choice.effective(record)]
    if not taken:
        how = "; ".join(f"{case}: {kernel_choice.describe(record)}" for case, record in cases.items())
        return _same("fused kernel", f"the blocked bfloat16 kernel is not taken here ({how or 'not measured'})")
    return _timed("blocked bfloat16", "fused kernel", f"measured faster for {'; '.join(taken)}", (blocked, fused),
                  rounds, calls)


def check_decode_route(rounds: int, calls: int, new_tokens: int) -> dict[str, Any]:
    """Batch-1 greedy decoding with the few-row route (as measured here) against plain ``F.linear``."""
    decode = _decoding(new_tokens)
    routed, plain = with_setting(set_batched_matvec, True, decode), with_setting(set_batched_matvec, False, decode)
    routed()  # the route's choices are measured (once per machine) before anything is timed
    shapes = [case for case, on in kernel_choice.choices().items() if case.startswith("linear few-row") and on]
    if not shapes:
        return _same("F.linear", "the route measured not clearly faster for any decoding shape here: plain F.linear")
    return _timed("few-row route", "F.linear", f"route taken for {len(shapes)} shape(s)", (routed, plain), rounds,
                  calls)


def check_huge_pages(rounds: int, calls: int, new_tokens: int) -> dict[str, Any]:
    """Batch-1 greedy decoding with the weights moved into huge pages (:mod:`glassformer.runtime.pages`) against
    leaving them in torch's pages, each way on a model of its own (a move is for good)."""
    if not pages.available():
        return _same("torch's pages", "no transparent huge pages here (not Linux, or set to never)")
    if not streams(decode_model()):
        return _same("torch's pages", "the weights fit in the last cache here: nothing is moved")
    moved = with_setting(pages.set_huge_pages, True, _decoding(new_tokens))  # paired's warm-up call moves them
    kept = with_setting(pages.set_huge_pages, False, _decoding(new_tokens))
    return _timed("huge pages", "torch's pages", "the weights exceed the last cache", (moved, kept), rounds, calls)


def _set_threads(n: int) -> int:
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    return previous


def _count(n: int) -> str:
    return f"{n} thread{'s' * (n != 1)}"


def check_threads(rounds: int, calls: int, batch: int) -> dict[str, Any]:
    """glassformer's thread plan for the load now against torch's default count, on the recipe's step."""
    plan = threads.plan()
    default_count = getattr(threads, "_default", None) or torch.get_num_threads()  # torch's, before any plan
    planned = plan.threads or torch.get_num_threads()  # no plan (the user's setting): what torch runs now
    if plan.threads is None or planned == default_count:
        return _same(_count(planned), plan.reason)
    step = _step(recipe_model(), batch)
    return _timed(_count(planned), f"{_count(default_count)} (torch's, {threads.usable_cpus()} CPUs)", plan.reason,
                  (with_setting(_set_threads, planned, step), with_setting(_set_threads, default_count, step)),
                  rounds, calls)


RECIPE_STEPS = 185  # shakespeare_char_fast's max_steps: the run a compile must pay for


def check_compile(rounds: int, calls: int, batch: int, steps: int = RECIPE_STEPS) -> dict[str, Any]:
    """No ``torch.compile`` (the default, ``compile: false``) against compiling, over the recipe's run of ``steps``
    training steps: eager steps against the first compiled call (compiling included) plus compiled steps.
    ``steady_ratio`` is the per-step ratio; ``break_even_steps`` the run length from which compiling pays."""
    eager, compiled = _step(recipe_model(), batch), _step(recipe_model(), batch, compiled=True)
    first = time_call(compiled)
    result = _timed("eager", "torch.compile", "", (eager, compiled), rounds, calls)
    result["steady_ratio"], result["compile_s"] = result["ratio"], first
    result["ratios"] = [steps * d / (first + (steps - 1) * o) for d, o in zip(result["default_rounds"],
                                                                             result["other_rounds"])]
    result["ratio"] = statistics.median(result["ratios"])
    saved = result["default_s"] - result["other_s"]  # per step, by compiling
    result["break_even_steps"] = math.ceil((first - result["other_s"]) / saved) if saved > 0 else None
    pays = f"from {result['break_even_steps']} steps" if saved > 0 else "never: a compiled step is not faster here"
    result["why"] = (f"the recipe's {steps} steps; compiling took {first:.1f} s, a step {result['steady_ratio']:.2f}x "
                     f"the compiled one's time; compiling pays {pays}")
    return result


def check_defaults(quick: bool = False, tolerance: float = TOLERANCE, only: tuple[str, ...] = CHECKS,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time every default in ``only`` (from CHECKS) against its alternative on this CPU (``quick``: smaller
    and fewer, no compile check); ``progress`` gets each check's name when it is done. Returns {"machine",
    "tolerance", "quick", "checks": {name: {"default", "other", "why", "ratio", "timed", "default_s",
    "other_s", "ratios", "loses"}}, "losers": [names], "ok": bool}."""
    check_number("tolerance", tolerance, 0.0)
    unknown = [name for name in only if name not in CHECKS]
    if unknown:
        raise GlassformerError(f"unknown default check(s) {unknown}; available: {list(CHECKS)}")
    rounds, calls, batch = (5, 1, 8) if quick else (9, 3, 32)
    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "newton_schulz": lambda: check_newton_schulz(rounds, calls),
        "precision": lambda: check_precision(rounds, 1, batch),
        "bf16_attention": lambda: check_bf16_attention(rounds, 1, batch),
        "decode_route": lambda: check_decode_route(rounds, 1, 8 if quick else 64),
        "huge_pages": lambda: check_huge_pages(rounds, 1, 8 if quick else 64),
        "threads": lambda: check_threads(rounds, calls, batch),
        "compile": lambda: check_compile(rounds, calls, batch),
    }
    checks: dict[str, dict[str, Any]] = {}
    for name in only:
        if quick and name == "compile":
            checks[name] = {"default": "eager", "other": "torch.compile", "why": "skipped by --quick (compiling takes "
                            "minutes)", "ratio": None, "timed": False, "loses": False}
        else:
            checks[name] = result = runs[name]()
            result["loses"] = result["ratio"] > 1 + tolerance
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
            ratio = f"{check['ratio']:.2f} ({min(check['ratios']):.2f}-{max(check['ratios']):.2f})"
            verdict = "**loses**" if check["loses"] else "ok"
        lines.append(f"| {name} | {check['default']} | {check['other']} | {ratio} | {verdict} | {check['why']} |")
    limit = f"more than {results['tolerance']:.0%} slower than its alternative"
    losers = results["losers"]
    return "\n".join([*lines, "", f"defaults {limit}: {', '.join(losers)}" if losers else f"no default is {limit}"])

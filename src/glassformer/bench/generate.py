"""Generation speed: greedy decoding with a KV cache, glassformer against Hugging Face ``generate``.

Each case is (batch, prompt length, new tokens); both sides produce exactly that many tokens (no
end-of-sequence token is set, so nobody stops early). Time per call includes the prompt's forward.
Every contender runs in every precision asked: float32, or the whole call under ``torch.autocast``
(float32 weights), all in the same paired rounds.

The bound: a decoding step reads every weight once, so no step is faster than weight bytes /
memory bandwidth. :func:`memory_bandwidth` measures the bandwidth with a large tensor copy (bytes read
+ written per second, as STREAM's copy counts them), and each case reports its tokens/s as a
fraction of ``batch / (weight bytes / bandwidth)``: the distance to the limit.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from ..generation import generate
from ..runtime.linear import set_batched_matvec
from .setups import Size, glass_model, hf_model, in_precision
from .timing import paired, paired_ratio, sync

# (batch, prompt tokens, new tokens)
CASES = ((1, 1, 256), (1, 200, 56), (8, 1, 256), (8, 200, 56))


def generation_size(size: Size) -> Size:
    """``size`` with room for the longest case (a 1-token prompt + 256 new tokens)."""
    longest = max(prompt + new for _, prompt, new in CASES)
    return replace(size, block=max(size.block, 2 ** (longest - 1).bit_length()))


def memory_bandwidth(device: torch.device | str = "cpu", megabytes: int = 128, repeats: int = 5) -> float:
    """Bytes per second a large tensor copy moves (read + written), the median of ``repeats`` copies of
    ``megabytes`` (far larger than any cache, so it measures memory, not cache)."""
    source = torch.ones(megabytes * 2**20 // 4, device=device)  # written once: real pages, not the zero page
    target = torch.zeros_like(source)
    seconds = []
    for _ in range(repeats + 1):
        sync(device)
        start = time.perf_counter()
        target.copy_(source)
        sync(device)
        seconds.append(time.perf_counter() - start)
    return 2 * source.numel() * source.element_size() / statistics.median(seconds[1:])


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the parameters a decoding step reads (each tensor once: a tied matrix counts once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def without_batched_matvec(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run with :func:`glassformer.runtime.linear.set_batched_matvec` off (plain ``F.linear``)."""

    def run() -> Any:
        previous = set_batched_matvec(False)
        try:
            return fn()
        finally:
            set_batched_matvec(previous)

    return run


def bench_generate(size: Size, *, cases: tuple[tuple[int, int, int], ...] = CASES, rounds: int = 3,
                   calls: int = 1, hf: bool = True, plain: bool = True, precisions: tuple[str, ...] = ("float32",),
                   device: torch.device | str = "cpu") -> dict[str, Any]:
    """Greedy generation tokens/s (new tokens only) per case and precision, glassformer vs Hugging Face,
    paired.

    With ``plain`` a third contender, "glassformer-flinear", runs glassformer with the few-row
    route of :mod:`glassformer.runtime.linear` turned off, so the table shows what that route buys.
    Returns a dict with the model size used, the measured ``bandwidth_gb_s`` (:func:`memory_bandwidth`)
    and ``weight_mb`` (float32 weights), and per case "B{batch}-P{prompt}-N{new}" and precision:
    tokens_per_s per contender, ``bound_tokens_per_s`` (batch x bandwidth / weight bytes) and
    ``of_bound`` per contender (tokens_per_s / bound), ratio (HF seconds / glassformer seconds),
    route_gain (glassformer-flinear seconds / glassformer seconds) and seconds per round.
    """
    size = generation_size(size)
    glass = glass_model(size, device).eval()
    reference = hf_model(size, device).eval() if hf else None
    g = torch.Generator().manual_seed(0)
    bandwidth, weights = memory_bandwidth(device), weight_bytes(glass)
    results: dict[str, Any] = {"size": size.__dict__, "bandwidth_gb_s": bandwidth / 1e9, "weight_mb": weights / 1e6,
                               "cases": {}}
    for batch, prompt, new in cases:
        ids = torch.randint(0, size.vocab_size, (batch, prompt), generator=g).to(device)
        contenders = {"glassformer": lambda ids=ids, new=new: generate(glass, ids, new)}
        if plain:
            contenders["glassformer-flinear"] = without_batched_matvec(contenders["glassformer"])
        if reference is not None:
            contenders["hf"] = lambda ids=ids, new=new: hf_generate(reference, ids, new)
        timed = paired({f"{name} {p}": in_precision(fn, p, device) for p in precisions
                        for name, fn in contenders.items()}, rounds=rounds, calls=calls, device=device)
        results["cases"][f"B{batch}-P{prompt}-N{new}"] = by_precision = {}
        for p in precisions:
            timings = {name: timed[f"{name} {p}"] for name in contenders}
            rates = {n: batch * new / t.median for n, t in timings.items()}
            bound = batch * bandwidth / weights  # every weight read once per step, for all rows
            case: dict[str, Any] = {
                "tokens_per_s": rates, "bound_tokens_per_s": bound,
                "of_bound": {n: rate / bound for n, rate in rates.items()},
                "seconds": {n: t.rounds for n, t in timings.items()},
            }
            if reference is not None:
                case["ratio"] = paired_ratio(timings["hf"], timings["glassformer"])
            if plain:
                case["route_gain"] = paired_ratio(timings["glassformer-flinear"], timings["glassformer"])
            by_precision[p] = case
    return results


def hf_generate(model: torch.nn.Module, ids: torch.Tensor, new: int) -> torch.Tensor:
    """Hugging Face greedy decoding with its KV cache, exactly ``new`` tokens, called as its users call it
    (``generate`` runs under its own ``torch.no_grad``)."""
    return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                          do_sample=False, use_cache=True, pad_token_id=0)


def bench_decode_compile(size: Size, *, batch: int = 1, prompt: int = 1, new: int = 256, rounds: int = 3,
                         device: torch.device | str = "cpu", precision: str = "float32") -> dict[str, Any]:
    """The compile path for decoding: ``torch.compile`` of the model's step, first call and gain.

    The compiled function is ``hidden_states`` (what each decoding step runs), with dynamic shapes so
    the growing cache does not recompile every step; both sides decode in ``precision``. Returns
    first_call_s (compiling included), tokens_per_s eager and compiled, and gain (eager seconds /
    compiled seconds, paired).
    """
    size = generation_size(size)
    eager, compiled = glass_model(size, device).eval(), glass_model(size, device).eval()
    compiled.hidden_states = torch.compile(compiled.hidden_states, dynamic=True)
    ids = torch.randint(0, size.vocab_size, (batch, prompt), generator=torch.Generator().manual_seed(0)).to(device)
    runs = {"eager": in_precision(lambda: generate(eager, ids, new), precision, device),
            "compiled": in_precision(lambda: generate(compiled, ids, new), precision, device)}
    start = time.perf_counter()
    runs["compiled"]()
    sync(device)
    first_call = time.perf_counter() - start
    timings = paired(runs, rounds=rounds, calls=1, device=device)
    return {
        "size": size.name, "precision": precision, "case": f"B{batch}-P{prompt}-N{new}", "first_call_s": first_call,
        "tokens_per_s": {n: batch * new / t.median for n, t in timings.items()},
        "gain": paired_ratio(timings["eager"], timings["compiled"]),
        "seconds": {n: t.rounds for n, t in timings.items()},
    }

"""Generation speed: greedy decoding with a KV cache, glassformer against Hugging Face ``generate``, per
(batch, prompt, new tokens) case, also as a fraction of the bound batch x memory bandwidth / weight bytes
(a decoding step reads every weight once)."""

import statistics
from dataclasses import replace
from typing import Any

import torch

from ..generation import generate
from ..runtime import pages
from ..runtime.linear import set_batched_matvec
from .setups import Size, glass_model, hf_model, in_precision
from .timing import compile_gain, paired, paired_ratio, time_call, with_setting

CASES = ((1, 1, 256), (1, 200, 56), (8, 1, 256), (8, 200, 56))  # (batch, prompt tokens, new tokens)


def generation_size(size: Size) -> Size:
    """``size`` with room for the longest case (a 1-token prompt + 256 new tokens)."""
    longest = max(prompt + new for _, prompt, new in CASES)
    return replace(size, block=max(size.block, 2 ** (longest - 1).bit_length()))


def memory_bandwidth(device: torch.device | str = "cpu", megabytes: int = 128, repeats: int = 5) -> float:
    """Bytes per second a tensor copy of ``megabytes`` (far larger than any cache) moves, read + written as
    STREAM's copy counts them: the median of ``repeats`` copies after one warm-up. On a CPU in huge pages where
    decoding moves the weights there (:mod:`glassformer.runtime.pages`), as they are then read."""
    n = megabytes * 2**20 // 4
    if torch.device(device).type == "cpu" and pages.active():
        source, target = pages.empty(n).fill_(1.0), pages.empty(n).zero_()
    else:
        source = torch.ones(n, device=device)  # written once: real pages, not the zero page
        target = torch.zeros_like(source)
    seconds = [time_call(lambda: target.copy_(source), device) for _ in range(repeats + 1)]
    return 2 * source.numel() * source.element_size() / statistics.median(seconds[1:])


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the parameters a decoding step reads (each tensor once: a tied matrix counts once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def bench_generate(size: Size, *, cases: tuple[tuple[int, int, int], ...] = CASES, rounds: int = 3,
                   calls: int = 1, hf: bool = True, plain: bool = True, precisions: tuple[str, ...] = ("float32",),
                   device: torch.device | str = "cpu") -> dict[str, Any]:
    """Greedy generation tokens/s (new tokens) per case and precision, glassformer vs Hugging Face, paired;
    ``plain`` adds "glassformer-flinear" (the few-row route off). Returns size, bandwidth_gb_s, weight_mb and
    per case "B{batch}-P{prompt}-N{new}" and precision: tokens_per_s, bound_tokens_per_s, of_bound, ratio
    (HF / glassformer seconds), route_gain (flinear / glassformer seconds), seconds."""
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
            contenders["glassformer-flinear"] = with_setting(set_batched_matvec, False, contenders["glassformer"])
        if reference is not None:
            contenders["hf"] = lambda ids=ids, new=new: hf_generate(reference, ids, new)
        timed = paired({f"{name} {p}": in_precision(fn, p, device) for p in precisions
                        for name, fn in contenders.items()}, rounds=rounds, calls=calls, device=device)
        results["cases"][f"B{batch}-P{prompt}-N{new}"] = by_precision = {}
        for p in precisions:
            timings = {name: timed[f"{name} {p}"] for name in contenders}
            rates = {n: batch * new / t.median for n, t in timings.items()}
            bound = batch * bandwidth / weights  # every weight read once per step, for all rows
            by_precision[p] = case = {"tokens_per_s": rates, "bound_tokens_per_s": bound,
                                      "of_bound": {n: rate / bound for n, rate in rates.items()},
                                      "seconds": {n: t.rounds for n, t in timings.items()}}
            if reference is not None:
                case["ratio"] = paired_ratio(timings["hf"], timings["glassformer"])
            if plain:
                case["route_gain"] = paired_ratio(timings["glassformer-flinear"], timings["glassformer"])
    return results


def hf_generate(model: torch.nn.Module, ids: torch.Tensor, new: int) -> torch.Tensor:
    """Hugging Face greedy decoding with its KV cache, exactly ``new`` tokens, as its users call it."""
    return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                          do_sample=False, use_cache=True, pad_token_id=0)


def bench_decode_compile(size: Size, *, batch: int = 1, prompt: int = 1, new: int = 256, rounds: int = 3,
                         device: torch.device | str = "cpu", precision: str = "float32") -> dict[str, Any]:
    """``generate(..., compile=True)`` (each one-token step through the model's forward compiled on a static
    cache) against the eager steps, one model, both in ``precision``: first_call_s (compiling included),
    tokens_per_s eager and compiled, and gain (eager / compiled seconds, paired)."""
    size = generation_size(size)
    model = glass_model(size, device).eval()
    ids = torch.randint(0, size.vocab_size, (batch, prompt), generator=torch.Generator().manual_seed(0)).to(device)
    runs = {"eager": in_precision(lambda: generate(model, ids, new), precision, device),
            "compiled": in_precision(lambda: generate(model, ids, new, compile=True), precision, device)}
    return compile_gain(runs, batch * new, rounds=rounds, calls=1, device=device, size=size.name, precision=precision,
                        case=f"B{batch}-P{prompt}-N{new}")

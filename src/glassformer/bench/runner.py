"""The benchmark suite behind ``glassformer bench``: run the parts, print a table, keep the JSON."""

from __future__ import annotations

import datetime
import importlib.util
import os
import platform
from collections.abc import Callable
from typing import Any

import torch

from ..errors import GlassformerError, check_int
from ..nn.kernel_choice import SPEED_FLAGS, choices, cpu_features, cpu_name
from .generate import CASES, bench_decode_compile, bench_generate
from .scaling import bench_scaling
from .setups import SIZES
from .train import bench_train, bench_train_compile
from .transparency import bench_transparency

PARTS = ("train", "gen", "attn", "compile", "scaling")
DEFAULT_PARTS = PARTS[:4]  # "scaling" only when asked for
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def machine() -> dict[str, Any]:
    """Where the numbers come from: CPU/GPU, threads, library versions and the load right now."""
    info = {"cpu": cpu_name(), "cpu_features": cpu_features(), "kernel_choices": choices(),
            "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if hasattr(os, "getloadavg"):
        info["load_1min"] = os.getloadavg()[0]
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    try:
        import transformers
        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    return info


def run_suite(parts: tuple[str, ...] = DEFAULT_PARTS, sizes: tuple[str, ...] = tuple(SIZES), *, quick: bool = False,
              rounds: int | None = None, device: str = "cpu", dtype: str = "float32",
              hf: bool = True, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the chosen parts of the suite; return everything as a JSON-ready dict.

    Args:
        parts: any of "train" (throughput, memory, MFU vs Hugging Face), "gen" (greedy generation vs
            Hugging Face), "attn" (return_attn=True vs fused), "compile" (torch.compile's first call
            and steady-state gain, training and decoding), "scaling" (training tokens/s as context,
            batch and width grow; glassformer only).
        sizes: names in ``SIZES`` ("small", "baby"); generation and compile use the last one.
        quick: fewer rounds, batch-1 generation only: a smoke run of a minute or two.
        rounds: override the number of paired rounds of every part.
        device, dtype: e.g. "cuda" and "bfloat16" on a GPU.
        hf: include the Hugging Face contenders (needs ``transformers``).
        progress: called with a part's name when it is done (the CLI prints it).
    Returns:
        {"machine": ..., "settings": ..., "train": {size: ...}, "gen": ..., "attn": {size: ...}, "compile": ...}
        with only the parts asked for.
    """
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise GlassformerError(f"unknown bench part(s) {unknown}; expected some of {PARTS}")
    bad_sizes = sorted(set(sizes) - set(SIZES))
    if bad_sizes or not sizes:
        raise GlassformerError(f"unknown size(s) {bad_sizes or sizes}; expected some of {tuple(SIZES)}")
    if dtype not in DTYPES:
        raise GlassformerError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    check_int("rounds", rounds, 1, allow_none=True)
    if hf and importlib.util.find_spec("transformers") is None:
        raise GlassformerError("the Hugging Face contenders need transformers (pip install transformers), "
                               "or pass hf=False (--no_hf)")
    torch_dtype = DTYPES[dtype]
    n = rounds or (3 if quick else 5)
    calls = 1 if quick else 2
    matmul_n = 4096 if torch.device(device).type == "cuda" else 2048
    results: dict[str, Any] = {"machine": machine(), "settings": {
        "parts": list(parts), "sizes": list(sizes), "quick": quick, "rounds": n, "device": device, "dtype": dtype}}
    last = SIZES[sizes[-1]]
    if "train" in parts:
        contenders = ("glassformer", "glassformer-gelu", "hf") if hf else ("glassformer", "glassformer-gelu")
        results["train"] = {s: bench_train(SIZES[s], rounds=n, calls=calls, contenders=contenders, matmul_n=matmul_n,
                                           device=device, dtype=torch_dtype) for s in sizes}
        _done(progress, "train")
    if "gen" in parts:
        cases = tuple(c for c in CASES if c[0] == 1) if quick else CASES
        # the few-row route exists on the CPU only; elsewhere there is nothing to compare it with
        results["gen"] = bench_generate(last, cases=cases, rounds=max(2, n - 2), hf=hf, device=device,
                                        dtype=torch_dtype, plain=torch.device(device).type == "cpu")
        _done(progress, "gen")
    if "attn" in parts:
        results["attn"] = {s: bench_transparency(SIZES[s], rounds=n, calls=calls, device=device, dtype=torch_dtype)
                           for s in sizes}
        _done(progress, "attn")
    if "compile" in parts:
        results["compile"] = {
            "train": bench_train_compile(SIZES[sizes[0]], rounds=n, calls=calls, device=device, dtype=torch_dtype),
            "decode": bench_decode_compile(last, rounds=max(2, n - 2), device=device, dtype=torch_dtype)}
        _done(progress, "compile")
    if "scaling" in parts:
        results["scaling"] = bench_scaling(SIZES[sizes[0]], rounds=n, device=device, dtype=torch_dtype)
        _done(progress, "scaling")
    results["machine"]["load_1min_after"] = machine().get("load_1min")
    return results


def _done(progress: Callable[[str], None] | None, part: str) -> None:
    """Tell ``progress`` (when given) that ``part`` has finished."""
    if progress is not None:
        progress(part)


def _row(cells: list[str]) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(cells) + " |"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a Markdown table (header, rule, rows) and a blank line."""
    return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows), ""]


def format_table(results: dict[str, Any]) -> str:
    """The results as Markdown tables (what ``glassformer bench`` prints and docs/benchmarks.md shows)."""
    m, s = results["machine"], results["settings"]
    lines = [f"machine: {m['cpu']}, {m['cores']} cores, {m['torch_threads']} torch threads, torch {m['torch']}, "
             f"transformers {m.get('transformers')}, {s['device']} {s['dtype']}; load {m.get('load_1min', 0):.1f} "
             f"before, {m.get('load_1min_after') or 0:.1f} after; {s['rounds']} paired rounds",
             f"cpu features: {', '.join(m.get('cpu_features') or []) or 'none of ' + ', '.join(SPEED_FLAGS)}; "
             f"few-row route chosen for {sum(m.get('kernel_choices', {}).values())} of "
             f"{len(m.get('kernel_choices', {}))} measured shapes (glassformer.nn.kernel_choice)", ""]
    if "train" in results:
        lines.append("training (forward + backward + clip + AdamW), medians; ratio = paired speed-up over hf")
        rows = []
        for size, r in results["train"].items():
            for name, tps in r["tokens_per_s"].items():
                ratio = r.get("ratio_vs_hf", {}).get(name)
                rows.append([size, name, f"{tps:,.0f}", "-" if ratio is None else f"{ratio:.2f}x",
                             f"{r['mfu'][name]:.0%}", f"{r['peak_mb'][name]:.0f}", f"{r['spread'][name]:.0%}"])
            rows.append([size, "matmul peak", f"{r['peak_flops'] / 1e9:.0f} GFLOP/s", "", "", "", ""])
        lines += _table(["size", "model", "tokens/s", "vs hf", "MFU", "peak MB", "spread"], rows)
    if "gen" in results:
        lines.append(f"greedy generation with KV cache ({results['gen']['size']['name']}, "
                     f"max_len {results['gen']['size']['block']}), new tokens/s, medians")
        rows = [[case, f"{r['tokens_per_s']['glassformer']:,.0f}", f"{r['ratio']:.2f}x" if "ratio" in r else "-",
                 f"{r['tokens_per_s'].get('glassformer-flinear', 0):,.0f}",
                 f"{r['route_gain']:.2f}x" if "route_gain" in r else "-", f"{r['tokens_per_s'].get('hf', 0):,.0f}"]
                for case, r in results["gen"]["cases"].items()]
        lines += _table(["batch-prompt-new", "glassformer", "vs hf", "F.linear only", "few-row route gain", "hf"],
                        rows)
    if "attn" in results:
        lines.append("cost of transparency: inference forward, return_attn=True vs fused; time ratios to fused of "
                     "the last layer's weights alone (interpret.attention_weights) and of caching every hook point")
        rows = [[size, f"{r['tokens_per_s']['fused']:,.0f}", f"{r['tokens_per_s']['return_attn']:,.0f}",
                 f"{r['ratio']:.2f}x", *(f"{r['ratios'][n]:.2f}x" if n in r.get("ratios", {}) else "-"
                                         for n in ("one_layer_weights", "cache_everything"))]
                for size, r in results["attn"].items()]
        lines += _table(["size", "fused tokens/s", "return_attn tokens/s", "time ratio", "one layer's weights",
                         "cache everything"], rows)
    if "compile" in results:
        lines.append("torch.compile: first call (compiling included) and steady-state gain, paired")
        rows = [[f"{part} ({r['size']})", f"{r['first_call_s']:.1f} s", f"{r['tokens_per_s']['eager']:,.0f}",
                 f"{r['tokens_per_s']['compiled']:,.0f}", f"{r['gain']:.2f}x"]
                for part, r in results["compile"].items()]
        lines += _table(["path", "first call", "eager tokens/s", "compiled tokens/s", "gain"], rows)
    if "scaling" in results:
        lines.append("training tokens/s as one thing grows (glassformer; context series keeps 2048 tokens per step)")
        rows = [[series, r["field"], ", ".join(f"{v}: {tps:,.0f}" for v, tps in r["tokens_per_s"].items())]
                for series, r in results["scaling"].items()]
        lines += _table(["series", "field", "value: tokens/s"], rows)
    return "\n".join(lines)

"""The benchmark suite behind ``glassformer bench``: run the parts, print a table, keep the JSON."""

import datetime
import importlib.util
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..errors import GlassformerError
from ..io.checks import check_int
from ..runtime.kernel_choice import SPEED_FLAGS, choices, cpu_features, cpu_name
from .generate import CASES, bench_decode_compile, bench_generate
from .nanogpt import load_nanogpt
from .scaling import bench_scaling
from .setups import SIZES, check_precisions
from .train import bench_train, bench_train_compile, matmul_peaks, mfu_against
from .transparency import bench_transparency

PARTS = ("train", "gen", "attn", "compile", "scaling")
DEFAULT_PARTS = PARTS[:4]  # "scaling" only when asked for
DEFAULT_PRECISIONS = ("auto",)  # float32, and bfloat16 only where the CPU/GPU has bfloat16 instructions
ROUTE_CASE = "linear few-row route"  # the kernel choices the header counts (glassformer.runtime.linear's)


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
              rounds: int | None = None, device: str = "cpu", precisions: tuple[str, ...] | str = DEFAULT_PRECISIONS,
              hf: bool = True, nanogpt: str | Path | None = None,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the chosen parts of PARTS (docs/benchmarks.md) at ``sizes`` (generation and decoding compile: the
    last one) in each of ``precisions`` (compile and scaling: the first); ``quick``: fewer rounds, batch-1
    generation; ``nanogpt``: its model.py, a training contender; ``progress`` gets each part's name when done.
    Returns a JSON-ready {"machine", "settings", and each part}; machine["matmul_peak_flops"] is each
    precision's peak, which every training row's MFU is against."""
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise GlassformerError(f"unknown bench part(s) {unknown}; expected some of {PARTS}")
    bad_sizes = sorted(set(sizes) - set(SIZES))
    if bad_sizes or not sizes:
        raise GlassformerError(f"unknown size(s) {bad_sizes or sizes}; expected some of {tuple(SIZES)}")
    precisions = check_precisions(precisions, device=device)
    check_int("rounds", rounds, 1, allow_none=True)
    if hf and importlib.util.find_spec("transformers") is None:
        raise GlassformerError("the Hugging Face contenders need transformers (pip install transformers), "
                               "or pass hf=False (--no_hf)")
    nanogpt_module = None if nanogpt is None else load_nanogpt(nanogpt)
    n = rounds or (3 if quick else 5)
    calls = 1 if quick else 2
    matmul_n = 4096 if torch.device(device).type == "cuda" else 2048
    results: dict[str, Any] = {"machine": {**machine(), "matmul_n": matmul_n}, "settings": {
        "parts": list(parts), "sizes": list(sizes), "quick": quick, "rounds": n, "device": device,
        "precisions": list(precisions), "nanogpt": None if nanogpt is None else str(nanogpt)}}
    done = progress or (lambda part: None)
    last, first = SIZES[sizes[-1]], SIZES[sizes[0]]
    if "train" in parts:
        contenders = ("glassformer", "glassformer-gelu", *(("nanogpt",) if nanogpt_module else ()),
                      *(("hf",) if hf else ()))
        results["train"] = {s: bench_train(SIZES[s], rounds=n, calls=calls, contenders=contenders,
                                           precisions=precisions, matmul_n=matmul_n, device=device,
                                           nanogpt=nanogpt_module) for s in sizes}
        # the machine's peak is the best matmul round of any size; every row's MFU is against it
        peaks = {p: max(r[p]["matmul_flops"] for r in results["train"].values()) for p in precisions}
        for by_precision in results["train"].values():
            for p, r in by_precision.items():
                mfu_against(r, peaks[p])
        done("train")
    else:
        peaks = matmul_peaks(precisions, n=matmul_n, rounds=n, calls=calls, device=device)
    results["machine"]["matmul_peak_flops"] = peaks
    cases = tuple(c for c in CASES if c[0] == 1) if quick else CASES
    later = {  # the parts after training, in PARTS' order; the few-row route ("plain") exists on the CPU only
        "gen": lambda: bench_generate(last, cases=cases, rounds=max(2, n - 2), hf=hf, device=device,
                                      precisions=precisions, plain=torch.device(device).type == "cpu"),
        "attn": lambda: {s: bench_transparency(SIZES[s], rounds=n, calls=calls, device=device,
                                               precisions=precisions) for s in sizes},
        "compile": lambda: {
            "train": bench_train_compile(first, rounds=n, calls=calls, device=device, precision=precisions[0]),
            "decode": bench_decode_compile(last, rounds=max(2, n - 2), device=device, precision=precisions[0])},
        "scaling": lambda: bench_scaling(first, rounds=n, device=device, precision=precisions[0])}
    for part in (p for p in PARTS if p in later and p in parts):
        results[part] = later[part]()
        done(part)
    results["machine"]["load_1min_after"] = machine().get("load_1min")
    return results


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a Markdown table (header, rule, rows) and a blank line."""
    return ["| " + " | ".join(cells) + " |" for cells in (header, ["---"] * len(header), *rows)] + [""]


def _rate(result: dict[str, Any], name: str) -> str:
    """``name``'s tokens/s in ``result`` as a table cell; "-" for a contender that did not run."""
    rate = result["tokens_per_s"].get(name)
    return "-" if rate is None else f"{rate:,.0f}"


def _times(ratio: float | None) -> str:
    """A ratio as a table cell (``1.25x``); "-" when there is none."""
    return "-" if ratio is None else f"{ratio:.2f}x"


def _header(results: dict[str, Any]) -> list[str]:
    """The lines naming the machine: CPU, threads, versions, load, CPU features, matmul peaks, precisions."""
    m, s = results["machine"], results["settings"]
    routes = {case: special for case, special in (m.get("kernel_choices") or {}).items()
              if case.startswith(ROUTE_CASE)}
    peaks = ", ".join(f"{p} {flops / 1e9:,.0f} GFLOP/s" for p, flops in m.get("matmul_peak_flops", {}).items())
    n = m.get("matmul_n", 2048)
    return [f"machine: {m['cpu']}, {m['cores']} cores, {m['torch_threads']} torch threads, torch {m['torch']}, "
            f"transformers {m.get('transformers')}, device {s['device']}; load {m.get('load_1min', 0):.1f} "
            f"before, {m.get('load_1min_after') or 0:.1f} after; {s['rounds']} paired rounds",
            f"cpu features: {', '.join(m.get('cpu_features') or []) or 'none of ' + ', '.join(SPEED_FLAGS)}; "
            f"few-row route chosen for {sum(routes.values())} of {len(routes)} measured shapes "
            f"(glassformer.runtime.kernel_choice)",
            f"matmul peak ({n}x{n} torch.mm, a quarter of that side for an emulated 16-bit type; best paired "
            f"round): {peaks}",
            f"precisions: {', '.join(s['precisions'])} (float32 weights and AdamW; 16-bit rows run the forward "
            f"pass under torch.autocast; MFU is against the matmul peak of the row's precision)", ""]


def format_table(results: dict[str, Any]) -> str:
    """The results as Markdown tables (what ``glassformer bench`` prints and docs/benchmarks.md shows):
    a header naming the machine, then one table per part, every row labelled with its precision."""
    lines = _header(results)
    if "train" in results:
        with_nanogpt = any("ratio_vs_nanogpt" in r for by_p in results["train"].values() for r in by_p.values())
        anchors = ["nanogpt", "hf"] if with_nanogpt else ["hf"]  # "vs hf" always (all "-" under --no_hf)
        lines.append("training (forward + backward + clip + AdamW), medians; vs X = paired speed-up over X")
        rows = [[size, precision, name, f"{tps:,.0f}", *(_times(r.get(f"ratio_vs_{a}", {}).get(name)) for a in anchors),
                 f"{r['mfu'][name]:.0%}", f"{r['peak_mb'][name]:.0f}", f"{r['spread'][name]:.0%}"]
                for size, by_precision in results["train"].items() for precision, r in by_precision.items()
                for name, tps in r["tokens_per_s"].items()]
        lines += _table(["size", "precision", "model", "tokens/s", *(f"vs {a}" for a in anchors), "MFU", "peak MB",
                         "spread"], rows)
    if "gen" in results:
        gen = results["gen"]
        lines.append(f"greedy generation with KV cache ({gen['size']['name']}, max_len {gen['size']['block']}), "
                     f"new tokens/s, medians; bound = batch x {gen['bandwidth_gb_s']:.1f} GB/s (copy) / "
                     f"{gen['weight_mb']:.1f} MB of weights")
        rows = [[case, precision, _rate(r, "glassformer"), _times(r.get("ratio")),
                 _rate(r, "glassformer-flinear"), _times(r.get("route_gain")),
                 _rate(r, "hf"), f"{r['bound_tokens_per_s']:,.0f}", f"{r['of_bound']['glassformer']:.0%}"]
                for case, by_precision in gen["cases"].items() for precision, r in by_precision.items()]
        lines += _table(["batch-prompt-new", "precision", "glassformer", "vs hf", "F.linear only",
                         "few-row route gain", "hf", "bound", "of bound"], rows)
    if "attn" in results:
        lines.append("cost of transparency: inference forward, return_attn=True vs fused; time ratios to fused of "
                     "the last layer's weights alone (interpret.attention_weights) and of caching every hook point")
        rows = [[size, precision, f"{r['tokens_per_s']['fused']:,.0f}", f"{r['tokens_per_s']['return_attn']:,.0f}",
                 _times(r["ratio"]), *(_times(r.get("ratios", {}).get(n))
                                       for n in ("one_layer_weights", "cache_everything"))]
                for size, by_precision in results["attn"].items() for precision, r in by_precision.items()]
        lines += _table(["size", "precision", "fused tokens/s", "return_attn tokens/s", "time ratio",
                         "one layer's weights", "cache everything"], rows)
    if "compile" in results:
        lines.append("torch.compile: first call (compiling included) and steady-state gain, paired")
        rows = [[f"{part} ({r['size']}, {r['precision']})", f"{r['first_call_s']:.1f} s",
                 f"{r['tokens_per_s']['eager']:,.0f}", f"{r['tokens_per_s']['compiled']:,.0f}", f"{r['gain']:.2f}x"]
                for part, r in results["compile"].items()]
        lines += _table(["path", "first call", "eager tokens/s", "compiled tokens/s", "gain"], rows)
    if "scaling" in results:
        lines.append(f"training tokens/s as one thing grows (glassformer, {results['settings']['precisions'][0]}; "
                     "context series keeps 2048 tokens per step)")
        rows = [[series, r["field"], ", ".join(f"{v}: {tps:,.0f}" for v, tps in r["tokens_per_s"].items())]
                for series, r in results["scaling"].items()]
        lines += _table(["series", "field", "value: tokens/s"], rows)
    return "\n".join(lines)

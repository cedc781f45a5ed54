"""Training throughput: forward + backward + gradient clipping + AdamW step, in tokens/s.

All contenders run exactly the same step on the same batch; only the model differs. Each precision
is mixed precision as people train: the forward pass and the loss under ``torch.autocast``, backward
and the AdamW step outside it, on float32 weights and optimiser state (float16 adds a ``GradScaler``,
as nanoGPT's train.py does). Reports tokens/s, the paired speed ratios, peak memory and model FLOP
utilisation against a square matmul's measured peak in the same precision.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import GlassformerError
from ..training.optim import make_optimizer
from .nanogpt import nanogpt_loss, nanogpt_model
from .setups import PRECISIONS, Size, autocast, glass_model, hf_model, train_flops_per_token
from .timing import Timing, paired, paired_ratio, peak_memory, sync, tensor_bytes

# The benchmark's AdamW (nanoGPT's settings), built by the library's own make_optimizer: the fused kernel,
# decay on weight matrices only. Every contender, Hugging Face's and nanoGPT's included, gets the same.
ADAMW = {"lr": 1e-3, "weight_decay": 0.1, "betas": (0.9, 0.95), "eps": 1e-8, "fused": True}

Loss = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def logits_loss(model: nn.Module, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``model(ids)``'s (B, T, V) logits against ``targets`` (B, T)."""
    out = model(ids)
    logits = out if isinstance(out, torch.Tensor) else out.logits  # Hugging Face returns an output object
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, ids: torch.Tensor, targets: torch.Tensor,
               *, precision: str = "float32", loss_fn: Loss = logits_loss) -> Callable[[], None]:
    """A no-argument closure doing one full training step of ``model`` on ``ids`` -> ``targets`` (both
    (B, T) token ids): forward and ``loss_fn`` under autocast to ``precision`` (none for float32),
    backward, clip the gradient norm to 1, AdamW step. float16 scales the loss (``GradScaler``)."""
    device = ids.device
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "float16")

    def step() -> None:
        with autocast(precision, device):
            loss = loss_fn(model, ids, targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    return step


def _non_embedding_params(model: nn.Module) -> int:
    """Parameters that take part in matmuls: all but the position table (nanoGPT's count)."""
    total = sum(p.numel() for p in model.parameters())
    positions = [m for name, m in model.named_modules() if name.endswith(("embeddings.pos", "wpe"))]
    return total - sum(p.numel() for m in positions for p in m.parameters())


CONTENDERS = ("glassformer", "glassformer-gelu", "nanogpt", "hf")


def build_contender(name: str, size: Size, device: torch.device | str = "cpu",
                    nanogpt: ModuleType | None = None) -> nn.Module:
    """The float32 model called ``name``: "glassformer" computes GPT-2's function (tanh GELU) like
    "hf"; "glassformer-gelu" differs only by the exact GELU (the library's default and nanoGPT's);
    "nanogpt" is ``nanogpt.GPT`` (the module from :func:`~glassformer.bench.nanogpt.load_nanogpt`)."""
    if name == "glassformer":
        return glass_model(size, device)
    if name == "glassformer-gelu":
        return glass_model(size, device, activation="gelu")
    if name == "hf":
        return hf_model(size, device)
    if name == "nanogpt" and nanogpt is not None:
        return nanogpt_model(size, nanogpt, device)
    if name == "nanogpt":
        raise GlassformerError("the nanogpt contender needs nanoGPT's model.py (--nanogpt PATH)")
    raise GlassformerError(f"unknown contender {name!r}; expected one of {CONTENDERS}")


def matmul_round(n: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> Callable[[], None]:
    """A closure multiplying two n x n matrices of ``dtype``, timed in the same rounds as the training
    steps; the best round's FLOP/s stands for the machine's peak in that dtype (a peak is a best case;
    the median step is then compared with it)."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    return lambda: torch.mm(a, b)


def peak_matmul_n(n: int, precision: str, device: torch.device | str = "cpu") -> int:
    """The side of the square matmul that stands for ``precision``'s peak: ``n``, or ``n // 4`` (64x fewer
    FLOPs) for a 16-bit precision on a CPU without bfloat16 instructions. There torch emulates it at a
    small fraction of float32's rate, and a full-size product took minutes on an AMD EPYC Zen 3 (the
    peak it stands for is a slow path's anyway)."""
    from ..runtime.precision import bf16_hardware

    emulated = precision != "float32" and torch.device(device).type == "cpu" and not bf16_hardware(device)[0]
    return max(64, n // 4) if emulated else n


def best_flops(matmul: Timing, n: int) -> float:
    """The best round's FLOP/s of an n x n matmul (2 n³ FLOPs a call)."""
    return 2 * n ** 3 / min(matmul.rounds)


def matmul_peaks(precisions: tuple[str, ...], *, n: int = 2048, rounds: int = 5, calls: int = 3,
                 device: torch.device | str = "cpu") -> dict[str, float]:
    """precision -> FLOP/s of the best of ``rounds`` paired rounds of an n x n matmul in that dtype
    (what the bench header shows when no training part ran alongside to time it)."""
    sides = {p: peak_matmul_n(n, p, device) for p in precisions}
    timings = paired({p: matmul_round(sides[p], device, PRECISIONS[p]) for p in precisions},
                     rounds=rounds, calls=calls, device=device)
    return {p: best_flops(t, sides[p]) for p, t in timings.items()}


def mfu_against(result: dict[str, Any], peak_flops: float) -> None:
    """Set ``result``'s peak_flops and each contender's MFU = tokens/s x FLOPs per token / peak_flops."""
    result["peak_flops"] = peak_flops
    result["mfu"] = {n: tps * result["flops_per_token"][n] / peak_flops for n, tps in result["tokens_per_s"].items()}


def bench_train(size: Size, *, rounds: int = 5, calls: int = 3,
                contenders: tuple[str, ...] = ("glassformer", "glassformer-gelu", "hf"),
                precisions: tuple[str, ...] = ("float32",), matmul_n: int = 1024,
                device: torch.device | str = "cpu", nanogpt: ModuleType | None = None) -> dict[str, dict[str, Any]]:
    """Time training steps of each contender in each precision for ``size``, interleaved with square
    matmuls, one per precision, all in the same paired rounds.

    Each contender is one float32 model and one AdamW; its steps in the different precisions take
    turns on it (the weights' values do not change a step's cost).

    Args:
        size: the model size and batch.
        rounds, calls: see :func:`paired`.
        contenders: names from ``CONTENDERS`` ("nanogpt" needs ``nanogpt``); ratios are given against
            "hf" and "nanogpt" when present.
        precisions: keys of ``PRECISIONS``.
        matmul_n: size of the matmul that stands for the machine's peak (2 n³ FLOPs).
        nanogpt: nanoGPT's model module (:func:`~glassformer.bench.nanogpt.load_nanogpt`).
    Returns:
        precision -> a dict: tokens_per_s, spread, peak_mb (weights + gradients + optimiser state + the
        step's activations), flops_per_token and mfu per contender; matmul_flops (the best matmul round
        in these rounds) and peak_flops (what mfu is against: the same, until :func:`mfu_against`);
        ratio_vs_hf and ratio_vs_nanogpt per contender (paired speed-ups); seconds per round.
    """
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, size.vocab_size, (size.batch, size.block), generator=g).to(device)
    targets = torch.randint(0, size.vocab_size, (size.batch, size.block), generator=g).to(device)
    steps, memory, flops = {}, {}, {}
    for name in contenders:
        model = build_contender(name, size, device, nanogpt).train()
        optimizer = make_optimizer(model, **ADAMW)
        loss_fn = nanogpt_loss if name == "nanogpt" else logits_loss
        flops[name] = train_flops_per_token(size, _non_embedding_params(model), size.block)
        for precision in precisions:
            step = steps[name, precision] = train_step(model, optimizer, ids, targets, precision=precision,
                                                       loss_fn=loss_fn)
            step()  # creates the optimiser state, so it is counted below
            held = tensor_bytes(list(model.parameters())) + tensor_bytes(list(optimizer.state.values()))
            memory[name, precision] = (held + peak_memory(step, device)) / 2 ** 20
    sides = {p: peak_matmul_n(matmul_n, p, device) for p in precisions}
    matmuls = {("matmul", p): matmul_round(sides[p], device, PRECISIONS[p]) for p in precisions}
    timed = paired({f"{name} {p}": fn for (name, p), fn in {**steps, **matmuls}.items()},
                   rounds=rounds, calls=calls, device=device)
    tokens = size.batch * size.block
    results: dict[str, dict[str, Any]] = {}
    for p in precisions:
        timings = {name: timed[f"{name} {p}"] for name in contenders}
        peak = best_flops(timed[f"matmul {p}"], sides[p])
        result: dict[str, Any] = {
            "size": size.__dict__, "precision": p, "tokens_per_step": tokens, "flops_per_token": dict(flops),
            "matmul_flops": peak,
            "tokens_per_s": {n: tokens / t.median for n, t in timings.items()},
            "spread": {n: t.spread for n, t in timings.items()},
            "peak_mb": {n: memory[n, p] for n in contenders},
            "seconds": {n: t.rounds for n, t in timings.items()},
        }
        mfu_against(result, peak)
        for anchor in ("hf", "nanogpt"):
            if anchor in timings:
                result[f"ratio_vs_{anchor}"] = {n: paired_ratio(timings[anchor], t) for n, t in timings.items()
                                                if n != anchor}
        results[p] = result
    return results


def bench_train_compile(size: Size, *, rounds: int = 5, calls: int = 3, device: torch.device | str = "cpu",
                        precision: str = "float32") -> dict[str, Any]:
    """The compile path for training: first-call cost of ``torch.compile`` and its steady-state gain.

    Returns first_call_s (compile + one step), eager_step_s, tokens_per_s for eager and compiled,
    and gain (eager seconds / compiled seconds, paired), with the step run in ``precision``.
    """
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, size.vocab_size, (size.batch, size.block), generator=g).to(device)
    targets = torch.randint(0, size.vocab_size, (size.batch, size.block), generator=g).to(device)
    eager, compiled = glass_model(size, device), glass_model(size, device)
    steps = {"eager": train_step(eager, make_optimizer(eager, **ADAMW), ids, targets, precision=precision),
             "compiled": train_step(torch.compile(compiled), make_optimizer(compiled, **ADAMW), ids, targets,
                                    precision=precision)}
    steps["eager"]()
    sync(device)
    start = time.perf_counter()
    steps["eager"]()
    sync(device)
    eager_step = time.perf_counter() - start
    start = time.perf_counter()
    steps["compiled"]()
    sync(device)
    first_call = time.perf_counter() - start
    timings = paired(steps, rounds=rounds, calls=calls, device=device)
    tokens = size.batch * size.block
    return {
        "size": size.name, "precision": precision, "first_call_s": first_call, "eager_step_s": eager_step,
        "tokens_per_s": {n: tokens / t.median for n, t in timings.items()},
        "gain": paired_ratio(timings["eager"], timings["compiled"]),
        "seconds": {n: t.rounds for n, t in timings.items()},
    }

"""Training throughput: forward + backward + gradient clipping + AdamW step, in tokens/s.

Both contenders run exactly the same step on the same batch; only the model differs. Reports
tokens/s, the paired speed ratio, peak memory and model FLOP utilisation against a measured peak.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import GlassformerError
from ..training.optim import make_optimizer
from .setups import Size, glass_model, hf_model, train_flops_per_token
from .timing import paired, paired_ratio, peak_memory, sync, tensor_bytes

# The benchmark's AdamW (nanoGPT's settings), built by the library's own make_optimizer: the fused kernel,
# decay on weight matrices only. Every contender, the Hugging Face one included, gets the same.
ADAMW = {"lr": 1e-3, "weight_decay": 0.1, "betas": (0.9, 0.95), "eps": 1e-8, "fused": True}


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, ids: torch.Tensor,
               targets: torch.Tensor) -> Callable[[], None]:
    """A no-argument closure doing one full training step of ``model`` on ``ids`` -> ``targets`` (both
    (B, T) token ids): forward, cross-entropy, backward, clip the gradient norm to 1, AdamW step."""

    def step() -> None:
        out = model(ids)
        logits = out if isinstance(out, torch.Tensor) else out.logits  # Hugging Face returns an output object
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _non_embedding_params(model: nn.Module) -> int:
    """Parameters that take part in matmuls: all but the position table (nanoGPT's count)."""
    total = sum(p.numel() for p in model.parameters())
    positions = [m for name, m in model.named_modules() if name.endswith(("embeddings.pos", "wpe"))]
    return total - sum(p.numel() for m in positions for p in m.parameters())


CONTENDERS = ("glassformer", "glassformer-gelu", "hf")


def build_contender(name: str, size: Size, device: torch.device | str = "cpu",
                    dtype: torch.dtype = torch.float32) -> nn.Module:
    """"glassformer": GPT-2's math (tanh GELU) like "hf"; "glassformer-gelu": the exact GELU
    (the library's default and nanoGPT's), the only difference."""
    if name == "glassformer":
        return glass_model(size, device, dtype)
    if name == "glassformer-gelu":
        return glass_model(size, device, dtype, activation="gelu")
    if name == "hf":
        return hf_model(size, device, dtype)
    raise GlassformerError(f"unknown contender {name!r}; expected one of {CONTENDERS}")


def matmul_round(n: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> Callable[[], None]:
    """A closure multiplying two n x n matrices, timed in the same rounds as the training steps; the
    best round's FLOP/s stands for the machine's peak (a peak is a best case; the median step is then
    compared with it)."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    return lambda: torch.mm(a, b)


def bench_train(size: Size, *, rounds: int = 5, calls: int = 3, contenders: tuple[str, ...] = CONTENDERS,
                matmul_n: int = 1024, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Time training steps of each contender for ``size``, interleaved with a square matmul.

    Args:
        size: the model size and batch.
        rounds, calls: see :func:`paired`.
        contenders: names from ``CONTENDERS``; ratios are given against "hf" when it is present.
        matmul_n: size of the matmul that stands for the machine's peak (2 n³ FLOPs).
    Returns:
        a dict: tokens_per_s, spread, peak_mb (weights + gradients + optimiser state + the step's
        activations) and mfu per contender; peak_flops (median matmul FLOP/s over the rounds);
        ratio_vs_hf per contender (paired); seconds per round.
    """
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, size.vocab_size, (size.batch, size.block), generator=g).to(device)
    targets = torch.randint(0, size.vocab_size, (size.batch, size.block), generator=g).to(device)
    steps, memory, flops = {}, {}, {}
    for name in contenders:
        model = build_contender(name, size, device, dtype).train()
        optimizer = make_optimizer(model, **ADAMW)
        steps[name] = train_step(model, optimizer, ids, targets)
        steps[name]()  # creates the optimiser state, so it is counted below
        held = tensor_bytes(list(model.parameters())) + tensor_bytes(list(optimizer.state.values()))
        memory[name] = (held + peak_memory(steps[name], device)) / 2 ** 20
        flops[name] = train_flops_per_token(size, _non_embedding_params(model), size.block)
    timings = paired({**steps, "matmul": matmul_round(matmul_n, device, dtype)},
                     rounds=rounds, calls=calls, device=device)
    matmul = timings.pop("matmul")
    peak = [2 * matmul_n ** 3 / s for s in matmul.rounds]
    tokens = size.batch * size.block
    result: dict[str, Any] = {
        "size": size.__dict__, "tokens_per_step": tokens, "flops_per_token": flops,
        "peak_flops": max(peak),
        "tokens_per_s": {n: tokens / t.median for n, t in timings.items()},
        "spread": {n: t.spread for n, t in timings.items()},
        "peak_mb": memory,
        "mfu": {n: tokens * flops[n] / t.median / max(peak) for n, t in timings.items()},
        "seconds": {n: t.rounds for n, t in timings.items()},
    }
    if "hf" in timings:
        result["ratio_vs_hf"] = {n: paired_ratio(timings["hf"], t) for n, t in timings.items() if n != "hf"}
    return result


def bench_train_compile(size: Size, *, rounds: int = 5, calls: int = 3, device: torch.device | str = "cpu",
                        dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The compile path for training: first-call cost of ``torch.compile`` and its steady-state gain.

    Returns first_call_s (compile + one step), eager_step_s, tokens_per_s for eager and compiled,
    and gain (eager seconds / compiled seconds, paired).
    """
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, size.vocab_size, (size.batch, size.block), generator=g).to(device)
    targets = torch.randint(0, size.vocab_size, (size.batch, size.block), generator=g).to(device)
    eager, compiled = glass_model(size, device, dtype), glass_model(size, device, dtype)
    steps = {"eager": train_step(eager, make_optimizer(eager, **ADAMW), ids, targets),
             "compiled": train_step(torch.compile(compiled), make_optimizer(compiled, **ADAMW), ids, targets)}
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
        "size": size.name, "first_call_s": first_call, "eager_step_s": eager_step,
        "tokens_per_s": {n: tokens / t.median for n, t in timings.items()},
        "gain": paired_ratio(timings["eager"], timings["compiled"]),
        "seconds": {n: t.rounds for n, t in timings.items()},
    }

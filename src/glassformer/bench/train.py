"""Training throughput (forward + backward + clipping + AdamW, the same step and batch for every model):
tokens/s, paired speed ratios, peak memory and MFU against a square matmul's peak in the same precision."""

from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..runtime.attention import use_bf16_attention
from ..training.optim import make_optimizer
from .nanogpt import nanogpt_loss, nanogpt_model
from .setups import PRECISIONS, Size, autocast, glass_model, hf_model, seeded_batch, train_flops_per_token
from .timing import compile_gain, paired, paired_ratio, peak_memory, time_call

# nanoGPT's AdamW settings, built by the library's make_optimizer (fused, decay on weight matrices only)
ADAMW = {"lr": 1e-3, "weight_decay": 0.1, "betas": (0.9, 0.95), "eps": 1e-8, "fused": True}
CONTENDERS = ("glassformer", "glassformer-gelu", "nanogpt", "hf")

Loss = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def logits_loss(model: nn.Module, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``model(ids)``'s (B, T, V) logits against ``targets`` (B, T)."""
    out = model(ids)
    logits = out if isinstance(out, torch.Tensor) else out.logits  # Hugging Face returns an output object
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, ids: torch.Tensor, targets: torch.Tensor,
               *, precision: str = "float32", loss_fn: Loss = logits_loss) -> Callable[[], None]:
    """A no-argument closure doing one training step on (B, T) ``ids`` -> ``targets``: forward and loss under
    autocast to ``precision``, backward, clip the gradient norm to 1, optimizer step (float16: GradScaler)."""
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
    positions = [m for name, m in model.named_modules() if name.endswith(("embeddings.pos", "wpe"))]
    return sum(p.numel() for p in model.parameters()) - sum(p.numel() for m in positions for p in m.parameters())


def build_contender(name: str, size: Size, device: torch.device | str = "cpu",
                    nanogpt: ModuleType | None = None) -> nn.Module:
    """The float32 model ``name`` of CONTENDERS: "glassformer" computes GPT-2's function (tanh GELU) like
    "hf"; "glassformer-gelu" uses the exact GELU; "nanogpt" is ``nanogpt.GPT`` (``nanogpt``: from ``load_nanogpt``)."""
    builders = {"glassformer": lambda: glass_model(size, device),
                "glassformer-gelu": lambda: glass_model(size, device, activation="gelu"),
                "hf": lambda: hf_model(size, device), "nanogpt": lambda: nanogpt_model(size, nanogpt, device)}
    return builders[name]()


def _matmuls(precisions: tuple[str, ...], n: int, device: torch.device | str) -> dict[str, tuple[int, Callable]]:
    """precision -> (side, a closure multiplying two side x side matrices of that dtype), whose best round's
    FLOP/s (2 side³ a call) stands for the machine's peak. The side is ``n``, or ``n // 4`` for a 16-bit
    precision that a CPU without bfloat16 instructions emulates (full size took minutes on an AMD EPYC Zen 3)."""
    from ..runtime.precision import bf16_hardware

    found = {}
    for p in precisions:
        emulated = p != "float32" and torch.device(device).type == "cpu" and not bf16_hardware(device)[0]
        side = max(64, n // 4) if emulated else n
        a, b = (torch.randn(side, side, device=device, dtype=PRECISIONS[p]) for _ in range(2))
        found[p] = side, partial(torch.mm, a, b)
    return found


def matmul_peaks(precisions: tuple[str, ...], *, n: int = 2048, rounds: int = 5, calls: int = 3,
                 device: torch.device | str = "cpu") -> dict[str, float]:
    """precision -> FLOP/s of the best of ``rounds`` paired rounds of an n x n matmul in that dtype."""
    products = _matmuls(precisions, n, device)
    timings = paired({p: mm for p, (_, mm) in products.items()}, rounds=rounds, calls=calls, device=device)
    return {p: 2 * products[p][0] ** 3 / min(t.rounds) for p, t in timings.items()}


def mfu_against(result: dict[str, Any], peak_flops: float) -> None:
    """Set ``result``'s peak_flops and each contender's MFU = tokens/s x FLOPs per token / peak_flops."""
    result["peak_flops"] = peak_flops
    result["mfu"] = {n: tps * result["flops_per_token"][n] / peak_flops for n, tps in result["tokens_per_s"].items()}


def bench_train(size: Size, *, rounds: int = 5, calls: int = 3,
                contenders: tuple[str, ...] = ("glassformer", "glassformer-gelu", "hf"),
                precisions: tuple[str, ...] = ("float32",), matmul_n: int = 1024,
                device: torch.device | str = "cpu", nanogpt: ModuleType | None = None) -> dict[str, dict[str, Any]]:
    """Time training steps of each contender (CONTENDERS; "nanogpt" needs the ``nanogpt`` module) in each
    precision, on one float32 model and AdamW each, with a ``matmul_n`` matmul per precision, all paired.
    Returns precision -> tokens_per_s, spread, peak_mb, flops_per_token, mfu and seconds per contender,
    matmul_flops (best matmul round), peak_flops (what mfu is against), ratio_vs_hf / ratio_vs_nanogpt."""
    ids, targets = seeded_batch(size, device)
    steps, memory, flops = {}, {}, {}
    for name in contenders:
        model = build_contender(name, size, device, nanogpt).train()
        if name.startswith("glassformer") and torch.device(device).type == "cpu":
            use_bf16_attention(model)  # as the Trainer does: bfloat16 attention where measured faster here
        optimizer = make_optimizer(model, **ADAMW)
        loss_fn = nanogpt_loss if name == "nanogpt" else logits_loss
        flops[name] = train_flops_per_token(size, _non_embedding_params(model), size.block)
        for precision in precisions:
            step = steps[name, precision] = train_step(model, optimizer, ids, targets, precision=precision,
                                                       loss_fn=loss_fn)
            step()  # creates the optimiser state, so it is counted below
            state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
            held = sum(t.numel() * t.element_size() for t in [*model.parameters(), *state])
            memory[name, precision] = (held + peak_memory(step, device)) / 2 ** 20
    products = _matmuls(precisions, matmul_n, device)
    timed = paired({**{f"{name} {p}": fn for (name, p), fn in steps.items()},
                    **{f"matmul {p}": mm for p, (_, mm) in products.items()}},
                   rounds=rounds, calls=calls, device=device)
    tokens = size.batch * size.block
    results: dict[str, dict[str, Any]] = {}
    for p in precisions:
        timings = {name: timed[f"{name} {p}"] for name in contenders}
        peak = 2 * products[p][0] ** 3 / min(timed[f"matmul {p}"].rounds)
        results[p] = result = {
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
    return results


def bench_train_compile(size: Size, *, rounds: int = 5, calls: int = 3, device: torch.device | str = "cpu",
                        precision: str = "float32") -> dict[str, Any]:
    """``torch.compile`` of a training step in ``precision``: first_call_s (compiling + one step),
    eager_step_s, tokens_per_s eager and compiled, and gain (eager / compiled seconds, paired)."""
    ids, targets = seeded_batch(size, device)
    eager, compiled = glass_model(size, device), glass_model(size, device)
    steps = {"eager": train_step(eager, make_optimizer(eager, **ADAMW), ids, targets, precision=precision),
             "compiled": train_step(torch.compile(compiled), make_optimizer(compiled, **ADAMW), ids, targets,
                                    precision=precision)}
    steps["eager"]()
    eager_step = time_call(steps["eager"], device)
    return compile_gain(steps, size.batch * size.block, rounds=rounds, calls=calls, device=device, size=size.name,
                        precision=precision, eager_step_s=eager_step)

"""The training step's precision: "auto" decided by timing the model's own step (rank 0 measures)."""

from typing import Any

import torch
from torch import nn

from ..runtime.precision import Precision, autocast, model_case, resolve_precision
from .distributed import DistInfo, all_reduce_sum
from .objectives import batch_loss


def choose_precision(asked: str, model: nn.Module, dist: DistInfo,
                     micro: dict[str, torch.Tensor] | None) -> Precision:
    """``asked``, with "auto" decided by timing one forward + backward on ``micro`` (rank 0's first
    micro-batch; None elsewhere) in float32 and bfloat16; weights, gradients and RNG are left as they were."""
    case = ""
    if micro is not None:
        shape = "x".join(str(n) for n in next(iter(micro.values())).shape)
        case = f"train | {model_case(model.config)} | batch {shape}"
    steps = (lambda: _steps(model, micro, dist.device)) if micro else None
    chosen = resolve_precision(asked, dist.device, steps, case)
    if asked == "auto" and dist.distributed:
        flag = torch.tensor([float(chosen.name == "bfloat16" and dist.is_main)], device=dist.device)
        rank0_bf16 = bool(all_reduce_sum(flag, dist).item())
        if not dist.is_main:
            chosen = Precision("bfloat16" if rank0_bf16 else "float32", "auto", "as rank 0 measured")
    return chosen


def _steps(model: nn.Module, micro: dict[str, torch.Tensor], device: torch.device) -> tuple[Any, Any]:
    def step(precision: str) -> Any:
        def run() -> None:
            with torch.random.fork_rng(devices=[]), autocast(precision, device):
                parts = batch_loss(model.train(), micro, count_correct=False, check_ids=False)
            parts.loss_sum.backward()
            model.zero_grad(set_to_none=True)
        return run

    return step("float32"), step("bfloat16")

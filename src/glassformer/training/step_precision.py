"""The training step's precision: "auto" decided by timing the model's own step (rank 0 measures)."""

from functools import partial

import torch
from torch import nn

from ..runtime.precision import Precision, autocast, model_case, resolve_precision
from .distributed import DistInfo, all_reduce_sum
from .objectives import batch_loss


def choose_precision(asked: str, model: nn.Module, dist: DistInfo,
                     micro: dict[str, torch.Tensor] | None) -> Precision:
    """``asked``, with "auto" decided by timing one forward + backward on ``micro`` (rank 0's first
    micro-batch; None elsewhere) in float32 and bfloat16; weights, gradients and RNG are left as they were."""
    case, measure = "", None
    if micro is not None:
        shape = "x".join(str(n) for n in next(iter(micro.values())).shape)
        case = f"train | {model_case(model.config)} | batch {shape}"
        ways = tuple(partial(_step, model, micro, dist.device, p) for p in ("float32", "bfloat16"))
        measure = lambda: ways  # noqa: E731 (the steps resolve_precision times)
    chosen = resolve_precision(asked, dist.device, measure, case)
    if asked == "auto" and dist.distributed:
        flag = torch.tensor([float(chosen.name == "bfloat16" and dist.is_main)], device=dist.device)
        rank0_bf16 = bool(all_reduce_sum(flag, dist).item())
        if not dist.is_main:
            chosen = Precision("bfloat16" if rank0_bf16 else "float32", "auto", "as rank 0 measured")
    return chosen


def _step(model: nn.Module, micro: dict[str, torch.Tensor], device: torch.device, precision: str) -> None:
    """One forward + backward on ``micro`` under ``precision``'s autocast; gradients and RNG left as they were."""
    with torch.random.fork_rng(devices=[]), autocast(precision, device):
        parts = batch_loss(model.train(), micro, count_correct=False, check_ids=False)
    parts.loss_sum.backward()
    model.zero_grad(set_to_none=True)

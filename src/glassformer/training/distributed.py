"""torch.distributed set-up: one process per device under ``torchrun``, a no-op otherwise.

``torchrun`` sets RANK, LOCAL_RANK and WORLD_SIZE in each process's environment; with WORLD_SIZE > 1
the process group is initialised (nccl on GPUs, gloo on CPU) and the trainer wraps the model in
DistributedDataParallel, which averages gradients across processes during backward.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..errors import GlassformerError


@dataclass
class DistInfo:
    """Where this process stands: its rank among ``world_size`` processes and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        """Rank 0 logs, evaluates and writes checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """More than one process: gradients and counts are summed across them."""
        return self.world_size > 1


def pick_device(device: str, local_rank: int = 0) -> torch.device:
    """"auto": this process's GPU when there is one, else the CPU; otherwise the named device."""
    if device == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise GlassformerError(f"device={device!r} but torch sees no CUDA device")
    try:
        chosen = torch.device(device)
    except RuntimeError:
        raise GlassformerError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None
    if chosen.type == "cuda" and chosen.index is not None and chosen.index >= torch.cuda.device_count():
        raise GlassformerError(f"device={device!r} but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return chosen


def init_distributed(device: str = "auto") -> DistInfo:
    """Join the process group torchrun describes (if any) and pick this process's device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    chosen = pick_device(device, local_rank)
    if world_size > 1 and not dist.is_initialized():
        if chosen.type == "cuda":
            torch.cuda.set_device(chosen)
        dist.init_process_group(backend="nccl" if chosen.type == "cuda" else "gloo")
    return DistInfo(rank, world_size, local_rank, chosen)


def all_reduce_sum(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum ``tensor`` over all processes (in place); unchanged in a single process."""
    if info.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def shutdown(info: DistInfo) -> None:
    """Leave the process group (at the end of training)."""
    if info.distributed and dist.is_initialized():
        dist.destroy_process_group()

"""torch.distributed: one process per device under ``torchrun`` (else a no-op), DDP or FSDP2, full states."""

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..nn.block import TransformerBlock
from ..runtime.device import pick_device


@dataclass
class DistInfo:
    """This process's rank among ``world_size`` processes, and its device."""

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


def _fsdp() -> tuple[Any, type]:
    """(fully_shard, FSDPModule): public since torch 2.6, private before."""
    try:
        from torch.distributed.fsdp import FSDPModule, fully_shard
    except ImportError:  # torch 2.4 and 2.5
        from torch.distributed._composable.fsdp import FSDPModule, fully_shard
    return fully_shard, FSDPModule


def is_sharded(model: nn.Module) -> bool:
    """Whether ``fully_shard`` has sharded ``model`` (its weights are DTensors). Without a process group nothing
    can be sharded, and FSDP's import (about half a second) is skipped."""
    if not (dist.is_available() and dist.is_initialized()):
        return False
    return isinstance(getattr(model, "_orig_mod", model), _fsdp()[1])


def wrap_for_training(model: nn.Module, info: DistInfo, parallel: str = "ddp") -> nn.Module:
    """The module the training step calls: ``model`` itself in one process, else wrapped in DDP or (fsdp)
    sharded in place per :class:`TransformerBlock` and root (build the optimizer afterwards). ``parallel`` is one
    of :data:`~glassformer.training.config.PARALLEL` (checked by the TrainConfig)."""
    if not info.distributed:
        return model
    if parallel == "ddp":
        ids = [info.device.index] if info.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    from torch.distributed.device_mesh import init_device_mesh
    fully_shard = _fsdp()[0]
    mesh = init_device_mesh(info.device.type, (info.world_size,))  # this process's device type, not a guess
    for block in [m for m in model.modules() if isinstance(m, TransformerBlock)]:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def grad_sync(model: nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """The context for a micro-batch's forward: ``sync=False`` only accumulates gradients locally (DDP's
    ``no_sync``; FSDP2's flag, which stays set until the next call)."""
    inner = getattr(model, "_orig_mod", model)  # under torch.compile
    if is_sharded(inner):
        inner.set_requires_gradient_sync(sync)
    elif not sync and isinstance(inner, DistributedDataParallel):
        return inner.no_sync()
    return contextlib.nullcontext()


def _full_options(**kwargs: bool) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    return StateDictOptions(full_state_dict=True, **kwargs)


def _optimizer_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Each parameter's name, in the optimizer's order (its state_dict's integer keys)."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


def _rekeyed(state: dict[str, Any], key: Any) -> dict[str, Any]:
    """An optimizer state dict with each parameter key ``k`` replaced by ``key[k]`` (names <-> positions)."""
    return {"state": {key[k]: value for k, value in state["state"].items()},
            "param_groups": [{**group, "params": [key[k] for k in group["params"]]} for group in state["param_groups"]]}


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with full tensors; sharded: a collective (rank 0 gets them on the CPU, others {})."""
    if not is_sharded(model):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    return get_model_state_dict(model, options=_full_options(cpu_offload=True))


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` with full tensors, in torch's format; sharded: a collective, as above."""
    if not is_sharded(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    by_name = get_optimizer_state_dict(model, optimizer, options=_full_options(cpu_offload=True))
    if not by_name:
        return {}
    return _rekeyed(by_name, {name: i for i, name in enumerate(_optimizer_names(model, optimizer))})


def load_full_state(model: nn.Module, optimizer: torch.optim.Optimizer, weights: dict[str, torch.Tensor],
                    optimizer_state: dict[str, Any]) -> None:
    """Load full ``weights`` and ``optimizer_state``; sharded: a collective (every rank keeps its shard)."""
    if not is_sharded(model):
        model.load_state_dict(weights)
        optimizer.load_state_dict(optimizer_state)
        return
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict
    set_model_state_dict(model, weights, options=_full_options())
    by_name = _rekeyed(optimizer_state, _optimizer_names(model, optimizer))
    set_optimizer_state_dict(model, optimizer, by_name, options=_full_options())

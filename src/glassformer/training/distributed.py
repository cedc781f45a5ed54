"""torch.distributed set-up: one process per device under ``torchrun``, a no-op otherwise.

``torchrun`` sets RANK, LOCAL_RANK and WORLD_SIZE in each process's environment; with WORLD_SIZE > 1
the process group is initialised (nccl on GPUs, gloo on CPU) and the trainer wraps the model
(:func:`wrap_for_training`) as ``parallel`` says:

- "ddp": DistributedDataParallel. Every process holds all the weights and the optimizer state, and
  the gradients are averaged across processes (all-reduce) during backward.
- "fsdp": FSDP2 (``fully_shard``) on every Transformer block, then on the whole model. Each process
  holds 1/N of every weight, gradient and optimizer moment; a block's weights are gathered just
  before its forward (and again for its backward) and freed after it, and gradients are averaged
  and scattered back to their shards (reduce-scatter). Weights then are DTensors, so a checkpoint
  gathers them first (:func:`full_model_state`, :func:`full_optimizer_state`): every rank takes
  part and rank 0 gets the full tensors, in the same format a single process writes.

Both compute the same update as one process on the global batch (float summation order aside).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..errors import GlassformerError
from ..nn.block import TransformerBlock
from ..runtime.device import pick_device
from .config import PARALLEL


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
    """(fully_shard, FSDPModule): exported by torch.distributed.fsdp since torch 2.6, private before."""
    try:
        from torch.distributed.fsdp import FSDPModule, fully_shard
    except ImportError:  # torch 2.4 and 2.5
        from torch.distributed._composable.fsdp import FSDPModule, fully_shard
    return fully_shard, FSDPModule


def is_sharded(model: nn.Module) -> bool:
    """Whether ``fully_shard`` has sharded ``model`` (its weights are DTensors)."""
    return isinstance(getattr(model, "_orig_mod", model), _fsdp()[1])


def wrap_for_training(model: nn.Module, info: DistInfo, parallel: str = "ddp") -> nn.Module:
    """The module the training step calls, spread over the processes of ``info`` as ``parallel`` says.

    In one process ``model`` itself (there is nothing to spread: ``parallel`` has no effect). Else
    "ddp": a DistributedDataParallel around ``model``; "fsdp": ``model`` itself, sharded in place by
    ``fully_shard`` on each :class:`TransformerBlock` (the unit whose weights are gathered at a time)
    and then on the root (embeddings, final norm, head). Sharding replaces the parameters, so the
    optimizer must be built afterwards, from ``model.parameters()``.

    Args:
        model: a TransformerLM or EncoderDecoder, already on ``info.device``.
        info: this process's place (:func:`init_distributed`).
        parallel: "ddp" or "fsdp".
    Raises:
        GlassformerError for another ``parallel``.
    """
    if parallel not in PARALLEL:
        raise GlassformerError(f"parallel must be one of {list(PARALLEL)}, got {parallel!r}")
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
    """The context to run a micro-batch's forward in: with ``sync=False`` its backward only accumulates
    gradients locally (gradient accumulation), with ``sync=True`` it averages them over processes.

    DDP decides in forward (``no_sync()`` around it); FSDP2 reads a flag during backward, so for a
    sharded model the flag is set here and stays set until the next call (which the last micro-batch
    makes with ``sync=True``). Other modules: nothing to do.
    """
    inner = getattr(model, "_orig_mod", model)  # under torch.compile
    if is_sharded(inner):
        inner.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    if sync or not isinstance(inner, DistributedDataParallel):
        return contextlib.nullcontext()
    return inner.no_sync()


def _full_options(**kwargs: bool) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kwargs)


def _optimizer_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The name of each parameter, in the optimizer's order (its state_dict's integer keys)."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with full, plain tensors. For a sharded model a collective: every rank
    calls it and rank 0 gets the tensors, on the CPU (other ranks get an empty dict)."""
    if not is_sharded(model):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_full_options(cpu_offload=True))


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` with full, plain tensors, in torch's own format (state keyed by the
    parameter's position in the optimizer), which a single process or DDP loads as it is. For a
    sharded model a collective like :func:`full_model_state` (other ranks get an empty dict)."""
    if not is_sharded(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    by_name = get_optimizer_state_dict(model, optimizer, options=_full_options(cpu_offload=True))
    if not by_name:
        return {}
    index = {name: i for i, name in enumerate(_optimizer_names(model, optimizer))}
    return {"state": {index[name]: value for name, value in by_name["state"].items()},
            "param_groups": [{**group, "params": [index[name] for name in group["params"]]}
                             for group in by_name["param_groups"]]}


def load_full_state(model: nn.Module, optimizer: torch.optim.Optimizer, weights: dict[str, torch.Tensor],
                    optimizer_state: dict[str, Any]) -> None:
    """Load full (unsharded) ``weights`` and ``optimizer_state`` (torch's format, as
    :func:`full_optimizer_state` returns it) into ``model`` and ``optimizer``. For a sharded model a
    collective: every rank passes the same full state and keeps its shard of it."""
    if not is_sharded(model):
        model.load_state_dict(weights)
        optimizer.load_state_dict(optimizer_state)
        return
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    set_model_state_dict(model, weights, options=_full_options())
    names = _optimizer_names(model, optimizer)
    by_name = {"state": {names[i]: value for i, value in optimizer_state["state"].items()},
               "param_groups": [{**group, "params": [names[i] for i in group["params"]]}
                                for group in optimizer_state["param_groups"]]}
    set_optimizer_state_dict(model, optimizer, by_name, options=_full_options())

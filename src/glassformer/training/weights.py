"""Weights files read like untrusted input: headers are checked against the config (:func:`check_sizes`,
:func:`meta_specs`) before anything is allocated; only then are the tensors read (:func:`load_tensors`)."""

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch.overrides import TorchFunctionMode

from ..config import ModelConfig
from ..errors import BadFileError
from ..io.checks import first_line
from ..io.fileio import rust_path
from ..io.safetensors_header import DTYPES, Header
from ..models import build_model

MAX_ALIBI_HEADS = 2**16  # more heads than any model has; their slopes are built in a Python loop
# elements of computed position tables (sinusoidal, RoPE) always allowed; beyond it, 4x the weights held
BUFFER_ALLOWANCE = 2**28


def weight_floor(config: ModelConfig) -> int:
    """The fewest weights any model with ``config`` has (embeddings, a learned position table, per block
    the query and output projections and the feed-forward): the real model is at most ~4x this."""
    d = config.d_model
    n = config.vocab_size * d + config.n_token_types * d
    if config.pos == "learned":
        n += (config.max_len + config.pos_offset) * d
    blocks = config.n_layers if config.arch == "lm" else config.n_enc + config.n_dec
    ffn = 0 if getattr(config, "attn_only", False) else 2 * d * config.d_ff  # attention-only: no feed-forward
    return n + blocks * (2 * d * d + ffn)


def buffer_numel(config: ModelConfig) -> int:
    """Elements of the position tables a model computes at build time."""
    per_table = {"sinusoidal": config.max_len * config.d_model,
                 "rope": 2 * config.max_len * config.head_dim}.get(config.pos, 0)
    return per_table * (2 if config.arch == "encoder-decoder" else 1)


def check_sizes(config: ModelConfig, header: Header, source: str) -> None:
    """A :class:`BadFileError` naming ``source`` when ``config`` asks for far more than the weights ``header``
    describes (:func:`weight_floor`, blocks, position tables)."""
    c = config
    held = sum(math.prod(shape) for shape, _ in header.values())  # elements of every tensor of the file
    need = weight_floor(c)
    blocks = c.n_layers if c.arch == "lm" else c.n_enc + c.n_dec
    many_heads = c.pos == "alibi" and c.n_heads > MAX_ALIBI_HEADS  # slopes are computed in Python, per head
    if need > 4 * held + 2**20 or blocks > len(header) or many_heads:
        layers = f"n_layers={c.n_layers}" if c.arch == "lm" else f"n_enc={c.n_enc}, n_dec={c.n_dec}"
        raise BadFileError(
            f"{source} does not fit its weights: vocab_size={c.vocab_size}, d_model={c.d_model}, "
            f"n_heads={c.n_heads}, {layers}, d_ff={c.d_ff}, max_len={c.max_len} need at least {need:,} weights "
            f"in at least {blocks} blocks, but the files hold {held:,} weights in {len(header)} tensors "
            "(refused before allocating anything)")
    tables = buffer_numel(c)
    if tables > max(BUFFER_ALLOWANCE, 4 * held):
        raise BadFileError(
            f"{source}: max_len={c.max_len} with pos={c.pos!r} needs position tables of {tables:,} values, far "
            f"more than the {held:,} weights of the model (refused before allocating anything)")


def meta_specs(config: ModelConfig) -> dict[str, tuple[torch.Size, torch.dtype]]:
    """The state dict's shapes and dtypes of the model ``config`` builds, on the ``meta`` device (no memory)."""
    with torch.device("meta"), _MetaFillsSkipped():
        model = build_model(config)
    return {name: (tensor.shape, tensor.dtype) for name, tensor in model.state_dict().items()}


class _MetaFillsSkipped(TorchFunctionMode):
    """While active (this thread only, for one ``with``), random and constant fills of a ``meta`` tensor return it
    untouched: a meta tensor has no values, and the first fill loads torch's meta kernels (about 1 s). Nothing of
    torch is replaced; real tensors are filled as usual."""

    FILLS = frozenset({"normal_", "uniform_", "trunc_normal_", "kaiming_uniform_", "xavier_uniform_", "zero_",
                       "fill_", "constant_", "zeros_", "ones_"})

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if getattr(func, "__name__", "") in self.FILLS and args and isinstance(args[0], torch.Tensor) \
                and args[0].is_meta:
            return args[0]
        return func(*args, **(kwargs or {}))


def meta_shapes(config: ModelConfig) -> dict[str, torch.Size]:
    """The state dict's shapes of the model ``config`` builds (:func:`meta_specs` without dtypes)."""
    return {name: shape for name, (shape, _) in meta_specs(config).items()}


def meta_tensors(header: Header) -> dict[str, torch.Tensor]:
    """A stand-in state dict: one ``meta`` tensor (shape and dtype, no data) per entry of ``header``."""
    return {name: torch.empty(shape, device="meta", dtype=DTYPES.get(kind) or torch.float32)
            for name, (shape, kind) in header.items()}


def load_tensors(files: Sequence[Path]) -> dict[str, torch.Tensor]:
    """Every tensor of ``files`` on the CPU; a corrupt file or a NaN/inf tensor is a :class:`BadFileError`."""
    state: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            with rust_path(file) as name_for_rust:
                tensors = load_file(name_for_rust)
        except SafetensorError as error:
            raise BadFileError(f"{file} is corrupt or truncated ({first_line(error)})") from None
        for name, tensor in tensors.items():
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise BadFileError(f"{file}: tensor {name!r} holds NaN or infinity; glassformer never saves "
                                   "such weights, so the file was damaged or written by something else")
        state.update(tensors)
    return state

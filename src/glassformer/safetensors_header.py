"""The header of safetensors files: tensor names, shapes and dtypes, read without reading any tensor.

It sits below both ``training`` (checkpoints) and ``interop`` (Hugging Face folders): both check a
model's sizes and dtypes against the header before allocating anything. safetensors itself validates
the header against the file's size; nothing here unpickles anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from .errors import BadFileError
from .fileio import rust_path

Header = dict[str, tuple[tuple[int, ...], str]]
"""Tensor name -> (shape, safetensors dtype such as "F32"), over every file of a model."""

DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool}
"""safetensors dtype names -> torch dtypes (those glassformer can meet)."""


def read_header(files: Sequence[Path]) -> Header:
    """The names, shapes and dtypes of every tensor in ``files`` (safetensors), without reading data.

    Raises :class:`BadFileError` naming the file when one is not a valid safetensors file (corrupt,
    truncated, a header that does not fit the file) or when two files hold the same tensor name.
    """
    header: Header = {}
    for file in files:
        try:
            with rust_path(file) as name_for_rust, safe_open(name_for_rust, framework="pt") as handle:
                for name in handle.keys():  # noqa: SIM118 (a safetensors handle is not a dict)
                    view = handle.get_slice(name)
                    if name in header:
                        raise BadFileError(f"{file} repeats tensor {name!r}, already in another file")
                    header[name] = (tuple(view.get_shape()), str(view.get_dtype()))
        except SafetensorError as error:
            raise BadFileError(f"{file} is corrupt or truncated: not a valid safetensors file "
                               f"({first_line(error)})") from None
    return header


def torch_dtype(name: str) -> torch.dtype | None:
    """The torch dtype of a safetensors dtype name ("F32" -> torch.float32); None for one unknown here."""
    return DTYPES.get(name)


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__

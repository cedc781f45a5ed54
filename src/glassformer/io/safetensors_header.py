"""The header of safetensors files: tensor names, shapes and dtypes, read without reading any tensor
(``training`` and ``interop`` check a model against it before allocating)."""

from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from ..errors import BadFileError
from .checks import first_line
from .fileio import rust_path

Header = dict[str, tuple[tuple[int, ...], str]]  # tensor name -> (shape, safetensors dtype such as "F32")

DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool}  # safetensors dtype names -> torch dtypes


def read_header(files: Sequence[Path]) -> Header:
    """The names, shapes and dtypes of every tensor in ``files``; a :class:`BadFileError` naming the file
    when one is not valid safetensors or repeats a tensor name."""
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



"""nanoGPT's model as a contender, built from the user's own copy of its ``model.py`` (none is kept here).

nanoGPT (karpathy/nanoGPT, MIT) is the speed anchor small-model trainers are compared with. Its
``model.py`` defines ``GPTConfig(block_size, vocab_size, n_layer, n_head, n_embd, dropout, bias)`` and
``GPT(config)``, whose ``forward(idx, targets)`` returns ``(logits, loss)``. ``glassformer bench
--nanogpt PATH`` imports that file under a private module name and builds it at the benchmarked size.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from ..errors import BadFileError, MissingFileError
from .setups import Size

MODULE_NAME = "_glassformer_bench_nanogpt"  # where the imported file lives in sys.modules
EXPECTED = "nanoGPT's model.py (defining GPT and GPTConfig) or a folder holding it"


def load_nanogpt(path: str | Path) -> ModuleType:
    """Import nanoGPT's ``model.py`` from ``path`` (the file, or a folder holding it).

    The module is registered as ``MODULE_NAME`` (dataclasses looks a class's module up while building
    ``GPTConfig``); importing again replaces it. A missing file, one that fails to import for want of a
    module or by a syntax error, or one without ``GPT`` and ``GPTConfig`` is a one-line error naming it.
    """
    path = Path(path)
    file = path / "model.py" if path.is_dir() else path
    if not file.is_file():
        raise MissingFileError(f"nanogpt must be {EXPECTED}, got {str(path)!r}: no such file")
    loader = importlib.machinery.SourceFileLoader(MODULE_NAME, str(file))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, file, loader=loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    try:
        loader.exec_module(module)
    except (ImportError, SyntaxError) as error:
        del sys.modules[MODULE_NAME]
        reason = str(error).splitlines()[0] if str(error) else ""
        raise BadFileError(f"nanogpt must be {EXPECTED}, got {str(file)!r}, which does not import "
                           f"({type(error).__name__}: {reason})") from None
    missing = [name for name in ("GPT", "GPTConfig") if not hasattr(module, name)]
    if missing:
        del sys.modules[MODULE_NAME]
        raise BadFileError(f"nanogpt must be {EXPECTED}, got {str(file)!r}, which defines no {' or '.join(missing)}")
    return module


def nanogpt_model(size: Size, module: ModuleType, device: torch.device | str = "cpu") -> nn.Module:
    """nanoGPT's ``GPT`` at ``size`` (block_size = size.block, bias = size.bias, dropout 0), seeded like
    the other contenders, float32 on ``device``."""
    try:
        config = module.GPTConfig(block_size=size.block, vocab_size=size.vocab_size, n_layer=size.n_layers,
                                  n_head=size.n_heads, n_embd=size.d_model, dropout=0.0, bias=size.bias)
    except TypeError as error:
        raise BadFileError(f"nanogpt must be {EXPECTED}, got {module.__file__!r}, whose GPTConfig does not take "
                           f"nanoGPT's fields ({error})") from None
    torch.manual_seed(0)
    return module.GPT(config).to(device)


def nanogpt_loss(model: nn.Module, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The loss nanoGPT trains with: its own ``model(ids, targets)`` (logits of every position, then
    cross-entropy), the second element of what it returns."""
    return model(ids, targets)[1]

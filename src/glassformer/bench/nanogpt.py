"""nanoGPT as a contender, from the user's own checkout (none of its code is kept here): model and training run.

nanoGPT (karpathy/nanoGPT, MIT) is the speed anchor small-model trainers are compared with. Its
``model.py`` defines ``GPTConfig(block_size, vocab_size, n_layer, n_head, n_embd, dropout, bias)`` and
``GPT(config)``, whose ``forward(idx, targets)`` returns ``(logits, loss)``. ``glassformer bench
--nanogpt PATH`` imports that file under a private module name and builds it at the benchmarked size.
``benchmarks/bench_nanogpt_quality.py`` runs the checkout's own ``train.py`` (README CPU settings) in a
folder of its own and reads the losses it prints.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shutil
import subprocess
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


# ---------------------------------------------------------------------- nanoGPT's own training run
# nanoGPT README's CPU command for Shakespeare-char ("macbook" settings), after its config file.
README_CPU_ARGS = ("--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1", "--block_size=64",
                   "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", "--max_iters=2000",
                   "--lr_decay_iters=2000", "--dropout=0.0")
NANOGPT_TARGET = 1.8857  # its README's val loss after those 2000 steps
_EVAL_LINE = re.compile(r"^step (\d+): train loss ([0-9.]+), val loss ([0-9.]+)")


def nanogpt_checkout(path: str | Path) -> Path:
    """The nanoGPT checkout folder at ``path`` (holding train.py, model.py, configurator.py, config/ and
    data/shakespeare_char/prepare.py), else a one-line error naming what is missing."""
    root = Path(path)
    needed = ("train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py",
              "data/shakespeare_char/prepare.py")
    missing = [name for name in needed if not (root / name).is_file()]
    if missing:
        raise MissingFileError(f"nanogpt must be a checkout of karpathy/nanoGPT, got {str(root)!r}, "
                               f"which lacks {', '.join(missing)}")
    return root


def prepare_nanogpt_workdir(checkout: Path, workdir: Path, text: Path, python: str = sys.executable) -> Path:
    """A folder to run ``checkout``'s train.py in, without writing into the checkout: its
    ``configurator.py`` linked, and ``data/shakespeare_char/`` holding ``text`` (tinyshakespeare) and
    the train.bin / val.bin / meta.pkl that the checkout's own ``prepare.py`` makes of it (run from
    a copy there; its ``requests`` import, used only to download, is stubbed: nothing is fetched)."""
    data = workdir / "data" / "shakespeare_char"
    data.mkdir(parents=True, exist_ok=True)
    link = workdir / "configurator.py"
    if not link.exists():
        link.symlink_to(checkout.resolve() / "configurator.py")
    shutil.copyfile(text, data / "input.txt")
    shutil.copyfile(checkout / "data" / "shakespeare_char" / "prepare.py", data / "prepare.py")
    stub = ("import runpy, sys, types; sys.modules.setdefault('requests', types.ModuleType('requests')); "
            "runpy.run_path(sys.argv[1], run_name='__main__')")
    subprocess.run([python, "-c", stub, str(data / "prepare.py")], cwd=data, check=True, capture_output=True)
    return workdir


def nanogpt_command(checkout: Path, extra: tuple[str, ...] = (), python: str = sys.executable) -> list[str]:
    """The command running nanoGPT's train.py with its Shakespeare-char config and the README's CPU
    arguments (``extra`` appended: later ones win), from a folder made by :func:`prepare_nanogpt_workdir`."""
    root = checkout.resolve()
    return [python, str(root / "train.py"), str(root / "config" / "train_shakespeare_char.py"), *README_CPU_ARGS,
            *extra]


def nanogpt_evals(lines: list[tuple[float, str]]) -> list[dict[str, float]]:
    """nanoGPT's evaluation lines (``step N: train loss X, val loss Y``) among timestamped output lines:
    [{"step", "train_loss", "val_loss", "at_s"}] (``at_s``: when the line came, seconds from the start)."""
    evals = []
    for at, line in lines:
        found = _EVAL_LINE.match(line.strip())
        if found:
            evals.append({"step": int(found[1]), "train_loss": float(found[2]), "val_loss": float(found[3]),
                          "at_s": at})
    return evals

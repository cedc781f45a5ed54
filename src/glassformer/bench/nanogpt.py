"""nanoGPT (karpathy/nanoGPT, MIT) from the user's own checkout, none of its code kept here: its model.py as a
bench contender, and its train.py run as it stands (``benchmarks/bench_nanogpt_quality.py``)."""

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
    """Import nanoGPT's ``model.py`` from ``path`` (the file, or a folder holding it) as ``MODULE_NAME``
    (dataclasses looks the module up); a file that is missing, does not import or lacks ``GPT`` and
    ``GPTConfig`` is a one-line error naming it."""
    path = Path(path)
    file = path / "model.py" if path.is_dir() else path
    if not file.is_file():
        raise MissingFileError(f"nanogpt must be {EXPECTED}, got {str(path)!r}: no such file")
    loader = importlib.machinery.SourceFileLoader(MODULE_NAME, str(file))
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(MODULE_NAME, file, loader=loader))
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
    """nanoGPT's ``GPT`` at ``size`` (bias = size.bias, dropout 0), seeded like the other contenders."""
    try:
        config = module.GPTConfig(block_size=size.block, vocab_size=size.vocab_size, n_layer=size.n_layers,
                                  n_head=size.n_heads, n_embd=size.d_model, dropout=0.0, bias=size.bias)
    except TypeError as error:
        raise BadFileError(f"nanogpt must be {EXPECTED}, got {module.__file__!r}, whose GPTConfig does not take "
                           f"nanoGPT's fields ({error})") from None
    torch.manual_seed(0)
    return module.GPT(config).to(device)


def nanogpt_loss(model: nn.Module, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The loss nanoGPT trains with: the second element of its own ``model(ids, targets)``."""
    return model(ids, targets)[1]


# nanoGPT README's CPU command for Shakespeare-char ("macbook" settings), after its config file.
README_CPU_ARGS = ("--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1", "--block_size=64",
                   "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", "--max_iters=2000",
                   "--lr_decay_iters=2000", "--dropout=0.0")
NANOGPT_TARGET = 1.8857  # its README's val loss after those 2000 steps
_EVAL_LINE = re.compile(r"^step (\d+): train loss ([0-9.]+), val loss ([0-9.]+)")


def nanogpt_checkout(path: str | Path) -> Path:
    """The nanoGPT checkout folder at ``path``, else a one-line error naming the files it lacks."""
    root = Path(path)
    needed = ("train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py",
              "data/shakespeare_char/prepare.py")
    missing = [name for name in needed if not (root / name).is_file()]
    if missing:
        raise MissingFileError(f"nanogpt must be a checkout of karpathy/nanoGPT, got {str(root)!r}, "
                               f"which lacks {', '.join(missing)}")
    return root


def prepare_nanogpt_workdir(checkout: Path, workdir: Path, text: Path, python: str = sys.executable) -> Path:
    """A folder to run ``checkout``'s train.py in without writing into the checkout: its configurator.py
    linked, ``data/shakespeare_char/`` holding ``text`` and what the checkout's prepare.py makes of it (run
    from a copy, its ``requests`` import stubbed: nothing is fetched)."""
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
    """The command running nanoGPT's train.py with its Shakespeare-char config and README_CPU_ARGS, then
    ``extra`` (later ones win), from a folder made by :func:`prepare_nanogpt_workdir`."""
    root = checkout.resolve()
    return [python, str(root / "train.py"), str(root / "config" / "train_shakespeare_char.py"), *README_CPU_ARGS,
            *extra]


def nanogpt_evals(lines: list[tuple[float, str]]) -> list[dict[str, float]]:
    """nanoGPT's ``step N: train loss X, val loss Y`` lines among (seconds from the start, line) pairs:
    [{"step", "train_loss", "val_loss", "at_s"}]."""
    found = [(at, _EVAL_LINE.match(line.strip())) for at, line in lines]
    return [{"step": int(m[1]), "train_loss": float(m[2]), "val_loss": float(m[3]), "at_s": at}
            for at, m in found if m]

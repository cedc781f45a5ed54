"""Numeric precision as a choice: float32, or bfloat16/float16 under autocast, or "auto".

Reduced precision runs the matrix products in bfloat16 (or float16) while the weights, the optimizer
and the loss stay float32 (``torch.autocast``): the way mixed-precision training is done. Whether it
pays depends on the device and on the model. A CPU with bfloat16 instructions (``avx512_bf16``, AMX)
multiplies bfloat16 matrices several times faster than float32 ones, yet a small model's step is
dominated by element-wise work that autocast only adds casts to; a CPU without them emulates
bfloat16 and is slower. So ``"auto"`` does not assume:

- on a CUDA device it takes bfloat16 when the GPU supports it (Ampere and later), else float32;
- on a CPU without bfloat16 instructions it keeps float32;
- on a CPU with them it *measures* this model's step both ways (see
  :func:`glassformer.runtime.kernel_choice.choose`: interleaved pairs, remembered per machine) and takes
  bfloat16 only when it is clearly faster.

float16 is never chosen by "auto" (its narrow range needs loss scaling; the trainer then uses a
``GradScaler``), but can be asked for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..errors import GlassformerError
from . import kernel_choice

PRECISIONS = ("auto", "float32", "bfloat16", "float16")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # x86 instructions that make bfloat16 matmuls fast


def autocast(name: str, device: torch.device | str = "cpu") -> contextlib.AbstractContextManager:
    """The context a forward pass in precision ``name`` runs in: ``torch.autocast`` to bfloat16 or
    float16 on ``device`` (weights stay float32, matrix products run in 16 bits); nothing for float32."""
    if name == "float32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=DTYPES[name])


def check_precision(value: object, name: str = "precision") -> str:
    """``value`` when it is one of PRECISIONS, else a GlassformerError naming ``name`` and the value."""
    if value not in PRECISIONS:
        raise GlassformerError(f"{name} must be one of {list(PRECISIONS)}, got {value!r}")
    return str(value)


@dataclass(frozen=True)
class Precision:
    """A resolved precision: ``name`` (float32/bfloat16/float16), what was ``asked`` and why (``reason``)."""

    name: str
    asked: str
    reason: str

    @property
    def dtype(self) -> torch.dtype:
        """The dtype matrix products run in."""
        return DTYPES[self.name]

    @property
    def reduced(self) -> bool:
        """True for bfloat16 and float16 (autocast on)."""
        return self.name != "float32"

    def autocast(self, device: torch.device | str) -> contextlib.AbstractContextManager:
        """The context to run forward passes in: :func:`autocast` to this precision."""
        return autocast(self.name, device)

    def describe(self) -> str:
        """One line for the start of a run: ``precision: bfloat16 (auto: ...)``."""
        asked = f"{self.asked}: " if self.asked != self.name else ""
        return f"precision: {self.name} ({asked}{self.reason})"

    def to_dict(self) -> dict[str, str]:
        """What checkpoints and results record."""
        return {"precision": self.name, "asked": self.asked, "reason": self.reason}


def bf16_hardware(device: torch.device | str) -> tuple[bool, str]:
    """Whether ``device`` multiplies bfloat16 matrices natively, and the evidence in words."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if torch.cuda.is_bf16_supported():
            return True, f"{name} supports bfloat16"
        return False, f"{name} has no native bfloat16"
    if device.type != "cpu":
        return False, f"reduced precision is not chosen automatically on {device.type}"
    flags = [f for f in BF16_FLAGS if f in kernel_choice.cpu_features()]
    if flags:
        return True, f"the CPU has {'/'.join(flags)}"
    return False, "the CPU has no bfloat16 instructions (avx512_bf16, amx_bf16): bfloat16 would be emulated"


def model_case(config: object) -> str:
    """A model config's shape in words (``lm 4 layers d128 ff512 V65``): part of the key a measured
    choice is remembered under."""
    c = config
    layers = f"{c.n_enc}+{c.n_dec}" if c.arch == "encoder-decoder" else str(c.n_layers)
    return f"{c.arch} {layers} layers d{c.d_model} ff{c.d_ff} V{c.vocab_size}"


def resolve_precision(asked: str, device: torch.device | str,
                      measure: Callable[[], tuple[Callable[[], object], Callable[[], object]]] | None = None,
                      case: str = "") -> Precision:
    """The precision to run with.

    Args:
        asked: one of PRECISIONS.
        device: where the model runs.
        measure: for "auto" on a CPU with bfloat16 instructions: gives (float32 step, bfloat16 step)
            callables of *this* model's work (a training step, a forward pass); both are timed in
            interleaved pairs and bfloat16 is taken only when it needs at most
            ``kernel_choice.MARGIN`` of float32's time. Called only when the answer for ``case`` is
            not yet known on this machine. Without it, "auto" keeps float32 on CPUs.
        case: names what was measured (model shape, batch shape, training or inference): the key
            the choice is remembered under (``glassformer bench --kernel_choices`` lists it).
    """
    check_precision(asked)
    if asked in ("float32", "float16"):
        return Precision(asked, asked, "as asked")
    capable, why = bf16_hardware(device)
    if asked == "bfloat16":
        return Precision(asked, asked, "as asked" if capable else f"as asked; slow here: {why}")
    if not capable:
        return Precision("float32", "auto", why)
    if torch.device(device).type == "cuda":
        return Precision("bfloat16", "auto", why)
    if measure is None:
        return Precision("float32", "auto", f"{why}, but nothing was measured")
    if kernel_choice.choose(f"precision bfloat16 | {case}", measure, grad=True):
        return Precision("bfloat16", "auto", f"{why}; bfloat16 autocast measured clearly faster for this model")
    return Precision("float32", "auto", f"{why}; bfloat16 autocast measured not clearly faster for this model")

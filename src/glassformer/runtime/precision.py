"""Numeric precision as a choice: float32, bfloat16/float16 under autocast (weights stay float32), or "auto".

"auto" takes bfloat16 on a CUDA GPU that supports it; on a CPU only when it has bfloat16 instructions and a
measurement of this model's step finds it clearly faster (:func:`.kernel_choice.choose`); else float32.
float16 (which needs loss scaling) is never chosen by "auto".
"""

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
    """``torch.autocast`` to precision ``name`` on ``device``; a context that does nothing for float32."""
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
        """:func:`autocast` to this precision."""
        return autocast(self.name, device)

    def describe(self) -> str:
        """One line for the start of a run: ``precision: bfloat16 (auto: ...)``."""
        asked = f"{self.asked}: " if self.asked != self.name else ""
        return f"precision: {self.name} ({asked}{self.reason})"


def bf16_hardware(device: torch.device | str) -> tuple[bool, str]:
    """Whether ``device`` multiplies bfloat16 matrices natively, and the evidence in words."""
    device = torch.device(device)
    if device.type == "cuda":
        name, native = torch.cuda.get_device_name(device), torch.cuda.is_bf16_supported()
        return native, f"{name} supports bfloat16" if native else f"{name} has no native bfloat16"
    if device.type != "cpu":
        return False, f"reduced precision is not chosen automatically on {device.type}"
    flags = [f for f in BF16_FLAGS if f in kernel_choice.cpu_features()]
    if flags:
        return True, f"the CPU has {'/'.join(flags)}"
    return False, "the CPU has no bfloat16 instructions (avx512_bf16, amx_bf16): bfloat16 would be emulated"


def model_case(config: object) -> str:
    """A model config's shape in words (``lm 4 layers d128 ff512 V65``), for a measured choice's key."""
    layers = f"{config.n_enc}+{config.n_dec}" if config.arch == "encoder-decoder" else config.n_layers
    return f"{config.arch} {layers} layers d{config.d_model} ff{config.d_ff} V{config.vocab_size}"


def resolve_precision(asked: str, device: torch.device | str,
                      measure: Callable[[], tuple[Callable[[], object], Callable[[], object]]] | None = None,
                      case: str = "") -> Precision:
    """The precision to run with.

    Args:
        asked: one of PRECISIONS, checked where it entered (the config, the command). device: where the model runs.
        measure: for "auto" on a CPU with bfloat16 instructions, gives (float32 step, bfloat16 step) callables
            of this model's work, timed by :func:`.kernel_choice.choose`; without it "auto" keeps float32 on CPUs.
        case: what was measured (model, batch, training or inference): the key the choice is remembered under.
    """
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
    faster = kernel_choice.choose(f"precision bfloat16 | {case}", measure, grad=True)
    return Precision("bfloat16" if faster else "float32", "auto",
                     f"{why}; bfloat16 autocast measured {'' if faster else 'not '}clearly faster for this model")

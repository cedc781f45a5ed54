"""Muon whose Newton-Schulz iteration runs in the precision this machine does fastest: torch's always uses
bfloat16, which a CPU without bfloat16 instructions emulates (~10x slower than float32)."""

import math
from collections.abc import Callable, Iterable

import torch

from ..errors import GlassformerError
from ..runtime import kernel_choice
from ..runtime.precision import bf16_hardware
from ..validate import check_choice

NS_PRECISIONS = ("auto", "float32", "bfloat16")


def newton_schulz(grad: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float,
                  dtype: torch.dtype) -> torch.Tensor:
    """The orthogonalised (rows, cols) ``grad`` (about U V^T of its SVD), in ``dtype``: ``steps`` times
    X -> ``a X + (b A + c A^2) X``, ``A = X X^T``, as torch's ``_zeropower_via_newtonschulz``."""
    a, b, c = coefficients
    x = grad.to(dtype)
    wide = grad.size(0) <= grad.size(1)
    if not wide:
        x = x.T
    x = x / x.norm().clamp(min=eps)  # not in place: without a cast, x is the caller's tensor
    for _ in range(steps):
        gram = x @ x.T
        polynomial = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, polynomial, x, beta=a)
    return x if wide else x.T


def lr_scale(adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """A (rows, cols) matrix's step scale: ``sqrt(max(1, rows/cols))``, or ``0.2 sqrt(max(rows, cols))`` (AdamW's)."""
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return math.sqrt(max(1, rows / cols))
    return 0.2 * math.sqrt(max(rows, cols))


def ns_case(shapes: Iterable[tuple[int, int]]) -> str:
    """The key a measured precision is remembered under: ``muon newton-schulz bfloat16 | 128x384 128x512``."""
    wide = sorted({(min(s), max(s)) for s in shapes})
    return "muon newton-schulz bfloat16 | " + " ".join(f"{r}x{c}" for r, c in wide)


def resolve_ns_precision(asked: str, device: torch.device | str,
                         shapes: Iterable[tuple[int, int]] = ()) -> tuple[str, str]:
    """("float32" or "bfloat16", the reason): Newton-Schulz's precision for matrices of ``shapes`` on
    ``device`` (for "auto" on a CPU with bfloat16 instructions, timed on them once per machine); ``asked``:
    one of :data:`NS_PRECISIONS` (checked by :class:`Muon`)."""
    if asked != "auto":
        return asked, "as asked"
    device = torch.device(device)
    capable, why = bf16_hardware(device)
    if not capable:
        return "float32", why
    if device.type == "cuda":
        return "bfloat16", why
    shapes = list(shapes)
    if device.type != "cpu" or not shapes:
        return "float32", f"{why}, but nothing was measured"
    if kernel_choice.choose(ns_case(shapes), lambda: ns_ways(shapes, device)):
        return "bfloat16", f"{why}; bfloat16 Newton-Schulz measured clearly faster for these matrices"
    return "float32", f"{why}; bfloat16 Newton-Schulz measured not clearly faster for these matrices"


def ns_ways(shapes: Iterable[tuple[int, int]], device: torch.device | str = "cpu",
            steps: int = 5) -> tuple[Callable[[], object], Callable[[], object]]:
    """(float32, bfloat16) callables that orthogonalise one random matrix of each of ``shapes`` (to time)."""
    generator = torch.Generator().manual_seed(0)
    matrices = [torch.randn(tuple(s), generator=generator).to(device) for s in dict.fromkeys(map(tuple, shapes))]
    coefficients = (3.4445, -4.7750, 2.0315)

    def run(dtype: torch.dtype) -> Callable[[], object]:
        return lambda: [newton_schulz(m, coefficients, steps, 1e-7, dtype) for m in matrices]

    return run(torch.float32), run(torch.bfloat16)


class Muon(getattr(torch.optim, "Muon", torch.optim.Optimizer)):  # torch < 2.9 has no Muon: make_optimizer says so
    """``torch.optim.Muon`` (same arguments and ``state_dict()``) with its Newton-Schulz precision chosen."""

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict], ns_precision: str = "auto",
                 **options: object) -> None:
        super().__init__(params, **options)
        self.ns_precision = check_choice("ns_precision", ns_precision, NS_PRECISIONS)
        self.ns_reason = ""
        self._ns_dtype: torch.dtype | None = None

    @property
    def ns_dtype(self) -> torch.dtype:
        """The dtype Newton-Schulz runs in (resolved, and for "auto" perhaps measured, on first use)."""
        if self._ns_dtype is None:
            params = [p for group in self.param_groups for p in group["params"]]
            device = params[0].device if params else torch.device("cpu")
            name, self.ns_reason = resolve_ns_precision(self.ns_precision, device,
                                                        [tuple(p.shape) for p in params])
            self._ns_dtype = getattr(torch, name)  # torch.float32 or torch.bfloat16
        return self._ns_dtype

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """torch's Muon step (momentum, Nesterov, decoupled decay, scaled lr); Newton-Schulz in :attr:`ns_dtype`."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        dtype = self.ns_dtype
        for group in self.param_groups:
            lr, momentum, decay = float(group["lr"]), group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if torch.is_complex(p) or p.grad.is_sparse:
                    kind = "complex" if torch.is_complex(p) else "sparse"
                    raise GlassformerError(f"Muon updates dense real matrices, got a {kind} one of shape "
                                           f"{tuple(p.shape)}")
                if "momentum_buffer" not in self.state[p]:
                    self.state[p]["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf = self.state[p]["momentum_buffer"]
                buf.lerp_(p.grad, 1 - momentum)
                update = p.grad.lerp(buf, momentum) if group["nesterov"] else buf
                update = newton_schulz(update, group["ns_coefficients"], group["ns_steps"], group["eps"], dtype)
                p.mul_(1 - lr * decay)
                p.add_(update, alpha=-lr * lr_scale(group["adjust_lr_fn"], p.shape))
        return loss

"""Muon whose Newton-Schulz iteration runs in the precision this machine does fastest.

``torch.optim.Muon`` orthogonalises each update matrix with a quintic Newton-Schulz iteration
(Keller Jordan 2024) that it always runs in bfloat16. That pays on a GPU or a CPU with bfloat16
instructions (AMX, ``avx512_bf16``), but a CPU without them emulates bfloat16: on an AMD EPYC
Zen 3 (avx2) a 128x512 product takes ~10x longer in bfloat16 than in float32, and the
Shakespeare recipe trained 7x slower with Muon than with AdamW. So :class:`Muon` is torch's Muon
(same hyperparameters, same ``param_groups`` and ``state``, so checkpoints load either way) with
the iteration's precision a choice:

- ``"auto"`` (the default): bfloat16 on a CUDA device that supports it; float32 on a CPU without
  bfloat16 instructions; on a CPU with them, both are *measured* on this optimizer's matrix shapes
  (:func:`glassformer.runtime.kernel_choice.choose`: interleaved pairs, rounds that must agree,
  remembered per machine) and bfloat16 is taken only when clearly faster;
- ``"float32"`` or ``"bfloat16"``: as asked (bfloat16 is torch's own behaviour, to the bit).

The precision is resolved at the first step, so building the optimizer measures nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from ..errors import GlassformerError
from ..runtime import kernel_choice
from ..runtime.precision import bf16_hardware

NS_PRECISIONS = ("auto", "float32", "bfloat16")
NS_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def newton_schulz(grad: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float,
                  dtype: torch.dtype) -> torch.Tensor:
    """The orthogonalised ``grad`` (about U V^T of its SVD), by ``steps`` quintic Newton-Schulz steps in ``dtype``.

    Each step maps X to ``a X + (b A + c A^2) X`` with ``A = X X^T``, on the wide orientation of the
    matrix (fewer rows than columns, so A is the small Gram matrix); X starts as ``grad`` divided by
    its Frobenius norm (at least ``eps``), so its spectral norm is at most 1. The same operations in
    the same order as torch's ``_zeropower_via_newtonschulz``, whose result it equals in bfloat16.

    Args:
        grad: a (rows, cols) matrix.
        coefficients: (a, b, c) of the quintic.
        steps: iterations (torch's Muon: 5).
        eps: the smallest norm divided by.
        dtype: the precision the products run in.

    Returns:
        (rows, cols), in ``dtype``.
    """
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
    """How much a (rows, cols) matrix's step is scaled: "original" ``sqrt(max(1, rows/cols))`` (Keller
    Jordan's), "match_rms_adamw" ``0.2 sqrt(max(rows, cols))`` (Moonshot 2025: AdamW's update size)."""
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return math.sqrt(max(1, rows / cols))
    return 0.2 * math.sqrt(max(rows, cols))


def check_ns_precision(value: object) -> str:
    """``value`` when it is one of NS_PRECISIONS, else a GlassformerError naming it."""
    if value not in NS_PRECISIONS:
        raise GlassformerError(f"ns_precision must be one of {list(NS_PRECISIONS)}, got {value!r}")
    return str(value)


def ns_case(shapes: Iterable[tuple[int, int]]) -> str:
    """The key a measured Newton-Schulz precision is remembered under: ``muon newton-schulz bfloat16 |
    128x384 128x512`` (the distinct matrix shapes, wide orientation, sorted)."""
    wide = sorted({(min(s), max(s)) for s in shapes})
    return "muon newton-schulz bfloat16 | " + " ".join(f"{r}x{c}" for r, c in wide)


def resolve_ns_precision(asked: str, device: torch.device | str,
                         shapes: Iterable[tuple[int, int]] = ()) -> tuple[str, str]:
    """The precision Newton-Schulz runs in for matrices of ``shapes`` on ``device``, and why.

    Args:
        asked: one of NS_PRECISIONS.
        device: where the matrices live.
        shapes: the (rows, cols) of the matrices (for "auto" on a CPU with bfloat16 instructions: the
            iteration is timed on them, in float32 and in bfloat16, once per machine).

    Returns:
        ("float32" or "bfloat16", the reason in words).
    """
    check_ns_precision(asked)
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
    """(float32, bfloat16) callables that orthogonalise one random matrix of each of ``shapes``: what
    :func:`resolve_ns_precision` and ``glassformer bench --defaults`` time."""
    generator = torch.Generator().manual_seed(0)
    matrices = [torch.randn(tuple(s), generator=generator).to(device) for s in dict.fromkeys(map(tuple, shapes))]
    coefficients = (3.4445, -4.7750, 2.0315)

    def run(dtype: torch.dtype) -> Callable[[], object]:
        return lambda: [newton_schulz(m, coefficients, steps, 1e-7, dtype) for m in matrices]

    return run(torch.float32), run(torch.bfloat16)


class Muon(torch.optim.Muon):
    """``torch.optim.Muon`` with its Newton-Schulz precision chosen for the machine (see the module).

    Args:
        params: the 2-D parameters (or groups) to update.
        ns_precision: "auto", "float32" or "bfloat16".
        **options: torch's Muon arguments (lr, weight_decay, momentum, nesterov, ns_coefficients, eps,
            ns_steps, adjust_lr_fn), with torch's defaults.

    ``ns_precision`` and the resolved :attr:`ns_dtype` are attributes, not group entries: ``state_dict()``
    is exactly torch's Muon's, so a checkpoint of either loads into the other.
    """

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict], ns_precision: str = "auto",
                 **options: object) -> None:
        super().__init__(params, **options)
        self.ns_precision = check_ns_precision(ns_precision)
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
            self._ns_dtype = NS_DTYPES[name]
        return self._ns_dtype

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One update of every parameter with a gradient: torch's Muon step (momentum, Nesterov,
        decoupled weight decay, shape-scaled lr) with Newton-Schulz in :attr:`ns_dtype`."""
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
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - momentum)
                update = p.grad.lerp(buf, momentum) if group["nesterov"] else buf
                update = newton_schulz(update, group["ns_coefficients"], group["ns_steps"], group["eps"], dtype)
                p.mul_(1 - lr * decay)
                p.add_(update, alpha=-lr * lr_scale(group["adjust_lr_fn"], p.shape))
        return loss

"""The few-row product of decoding on a CPU: ``linear(x, W, b)``, the same product as ``F.linear``.

A decoding step is memory-bound (reading the weights). On some CPUs computing W xᵀ with W's rows in four
blocks (``torch.bmm``) reads them ~1.5x faster than ``F.linear``; on others it is 2x slower, so each shape
is timed once (:func:`.kernel_choice.choose`), as decoding reads the weight: from memory when the model is
larger than the CPU's last cache (``streamed``), else from the cache. Only float32 on the CPU, no autograd
or autocast, at most ``FEW_ROWS`` rows and ``MIN_WEIGHT`` elements. A caller asks for it by setting a
:class:`FewRowProduct` as the ``product`` of the model's linear layers (:func:`.decode.few_row_products`,
which generation enters while it decodes): the choice is made inside each layer's own forward.
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..errors import ArgumentTypeError
from . import pages
from .kernel_choice import choose, last_level_cache_bytes

FEW_ROWS = 8  # products with at most this many rows (B x T) may take it, where measured faster
MIN_WEIGHT = 1 << 17  # ... when the weight has at least this many elements (512 KB in float32)
BLOCKS = 4  # the weight's rows are multiplied as this many blocks
STREAM_BYTES_MAX = 1 << 30  # a streamed choice is timed on copies of the weight up to this many bytes per way

_batched_matvec = True


def set_batched_matvec(enabled: bool) -> bool:
    """Turn the few-row route on (the default) or off; returns the previous setting."""
    global _batched_matvec
    if not isinstance(enabled, bool):
        raise ArgumentTypeError(f"enabled must be a bool, got {type(enabled).__name__}")
    previous, _batched_matvec = _batched_matvec, enabled
    return previous


def batched_matvec() -> bool:
    """Whether the few-row route is on (:func:`set_batched_matvec`)."""
    return _batched_matvec


def _few_rows(x: torch.Tensor, weight: torch.Tensor) -> int:
    """x's number of rows when the batched route applies to ``x Wᵀ``, else 0."""
    if not _batched_matvec or torch.is_grad_enabled() or weight.numel() < MIN_WEIGHT or weight.dim() != 2:
        return 0
    if x.device.type != "cpu" or weight.dtype != torch.float32 or x.dtype != torch.float32 or x.dim() == 0:
        return 0
    if torch.is_autocast_enabled("cpu") or x.shape[-1] != weight.shape[1] or not weight.is_contiguous():
        return 0
    rows = x.numel() // weight.shape[1]
    return rows if 0 < rows <= FEW_ROWS else 0


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           streamed: bool = False) -> torch.Tensor:
    """``F.linear(x, weight, bias)``: x (..., in) -> (..., out), by the few-row route where it pays here
    (``streamed``: for a weight read from memory, not from the cache)."""
    rows = _few_rows(x, weight)
    if not rows or not _route_pays(rows, weight, streamed):
        return F.linear(x, weight, bias)
    return routed(x, weight, bias)


def routed(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`linear`'s product by the route, unchecked: for a caller that asked :func:`route_pays` for x's shape."""
    y = _blocked_matvec(x.reshape(-1, weight.shape[1]), weight)  # (rows, out)
    if bias is not None:
        y = y + bias
    return y.view(*x.shape[:-1], weight.shape[0])


def route_pays(x: torch.Tensor, weight: torch.Tensor, streamed: bool = False) -> bool | None:
    """Whether :func:`linear` takes the route for ``x`` and ``weight`` (None: not a few-row product)."""
    rows = _few_rows(x, weight)
    return _route_pays(rows, weight, streamed) if rows else None


class FewRowProduct:
    """A ``product`` for :class:`glassformer.nn.linear.Linear` and the output head: ``F.linear``'s product, by the
    route where it pays here for that many rows and that weight shape. Asked once per (rows, shape): one
    object serves one generation, in which grad mode and autocast do not change. ``streamed``: as
    :func:`linear`'s. Each weight's way is prepared at its first product (for the route: views of the weight
    and bias in blocks) and kept until :meth:`forget`, so a step's product makes three tensor calls."""

    def __init__(self, streamed: bool = False) -> None:
        self.streamed = streamed
        self.ways: dict[tuple[int, torch.Size], Callable[..., torch.Tensor]] = {}
        self.prepared: dict[tuple[int, torch.Size], tuple] = {}  # (id(weight), x's shape) -> (weight, bias, way, args)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x (..., in) -> (..., out), equal to ``F.linear(x, weight, bias)`` up to float32 rounding."""
        if torch.compiler.is_compiling():  # a compiled step traces the plain choice
            return self.way(x, weight)(x, weight, bias)
        entry = self.prepared.get((id(weight), x.shape))
        if entry is None or entry[0] is not weight or entry[1] is not bias:
            entry = self.prepared[(id(weight), x.shape)] = self._prepare(x, weight, bias)
        return entry[2](x, *entry[3])

    def way(self, x: torch.Tensor, weight: torch.Tensor) -> Callable[..., torch.Tensor]:
        """:func:`routed` or ``F.linear`` for x's rows and the weight's shape (measured at the first ask)."""
        key = (x.numel() // weight.shape[1], weight.shape)
        way = self.ways.get(key)
        if way is None:
            way = self.ways[key] = routed if route_pays(x, weight, self.streamed) else F.linear
        return way

    def _prepare(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> tuple:
        """(weight, bias, function, its arguments after x): the route on block views where the weight's rows
        split evenly into the blocks, else the way itself on (weight, bias)."""
        way = self.way(x, weight)
        if way is routed and weight.shape[0] % BLOCKS == 0:
            return weight, bias, _product_on_blocks, _block_views(weight, bias)
        return weight, bias, way, (weight, bias)

    def forget(self) -> None:
        """Drop the prepared ways (generation calls it as it ends: a parameter replaced later is not held)."""
        self.prepared.clear()


def streams(model: torch.nn.Module) -> bool:
    """Whether a decoding step of ``model`` reads its weights from memory: they exceed the CPU's last cache."""
    return sum(p.numel() * p.element_size() for p in model.parameters()) > last_level_cache_bytes()


def _block_views(weight: torch.Tensor, bias: torch.Tensor | None,
                 n_blocks: int = BLOCKS) -> tuple[torch.Tensor, torch.Tensor | None]:
    """W (out, in) as ``n_blocks`` blocks of rows (n_blocks, out / n_blocks, in), and b (out,) as
    (n_blocks, out / n_blocks, 1) or None: views, no copy."""
    per_block = weight.shape[0] // n_blocks
    bias_blocks = None if bias is None else bias.view(n_blocks, per_block, 1)
    return weight.view(n_blocks, per_block, weight.shape[1]), bias_blocks


def _product_on_blocks(x: torch.Tensor, blocks: torch.Tensor, bias_blocks: torch.Tensor | None) -> torch.Tensor:
    """x (..., in) @ Wᵀ + b as W xᵀ (+ b), W's row blocks (n_blocks, per_block, in) multiplied as one batch ->
    (..., out)."""
    n_blocks, per_block, n_in = blocks.shape
    rows = x.numel() // n_in
    x = x.contiguous()  # (itself when it is already)
    columns = x.as_strided((n_blocks, n_in, rows), (0, 1, n_in))  # xᵀ, shared by every block (bmm's fast
    # layout for it: strides (0, 1, 1) for one row took 5x as long)
    if bias_blocks is None:
        y = torch.bmm(blocks, columns)  # (n_blocks, per_block, rows)
    else:
        y = torch.baddbmm(bias_blocks, blocks, columns)  # the bias added inside the product
    if rows > 1:  # (rows, out), rows apart: attention, GELU and the rest read it in their fast layout (a
        # column-major (rows, out) sent batches to math attention); one row is that layout already
        y = y.view(n_blocks * per_block, rows).t().contiguous()
    return y.view(*x.shape[:-1], n_blocks * per_block)


def _blocked_matvec(flat: torch.Tensor, weight: torch.Tensor, n_blocks: int = BLOCKS) -> torch.Tensor:
    """flat (rows, in) @ weightᵀ as W xᵀ, W's rows in ``n_blocks`` blocks multiplied as one batch -> (rows, out)."""
    n_out = weight.shape[0]
    split = n_blocks * (n_out // n_blocks)  # rows of W in the blocks; the last n_out % n_blocks rows go alone
    y = _product_on_blocks(flat, *_block_views(weight if split == n_out else weight[:split], None, n_blocks))
    if split < n_out:
        y = torch.cat([y, F.linear(flat, weight[split:])], dim=1)
    return y


def _route_pays(rows: int, weight: torch.Tensor, streamed: bool = False) -> bool:
    """Whether the route beats ``F.linear`` for this shape on this machine (measured once). ``streamed``: timed
    on copies of the weight that together exceed twice the last cache, so each call reads one from memory."""
    n_out, n_in = weight.shape
    where = (", streamed" if streamed else "") + (", huge pages" if pages.holds(weight) else "")

    def ways() -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]:
        probe = torch.zeros(rows, n_in)
        working_set = min(2 * last_level_cache_bytes(), STREAM_BYTES_MAX) if streamed else 0
        copies = max(1, math.ceil(working_set / (weight.numel() * weight.element_size())))
        # each way reads its own copies (written, so real pages, and paged as the weight is): one way must not
        # find in the cache the weight the other way has just read
        weights = [[weight, *pages.copies(weight, copies - 1)]]
        if streamed:
            weights.append(pages.copies(weight, copies))
        turn = [0, 0]

        def next_weight(side: int) -> torch.Tensor:
            turn[side] = (turn[side] + 1) % copies
            return weights[side % len(weights)][turn[side]]

        return lambda: F.linear(probe, next_weight(0)), lambda: _blocked_matvec(probe, next_weight(1))

    return choose(f"linear few-row route: {rows} x {n_in} -> {n_out}{where}", ways)

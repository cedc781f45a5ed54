"""Decoding choices a caller asks for (generation asks): the few-row product in the model's linear layers,
attention kernels off cuDNN on a GPU, and fixed-shape steps (:class:`StaticSteps`) a CUDA graph can replay.
Each runs inside the model's own forward (a flag its modules read); no forward is replaced."""

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from ..models.head import OutputHead
from ..nn.linear import Linear
from ..nn.taps import Tap
from .linear import FewRowProduct, streams


@contextlib.contextmanager
def few_row_products(model: nn.Module) -> Iterator[None]:
    """Within the block, ``model``'s :class:`~glassformer.nn.linear.Linear` layers and output head compute their
    products by one :class:`.linear.FewRowProduct` (the route where it was measured faster for a one-token
    step's shapes, else ``F.linear``); each layer's ``product`` is restored afterwards. Results equal the
    model's up to float32 rounding."""
    layers = [m for m in model.modules() if isinstance(m, (Linear, OutputHead))]
    before = [m.product for m in layers]
    product = FewRowProduct(streams(model))
    try:
        for m in layers:
            m.product = product
        yield
    finally:
        for m, was in zip(layers, before, strict=True):
            m.product = was


def decoding_attention(device: torch.device | str) -> contextlib.AbstractContextManager[object]:
    """A ``with`` block in which fused attention on a CUDA ``device`` uses flash, memory-efficient or math
    attention, not cuDNN; elsewhere a context that does nothing."""
    if torch.device(device).type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


_STATIC_STEPS = ["off"]


def set_static_steps(mode: str) -> str:
    """How decoders run a one-token step of an unpadded batch: "off" (the default, the model's forward on its
    preallocated cache), "static" (:class:`StaticSteps`) or "graphs" (on CUDA, those captured once as a CUDA
    graph); returns the previous mode."""
    from ..errors import GlassformerError

    if mode not in ("off", "static", "graphs"):
        raise GlassformerError(f"mode must be 'off', 'static' or 'graphs', got {mode!r}")
    previous, _STATIC_STEPS[0] = _STATIC_STEPS[0], mode
    return previous


def static_mode() -> str:
    """The mode :func:`set_static_steps` set: "off", "static" or "graphs"."""
    return _STATIC_STEPS[0]


class StaticSteps:
    """One-token decoding steps whose shapes never change, so a CUDA graph (``graphs``, CUDA only) can replay them.

    The model's own forward with ``slot`` (:meth:`TransformerLM.hidden_states`): keys and values written into
    the preallocated ``cache`` at a slot given as a tensor, attention over all ``capacity`` slots with unfilled
    ones masked (the same numbers).
    """

    captured = 0  # CUDA graphs captured in this process

    def __init__(self, model: nn.Module, cache: list, batch: int, *, graphs: bool) -> None:
        self.model, self.cache = model, cache
        device = cache[0].k.device
        self.capacity = cache[0].capacity
        self.ids = torch.zeros(batch, 1, dtype=torch.long, device=device)  # (B, 1)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)  # (1,)
        self.graphs = graphs and device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: torch.Tensor | None = None
        self.steps = 0  # steps taken (tests count them)

    @staticmethod
    def applies(model: nn.Module, cache: list | None, pad: torch.Tensor | None) -> bool:
        """Whether a decoder's step may take fixed shapes now: mode on, a decoder-only model in eval mode, no
        padding, a cache allocated at full size, no ALiBi, no hook attached (a replayed graph would skip it)."""
        if _STATIC_STEPS[0] == "off" or cache is None or pad is not None or model.training:
            return False
        if not hasattr(model, "blocks") or model.embeddings.scheme == "alibi":
            return False
        full = all(layer.capacity == layer.max_len for layer in cache)
        return full and not any(m.hooked for m in model.modules() if isinstance(m, Tap))

    def _run(self) -> torch.Tensor:
        hidden = self.model.hidden_states(self.ids, cache=self.cache, slot=self.slot, check_ids=False)  # (B, 1, d)
        return self.model.logits(hidden)[:, 0].float()  # (B, V)

    def __call__(self, ids: torch.Tensor, slot: int) -> torch.Tensor:
        """Logits (B, V) after feeding ``ids`` (B, 1) at cache slot ``slot`` (the cache's ``length``)."""
        self.ids.copy_(ids)
        self.slot.fill_(slot)
        if self.graphs:
            if self.graph is None:
                self._capture()
            self.graph.replay()
        out = self.out if self.graphs else self._run()
        for layer in self.cache:
            layer.length = slot + 1
        self.steps += 1
        return out.clone()  # the graph's output buffer is overwritten by the next replay

    def _capture(self) -> None:
        """Warm up on a side stream (kernels chosen, workspaces allocated), then record one step."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # each run writes this slot's keys and values again: the same numbers
                self._run()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self._run()
        StaticSteps.captured += 1

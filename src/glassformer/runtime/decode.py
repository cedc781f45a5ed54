"""Decoding choices a caller asks for (generation asks): the few-row product in the model's linear layers,
attention kernels off cuDNN on a GPU, and fixed-shape steps (:class:`StaticSteps`) a CUDA graph can replay or
``torch.compile`` can compile. Each runs inside the model's own forward (a flag its modules read, or the
model's own ``hidden_states`` compiled as it is); no forward is replaced."""

import contextlib
import statistics
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from ..models.head import OutputHead
from ..nn.linear import Linear
from ..nn.taps import Tap
from .linear import MIN_WEIGHT, FewRowProduct, batched_matvec, streams
from .pages import active, move_parameters

_products: "weakref.WeakKeyDictionary[nn.Module, dict[tuple, FewRowProduct]]" = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def few_row_products(model: nn.Module) -> Iterator[None]:
    """Within the block, ``model``'s :class:`~glassformer.nn.linear.Linear` layers and output head compute their
    products by one :class:`.linear.FewRowProduct` (the route where it was measured faster for a one-token
    step's shapes, else ``F.linear``); each layer's ``product`` is restored afterwards. Results equal the
    model's up to float32 rounding. A CPU model whose weights exceed the last cache is first moved into huge pages
    (:mod:`.pages`; once, the same values), where they stream almost twice as fast."""
    streamed, moving = streams(model), active()
    if streamed and moving:
        move_parameters(model)
    layers = [m for m in model.modules()  # a layer too small for the route keeps F.linear, with no lookup a call
              if isinstance(m, OutputHead) or isinstance(m, Linear) and m.weight.numel() >= MIN_WEIGHT]
    before = [m.product for m in layers]
    # one per model and setting (its answers hold for one grad mode, autocast state, thread count, route
    # switch and huge-page switch): a compiled step sees the same object from one call to the next
    setting = (streamed, torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"),
               torch.get_autocast_dtype("cpu"), torch.get_num_threads(), batched_matvec(), moving)
    products = _products.setdefault(model, {})
    product = products.get(setting)
    if product is None:
        product = products[setting] = FewRowProduct(setting[0])
    try:
        for m in layers:
            m.product = product
        yield
    finally:
        for m, was in zip(layers, before, strict=True):
            m.product = was
        product.forget()


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


def decode_step(model: nn.Module, ids: torch.Tensor, cache: list, slot: torch.Tensor) -> torch.Tensor:
    """One fixed-shape step, the model's own forward: logits (B, V) after ids (B, 1) at cache slot ``slot`` (1,)."""
    hidden = model.hidden_states(ids, cache=cache, slot=slot, check_ids=False)  # (B, 1, d)
    return model.logits(hidden)[:, 0].float()  # (B, V)


AUTO_COMPILE_TOKENS = 200_000
"""``compile="auto"`` compiles a model not compiled yet only for at least this many new tokens (rows x new
tokens): compiling *baby*'s step took 119 s on a busy 2-core AMD EPYC (Zen 4) and then saved 0.26 ms of a
4.5 ms token at 1 thread (docs/benchmarks.md, "Decoding at twice Hugging Face")."""
MARGIN = 0.9  # "auto" keeps a compiled step only where it took at most this share of the eager step's time


@dataclass
class Compiled:
    """What this process knows of one model's compiled step: the shapes ((batch, capacity)) compiled, the seconds
    the first compile took and the paired eager / compiled time of one step (> 1: compiled is faster)."""

    shapes: set[tuple[int, int]] = field(default_factory=set)
    compile_s: float = 0.0
    gain: float | None = None


_compiled_step: list[Callable[..., torch.Tensor]] = []  # torch.compile(decode_step), made at the first use
compiled_models: "weakref.WeakKeyDictionary[nn.Module, Compiled]" = weakref.WeakKeyDictionary()


def wants_compiled(model: nn.Module, choice: bool | str, batch: int, capacity: int, new_tokens: int) -> bool:
    """Whether a decoder takes the compiled step: ``choice`` True or False, or "auto": where this process compiled
    this model for these shapes and measured it faster, or where ``batch`` x ``new_tokens`` reach
    :data:`AUTO_COMPILE_TOKENS` (a first compile then pays for itself)."""
    if choice != "auto":
        return bool(choice)
    known = compiled_models.get(model)
    if known is not None and (batch, capacity) in known.shapes:
        return known.gain is None or known.gain >= 1 / MARGIN
    return batch * new_tokens >= AUTO_COMPILE_TOKENS


class StaticSteps:
    """One-token decoding steps whose shapes never change, so a CUDA graph (``graphs``, CUDA only) can replay
    them, or ``torch.compile`` can compile them once for every later step and call (``compiled`` True, or
    "auto": compiled, and left for the eager step where the first compiled one measured slower).

    The model's own forward with ``slot`` (:meth:`TransformerLM.hidden_states`): keys and values written into
    the preallocated ``cache`` at a slot given as a tensor, attention over all ``capacity`` slots with unfilled
    ones masked (the same numbers).
    """

    captured = 0  # CUDA graphs captured in this process

    def __init__(self, model: nn.Module, cache: list, batch: int, *, graphs: bool,
                 compiled: bool | str = False) -> None:
        self.model, self.cache = model, cache
        device = cache[0].k.device
        self.capacity = cache[0].capacity
        self.ids = torch.zeros(batch, 1, dtype=torch.long, device=device)  # (B, 1)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)  # (1,)
        self.graphs = graphs and device.type == "cuda"
        self.compiled = bool(compiled) and not self.graphs
        self.auto = compiled == "auto"  # a compiled step measured slower is left for the eager one
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: torch.Tensor | None = None
        self.steps = 0  # steps taken (tests count them)
        self.taps = [m for m in model.modules() if isinstance(m, Tap)]

    def hooked(self) -> bool:
        """Whether a function was attached to one of the model's taps since: the ordinary step then runs it."""
        return any(tap.fn is not None for tap in self.taps)

    @staticmethod
    def applies(model: nn.Module, cache: list | None, pad: torch.Tensor | None, compiled: bool = False) -> bool:
        """Whether a decoder's step may take fixed shapes now: mode on (or ``compiled`` asked), a decoder-only
        model in eval mode, no padding, a cache allocated at full size, no ALiBi, no hook attached (a replayed
        graph or a compiled step would skip it)."""
        if (_STATIC_STEPS[0] == "off" and not compiled) or cache is None or pad is not None or model.training:
            return False
        if not hasattr(model, "blocks") or model.embeddings.scheme == "alibi":
            return False
        full = all(layer.capacity == layer.max_len for layer in cache)
        return full and not any(m.hooked for m in model.modules() if isinstance(m, Tap))

    def _run(self) -> torch.Tensor:
        return decode_step(self.model, self.ids, self.cache, self.slot)

    def _run_compiled(self) -> torch.Tensor:
        """The compiled step; the first one for these shapes compiles it and times it against the eager step."""
        if not _compiled_step:
            _compiled_step.append(torch.compile(decode_step, fullgraph=True))
        known = compiled_models.setdefault(self.model, Compiled())
        shape = (self.ids.shape[0], self.capacity)
        if shape in known.shapes:
            return _compiled_step[0](self.model, self.ids, self.cache, self.slot)
        eager = self._run()  # eager first: kernel choices (the few-row route) are measured outside the trace
        start = time.perf_counter()
        try:
            out = _compiled_step[0](self.model, self.ids, self.cache, self.slot)  # writes the slot again: same numbers
        except Exception:  # no C compiler, a graph torch cannot trace...: asked for, the error; "auto", eager
            if not self.auto:
                raise
            known.shapes.add(shape)
            known.gain, self.compiled = 0.0, False
            return eager
        known.compile_s = known.compile_s or time.perf_counter() - start
        known.shapes.add(shape)
        known.gain = self._gain()
        self.compiled = not self.auto or known.gain >= 1 / MARGIN
        return out

    def _gain(self, pairs: int = 5, steps: int = 4) -> float:
        """Paired eager / compiled seconds of ``steps`` steps at this slot (each writes the same keys again)."""
        ratios = []
        for _ in range(pairs):
            times = []
            for run in (self._run, lambda: _compiled_step[0](self.model, self.ids, self.cache, self.slot)):
                start = time.perf_counter()
                for _ in range(steps):
                    run()
                times.append(time.perf_counter() - start)
            ratios.append(times[0] / times[1])
        return statistics.median(ratios)

    def __call__(self, ids: torch.Tensor, slot: int) -> torch.Tensor:
        """Logits (B, V) after feeding ``ids`` (B, 1) at cache slot ``slot`` (the cache's ``length``)."""
        self.ids.copy_(ids)
        self.slot.fill_(slot)
        if self.graphs:
            if self.graph is None:
                self._capture()
            self.graph.replay()
            out = self.out.clone()  # the graph's output buffer is overwritten by the next replay
        else:
            out = self._run_compiled() if self.compiled else self._run()
        for layer in self.cache:
            layer.length = slot + 1
        self.steps += 1
        return out

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

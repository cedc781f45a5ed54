"""Weights in transparent huge pages (Linux), for decoding on a CPU.

A one-token decoding step reads every weight once, and a model larger than the CPU's last cache reads them
from memory. In ordinary 4 KB pages that read stops at every page for a TLB miss: on a 2-core AMD EPYC (Zen 4)
one core summed a large tensor at 17 GB/s in 4 KB pages and at 31 GB/s in 2 MB pages, and *baby*'s greedy
decoding at one thread went from 3.4-3.7 to 2.6-2.8 ms a token (docs/benchmarks.md, "2026-12-06 (fourth
session): weights in huge pages").

torch allocates in 4 KB pages unless ``THP_MEM_ALLOC_ENABLE=1`` was set before it was imported, so
:func:`move_parameters` gives each parameter of a model a new home: a slice of an anonymous mapping that Linux
is asked to back with huge pages (``madvise(MADV_HUGEPAGE)``). Each parameter stays the same ``nn.Parameter``
object with the same values (optimizers, ties and ``state_dict`` see no change) and keeps a storage of its own
(safetensors sees no shared tensors); only its address changes. Generation asks for it for a model whose
weights exceed the last cache (:func:`glassformer.runtime.decode.few_row_products`); :func:`set_huge_pages`
turns that off. Elsewhere than Linux, or where huge pages are off ("never"), nothing moves.
"""

import collections
import contextlib
import functools
import mmap
from pathlib import Path

import torch
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from ..errors import ArgumentTypeError

HUGE_PAGE = 2 << 20  # bytes in one transparent huge page on x86-64 (and arm64 with 4 KB pages)
ALIGN = 64  # each tensor starts on a cache line
ARENA_BYTES = 64 << 20  # parameters are moved this many bytes at a time (the most memory held twice at once)
SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")

_enabled = True
_moved = WeakIdKeyDictionary()  # parameter -> its address after the move


def set_huge_pages(enabled: bool) -> bool:
    """Let generation move a model's weights into huge pages (the default) or not; returns the previous setting."""
    global _enabled
    if not isinstance(enabled, bool):
        raise ArgumentTypeError(f"enabled must be a bool, got {type(enabled).__name__}")
    previous, _enabled = _enabled, enabled
    return previous


@functools.cache
def available() -> bool:
    """Whether this process can ask for transparent huge pages: Linux's ``madvise`` is there and the kernel's
    setting is "always" or "madvise" (not "never"; read once per process)."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        return "[never]" not in SETTING.read_text(encoding="ascii")
    except OSError:
        return False


def active() -> bool:
    """Whether generation moves weights now: :func:`set_huge_pages` on and :func:`available`."""
    return _enabled and available()


def _mapping(nbytes: int) -> tuple[mmap.mmap, int]:
    """An anonymous private mapping advised for huge pages with room for ``nbytes`` from its first 2 MB boundary,
    and that boundary's offset. Pages are committed only when first written."""
    mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(OSError):  # refused (a kernel without them): ordinary pages, the same memory
        mapping.madvise(mmap.MADV_HUGEPAGE)
    address = torch.frombuffer(mapping, dtype=torch.uint8, count=1).data_ptr()
    return mapping, -address % HUGE_PAGE


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def empty(numel: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A new 1-D CPU tensor of ``numel`` elements (values unset) in memory advised for huge pages where
    :func:`available`, else ``torch.empty``'s."""
    if not available():
        return torch.empty(numel, dtype=dtype)
    mapping, start = _mapping(numel * dtype.itemsize)
    return torch.frombuffer(mapping, dtype=dtype, count=numel, offset=start)


def holds(t: torch.Tensor) -> bool:
    """Whether ``t`` is a parameter :func:`move_parameters` moved into huge pages (and still there)."""
    return _moved.get(t) == t.data_ptr()


def copies(t: torch.Tensor, n: int) -> list[torch.Tensor]:
    """``n`` copies of ``t`` in the kind of memory it lives in: huge pages where :func:`holds`, else ``clone``'s
    (timings of a weight's reading read copies paged as it is)."""
    if n <= 0 or not holds(t):
        return [t.clone() for _ in range(n)]
    step = _aligned(t.numel() * t.element_size()) // t.element_size()
    flat = empty(step * n, t.dtype)
    return [flat[i * step:i * step + t.numel()].view(t.shape).copy_(t) for i in range(n)]


def _movable(model: nn.Module) -> list[nn.Parameter]:
    """``model``'s dense CPU parameters (plain tensors: not a subclass such as a sharded one, nor one made under
    inference mode, whose data cannot be swapped) that own their storage alone and are not in huge pages yet. A
    parameter that shares its storage (a view, or two parameter objects on one storage) is left where it is, so
    the sharing holds."""
    params = [p for p in model.parameters() if not holds(p)
              and type(p.data) is torch.Tensor and p.layout == torch.strided and not p.is_inference()]
    owners = collections.Counter(p.untyped_storage().data_ptr() for p in params)
    return [p for p in params
            if p.device.type == "cpu" and p.is_contiguous()
            and p.storage_offset() == 0 and p.untyped_storage().nbytes() == p.numel() * p.element_size()
            and owners[p.untyped_storage().data_ptr()] == 1 and p.numel() > 0]


def move_parameters(model: nn.Module) -> int:
    """Give each CPU parameter of ``model`` a new home in memory advised for huge pages, in the order of
    ``model.parameters()`` (a decoding step's reading order); returns how many moved. The same parameter
    objects with the same values, each on a storage of its own; parameters moved before are skipped, so a second
    call costs a look at each. A tensor taken as a view of a parameter before the move no longer follows it.
    Nothing moves where huge pages are not :func:`available`."""
    if not available():
        return 0
    todo = _movable(model)
    moved = 0
    while todo:  # one mapping per ARENA_BYTES of parameters
        group, size = [], 0
        while todo and (not group or size + _aligned(todo[0].numel() * todo[0].element_size()) <= ARENA_BYTES):
            group.append(todo.pop(0))
            size += _aligned(group[-1].numel() * group[-1].element_size())
        mapping, offset = _mapping(size)
        with torch.inference_mode(False), torch.no_grad():  # generation moves them under inference mode: the
            # parameters must stay ordinary tensors (an inference tensor cannot be trained)
            for p in group:
                home = torch.frombuffer(mapping, dtype=p.dtype, count=p.numel(), offset=offset).view(p.shape)
                home.copy_(p)
                p.data = home
                _moved[p] = p.data_ptr()
                offset += _aligned(p.numel() * p.element_size())
        moved += len(group)
    return moved

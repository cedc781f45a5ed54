"""Lower bounds of the memory a model, a training step, a beam search or a similarity matrix needs, checked before
allocating against ``max_memory`` or the least of MemAvailable, the cgroup limit left and the ``ulimit -v`` room."""

import contextlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ModelConfig
from ..errors import GlassformerError, OutOfMemoryError
from .checks import is_number, shown

FLOAT = 4  # bytes of a float32
MAX_SIMILARITY_TEXTS = 4096  # --similarity prints an N x N matrix: 16.7M numbers at most

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(value: Any, name: str = "--max_memory") -> int:
    """Bytes from ``8GB``, ``512MiB``, ``1.5e9`` or an int; an error naming ``name`` otherwise."""
    number, unit = 0, ""
    if is_number(value):
        number = value
    elif isinstance(value, str) and len(value) <= 64 and \
            (match := re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", value)):
        with contextlib.suppress(ValueError):  # "1.2.3"
            number, unit = float(match.group(1)), match.group(2).lower()
    if unit not in _UNITS or not 0 < number * _UNITS[unit] <= 2**62:  # false for nan and inf too
        raise GlassformerError(f"{name} must be a size such as 8GB, 512MiB or 2e9 (bytes), got {shown(value)}")
    return int(number * _UNITS[unit])


UNLIMITED = 2**60  # a cgroup v1 limit at or above this (9223372036854771712 by default) means none


def _getrlimit(kind: int) -> tuple[int, int]:
    """The (soft, hard) limit ``kind`` of :func:`resource.getrlimit`."""
    import resource  # Unix only: elsewhere there is no ulimit to read

    return resource.getrlimit(kind)


@dataclass(frozen=True)
class MemorySources:
    """Where the budget reads the memory the process may use (tests point these at fake files)."""

    meminfo: Path = Path("/proc/meminfo")
    cgroup_root: Path = Path("/sys/fs/cgroup")
    self_cgroup: Path = Path("/proc/self/cgroup")
    statm: Path = Path("/proc/self/statm")
    getrlimit: Callable[[int], tuple[int, int]] = _getrlimit
    gpu: bool = True


SOURCES = MemorySources()


@dataclass(frozen=True)
class Room:
    """Bytes the process may still allocate and the limit that bound them (``source``, for a message)."""

    bytes: int
    source: str


def _read_number(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii")[:64].strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def _stat_value(path: Path, key: str) -> int | None:
    with contextlib.suppress(OSError, UnicodeDecodeError), open(path, encoding="ascii") as handle:
        for line in handle:
            words = line.split()
            if words[:1] == [key] and len(words) > 1 and words[1].isdigit():
                return int(words[1])
    return None


def _meminfo_room(sources: MemorySources) -> Room | None:
    kib = _stat_value(sources.meminfo, "MemAvailable:")
    if kib is not None:
        return Room(kib * 1024, "available on this machine")
    if sources.meminfo != SOURCES.meminfo:
        return None  # a test's fake machine: no fallback to the real one
    try:
        return Room(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "available on this machine")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_room(sources: MemorySources) -> Room | None:
    """The least room under the memory limits of the process's cgroup and its parents (inactive page cache free)."""
    try:
        lines = sources.self_cgroup.read_text(encoding="utf-8")[:1 << 16].splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    rooms = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if line.startswith("0::"):  # v2 (alone, or the unified half of a hybrid mount)
            names, bases = ("memory.max", "memory.current", "inactive_file"), \
                (sources.cgroup_root, sources.cgroup_root / "unified")
        elif "memory" in controllers.split(","):  # v1
            names, bases = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"), \
                (sources.cgroup_root / "memory",)
        else:
            continue
        for base in bases:
            folder = base / path.strip("/")
            if not folder.is_dir():
                folder = base  # a container sees its own cgroup at the root, the host's path in /proc
            for level in (folder, *folder.parents):  # up to base
                limit = _read_number(level / names[0])
                if limit is not None and limit < UNLIMITED:
                    used = (_read_number(level / names[1]) or 0) - (_stat_value(level / "memory.stat", names[2]) or 0)
                    rooms.append(Room(max(limit - max(used, 0), 0),
                                      f"left under the container memory limit of {human(limit)} "
                                      f"(cgroup {level / names[0]})"))
                if level == base or base not in level.parents:
                    break
    return min(rooms, key=lambda room: room.bytes, default=None)


def _rlimit_room(sources: MemorySources) -> Room | None:
    try:
        import resource

        soft, _ = sources.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    try:
        pages = int(sources.statm.read_text(encoding="ascii")[:256].split()[0])
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        pages = 0
    size = pages * os.sysconf("SC_PAGE_SIZE")
    reserve = address_reserve()
    return Room(max(soft - size - reserve, 0), f"left under ulimit -v (RLIMIT_AS {human(soft)}, {human(size)} already "
                                               f"mapped, {human(reserve)} kept for threads and libraries)")


LIBRARY_RESERVE = 256 * 10**6  # address space taken after the check by libraries loaded on first use, allocator slack
THREAD_RESERVE = 72 * 10**6  # per compute thread: its stack (8 MB) and its malloc arena (64 MB of address space)


def address_reserve() -> int:
    """Address space a process maps beyond its data once it computes (libraries loaded on first use, each
    thread's stack and malloc arena): it counts against ``ulimit -v`` though little of it becomes memory."""
    threads = os.cpu_count() or 1
    with contextlib.suppress(AttributeError, OSError):
        threads = len(os.sched_getaffinity(0))
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        threads = int(omp)
    if "torch" in sys.modules:  # what the process has set (num_threads applied) wins
        with contextlib.suppress(Exception):
            threads = sys.modules["torch"].get_num_threads()
    return LIBRARY_RESERVE + min(threads, 1024) * THREAD_RESERVE


def check_threads(threads: int, name: str = "num_threads") -> None:
    """Refuse ``threads`` compute threads when their stacks and malloc arenas cannot fit in ``ulimit -v``, or when
    ``ulimit -u`` (RLIMIT_NPROC) cannot start them: the thread library would end the process with no message."""
    room = _rlimit_room(SOURCES)
    need = (threads - 1) * THREAD_RESERVE  # the main thread's are mapped already
    if room is not None and need > room.bytes:
        raise OutOfMemoryError(f"{name}={threads} needs at least {human(need)} of address space (a stack and a malloc "
                               f"arena per thread), more than the {human(room.bytes)} {room.source}; refused before "
                               "starting them: ask for fewer threads")
    soft = -1
    with contextlib.suppress(ImportError, OSError, ValueError, AttributeError):
        import resource

        soft = SOURCES.getrlimit(resource.RLIMIT_NPROC)[0]
        soft = -1 if soft == resource.RLIM_INFINITY else soft
    if 0 <= soft <= threads:
        raise GlassformerError(f"{name}={threads} is more threads than ulimit -u allows this user ({soft}); "
                               "ask for fewer threads")


def memory_room(sources: MemorySources | None = None) -> Room | None:
    """The memory this process may still allocate and the limit that binds it; None when nothing is known."""
    sources = sources or SOURCES
    found = [room for room in (_meminfo_room(sources), _cgroup_room(sources), _rlimit_room(sources)) if room]
    room = min(found, key=lambda r: r.bytes, default=None)
    if sources.gpu:
        with contextlib.suppress(Exception):  # no driver, a busy device: RAM alone decides
            import torch

            if torch.cuda.is_available():  # device properties: no CUDA context is made (mem_get_info would make one)
                gpu = max(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count()))
                if room is None or gpu > room.bytes:
                    room = Room(int(gpu), "of GPU memory")
    return room


def human(n: int) -> str:
    """Bytes for a message: ``3.6 GB``, ``128 TB``, ``1.2e+21 bytes``."""
    for unit, size in (("PB", 10**15), ("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= size:  # 999.7 MB reads "1000 MB", not "1e+03 MB"
            digits = 3 if n < 999.5 * size else 4
            return f"{n / size:.{digits}g} {unit}" if n < 10**4 * size else f"{float(n):.3g} bytes"
    return f"{n} bytes"


def check_fits(need: int, what: str, max_memory: Any = None, held: int = 0) -> None:
    """An OutOfMemoryError when ``need`` bytes (for ``what``) exceed ``max_memory``, else the room left + ``held``."""
    given = max_memory is not None
    room = Room(parse_size(max_memory), "") if given else memory_room()
    needed = need if given else need - held
    if room is not None and needed > room.bytes:
        source = f"--max_memory {human(room.bytes)}" if given else f"{human(room.bytes)} {room.source}"
        beside = " beside what is loaded" if not given and held else ""
        raise OutOfMemoryError(f"{what} needs at least {human(needed)}{beside}, more than the {source}; refused "
                               f"before allocating: make it smaller{' (or raise --max_memory)' if max_memory else ''}")


def param_count(config: ModelConfig) -> int:
    """Weights of the model ``config`` builds (norms and biases left out: a slight underestimate)."""
    c, d = config, config.d_model
    attention = 2 * d * d + 2 * d * c.kv_heads * c.head_dim
    ffn = 0 if c.attn_only else (3 if c.activation in ("swiglu", "geglu") else 2) * d * c.d_ff
    embed = c.vocab_size * d * (1 if c.tie else 2) + c.n_token_types * d
    if c.pos == "learned":
        embed += (c.max_len + c.pos_offset) * d * (2 if c.split_positions else 1)
    if c.arch == "encoder-decoder":
        return embed + c.n_enc * (attention + ffn) + c.n_dec * (2 * attention + ffn)
    return embed + c.n_layers * (attention + ffn)


def _blocks(config: ModelConfig) -> int:
    return config.n_enc + config.n_dec if config.arch == "encoder-decoder" else config.n_layers


def describe(config: ModelConfig) -> str:
    """The model options an estimate depends on, for a message."""
    c = config
    layers = f"n_enc={shown(c.n_enc)}, n_dec={shown(c.n_dec)}" if c.arch == "encoder-decoder" else \
        f"n_layers={shown(c.n_layers)}"
    return (f"{layers}, d_model={shown(c.d_model)}, d_ff={shown(c.d_ff)}, max_len={shown(c.max_len)}, "
            f"vocab_size={shown(c.vocab_size)}")


def model_bytes(config: ModelConfig) -> int:
    """Bytes of the weights and the position tables built with them (sinusoidal, RoPE) in float32."""
    table = config.max_len * config.d_model if config.pos in ("sinusoidal", "rope") else 0
    return (param_count(config) + table * (2 if config.arch == "encoder-decoder" else 1)) * FLOAT


def training_bytes(config: ModelConfig, batch_size: int, block_size: int, grad_accum: int = 1,
                   processes: int = 1, sharded: bool = False, moments: int = 2) -> int:
    """At least what one process of training takes: weights, gradients and the optimizer's ``moments`` (AdamW: 2;
    split over ``processes`` when ``sharded``), and per micro-batch position the kept activations and logits."""
    rows = max(batch_size // (grad_accum * processes), 1)  # grad_accum and processes: >= 1 (the config, torchrun)
    tokens = rows * block_size
    # per block: the kept activations, and each head's attention row (measured: CPU attention keeps them)
    per_token = _blocks(config) * (6 * config.d_model + 2 * config.d_ff + config.n_heads * block_size) + \
        2 * config.vocab_size
    state = (1 + moments) * model_bytes(config) // (processes if sharded else 1)
    return model_bytes(config) + state + tokens * per_token * FLOAT


def forward_bytes(config: ModelConfig, rows: int, length: int) -> int:
    """At least what a forward pass without gradients over ``rows`` x ``length`` positions takes."""
    per_token = 4 * config.d_model + config.d_ff + config.vocab_size
    return model_bytes(config) + rows * length * per_token * FLOAT


def generation_bytes(config: ModelConfig, rows: int, length: int) -> int:
    """At least what generating ``length`` positions for ``rows`` sequences takes: weights, KV cache, logits."""
    blocks = config.n_dec if config.arch == "encoder-decoder" else config.n_layers
    cache = rows * blocks * 2 * length * config.kv_heads * config.head_dim
    return model_bytes(config) + (cache + rows * config.vocab_size) * FLOAT


def check_training_fits(config: ModelConfig, batch_size: int, block_size: int, grad_accum: int = 1,
                        max_memory: Any = None, processes: int = 1, sharded: bool = False, moments: int = 2) -> None:
    """Refuse a training run (:func:`training_bytes`) that cannot fit in one process's budget."""
    check_fits(training_bytes(config, batch_size, block_size, grad_accum, processes, sharded, moments),
               f"training {describe(config)} with batch_size={shown(batch_size)}, block_size={shown(block_size)}"
               f"{f', grad_accum={grad_accum}' if grad_accum > 1 else ''}", max_memory)


def check_evaluation_fits(config: ModelConfig, eval_batch_size: int, rows: int, block_size: int,
                          max_memory: Any = None, processes: int = 1, sharded: bool = False) -> None:
    """Refuse a training run whose evaluation (a forward pass beside the training state) cannot fit."""
    state = 2 * model_bytes(config) // (processes if sharded else 1)
    check_fits(forward_bytes(config, rows, block_size) + state,
               f"evaluating {describe(config)} with --eval_batch_size {shown(eval_batch_size)} "
               f"({rows:,} validation rows of block_size={shown(block_size)})", max_memory)


def probe_bytes(config: ModelConfig, rows: int, length: int, residuals: bool = False) -> int:
    """:func:`forward_bytes` plus every layer's attention patterns and (``residuals``) residual streams."""
    layers = _blocks(config)
    kept = layers * config.n_heads * length * length + (layers + 1) * length * config.d_model * residuals
    return forward_bytes(config, rows, length) + rows * kept * FLOAT


def sae_bytes(d_in: int, d_sae: int, batch_size: int, buffer_size: int, eval_rows: int = 0) -> int:
    """At least what training a sparse autoencoder takes: weights, gradients and Adam's two moments, the buffer,
    and the larger of a step (two weight-sized temporaries, the batch's features) and the final evaluation's
    features (``eval_rows``: the positions of one model batch, encoded at once)."""
    weights = 2 * d_in * d_sae + d_sae + d_in
    step = 2 * d_in * d_sae + 2 * batch_size * d_sae
    return (4 * weights + max(step, 2 * eval_rows * d_sae) + buffer_size * d_in) * FLOAT + 8 * d_sae


def check_similarity_fits(count: int, max_memory: Any = None) -> None:
    """Refuse ``--similarity`` over ``count`` texts when the N x N matrix (and its printout) is too large."""
    if count > MAX_SIMILARITY_TEXTS:
        raise OutOfMemoryError(f"--similarity prints an N x N matrix: {count:,} texts make {count * count:,} "
                               f"numbers; give at most {MAX_SIMILARITY_TEXTS:,} texts")
    check_fits(count * count * 40, f"--similarity over {count:,} texts", max_memory)

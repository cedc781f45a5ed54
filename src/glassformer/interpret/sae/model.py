"""The sparse autoencoder itself: encode an activation into many sparse features, decode it back.

    f = act(((x · s) − b_dec) W_enc + b_enc)          (d_sae,) features, mostly zero
    x̂ = (f W_dec + b_dec) / s                         (d_in,) the reconstruction

``s`` (``input_scale``) makes ‖x·s‖ average √d_in. act is ReLU ("relu") or keeps the k largest ("topk").
SAELens's parameter names and layouts; saved as ``sae.safetensors`` + ``sae.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from ...errors import BadFileError, GlassformerError, MissingFileError
from ...io.checks import check_inside, check_int, shown
from ...io.fileio import atomic_directory, rust_path, shown_text
from ...io.loaders import load_json
from ...io.safetensors_header import DTYPES, read_header
from ...validate import check_fields, option

KINDS = ("relu", "topk")
WEIGHTS, CONFIG = "sae.safetensors", "sae.json"
SAE_FILES = frozenset({WEIGHTS, CONFIG})
"""Every file :func:`save_sae` writes (the ownership rule's names for an SAE folder)."""
FORMAT = "glassformer-sae/1"  # sae.json's "format": how a folder is recognised as an SAE glassformer wrote
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")  # the safetensors dtypes a weights file may hold
MAX_WIDTH = 1 << 20  # widths above this are not an SAE (or transcoder) one trains here (and would allocate too much)


@dataclass
class SAEConfig:
    """What defines an SAE (``sae.json`` holds it): ``d_in`` the activation's width (its last axes
    flattened), ``d_sae`` features, ``kind`` "relu" or "topk" (``k`` features per token), the ``hook`` it
    reads, and ``input_scale`` applied before encoding."""

    d_in: int = option(ge=1, le=MAX_WIDTH)
    d_sae: int = option(ge=1, le=MAX_WIDTH)
    kind: str = option("topk", choices=KINDS)
    k: int = option(32, ge=1)
    hook: str = ""
    input_scale: float = option(1.0, gt=0.0)

    def __post_init__(self) -> None:
        check_fields(self)
        check_int("k", self.k, 1, self.d_sae)


class SparseAutoencoder(nn.Module):
    """A ReLU or TopK sparse autoencoder from an :class:`SAEConfig` or its fields as keywords
    (``SparseAutoencoder(d_in=128, d_sae=1024, kind="topk", k=16)``). Starts with unit-norm random decoder
    rows, the encoder their transpose x 0.1, zero biases.
    """

    def __init__(self, config: SAEConfig | None = None, **fields_: Any):
        super().__init__()
        self.config = config or SAEConfig(**fields_)
        d_in, d_sae = self.config.d_in, self.config.d_sae
        W_dec = torch.randn(d_sae, d_in)
        W_dec /= W_dec.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(W_dec)  # (d_sae, d_in): row i is feature i's direction
        self.W_enc = nn.Parameter(W_dec.t() * 0.1)  # (d_in, d_sae): small, so the first reconstructions are too
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.b_dec = nn.Parameter(torch.zeros(d_in))

    @property
    def hook(self) -> str:
        """The hook point this SAE reads."""
        return self.config.hook

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_in) activations -> (..., d_sae) encoder outputs before the activation function."""
        return (x * self.config.input_scale - self.b_dec) @ self.W_enc + self.b_enc

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        """Pre-activations -> features: ReLU, or for "topk" the k largest kept (ReLU'd), the rest zero."""
        if self.config.kind == "relu":
            return torch.relu(pre)
        values, indices = pre.topk(self.config.k, dim=-1, sorted=False)  # (..., k)
        return torch.zeros_like(pre).scatter(-1, indices, torch.relu(values))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_in) activations -> (..., d_sae) sparse features."""
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[-1] != self.config.d_in:
            raise GlassformerError(f"this SAE reads activations of width d_in={self.config.d_in} "
                                   f"({self.config.hook or 'no hook'}), got {shown(x)}")
        return self.activate(self.pre_activations(x))

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """(..., d_sae) features -> (..., d_in) reconstruction, in the activations' own units."""
        return (f @ self.W_dec + self.b_dec) / self.config.input_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The reconstruction of ``x`` (..., d_in) -> (..., d_in)."""
        return self.decode(self.encode(x))

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Put every decoder row back at unit norm (after an optimiser step)."""
        self.W_dec /= self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)

    @torch.no_grad()
    def remove_parallel_gradient(self) -> None:
        """Drop the part of W_dec's gradient along each row (it would only change the row's norm)."""
        if self.W_dec.grad is not None:
            rows = self.W_dec / self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
            self.W_dec.grad -= (self.W_dec.grad * rows).sum(1, keepdim=True) * rows

    def __repr__(self) -> str:
        c = self.config
        kind = f"topk k={c.k}" if c.kind == "topk" else "relu"
        return f"SparseAutoencoder({c.hook or 'no hook'}: {c.d_in} -> {c.d_sae} features, {kind})"


def identity_sae(d_in: int, hook: str = "") -> SparseAutoencoder:
    """A ReLU SAE that reconstructs every input exactly: 2·d_in features, x = ReLU(x) − ReLU(−x)."""
    sae = SparseAutoencoder(d_in=d_in, d_sae=2 * d_in, kind="relu", k=1, hook=hook)
    eye = torch.eye(d_in)
    with torch.no_grad():
        sae.W_enc.copy_(torch.cat([eye, -eye], dim=1))
        sae.W_dec.copy_(torch.cat([eye, -eye], dim=0))  # the biases start at zero
    return sae


def _write(folder: Path, sae: SparseAutoencoder, info: dict[str, Any] | None) -> None:
    """sae.safetensors and sae.json into ``folder``."""
    weights = {name: p.detach().to("cpu").contiguous() for name, p in sae.named_parameters()}
    with rust_path(folder / WEIGHTS, write=True) as name_for_rust:
        save_file(weights, name_for_rust, metadata={"format": "pt"})
    meta = {"format": FORMAT, **asdict(sae.config), "info": info or {}}
    (folder / CONFIG).write_text(shown_text(json.dumps(meta, indent=2, ensure_ascii=False)) + "\n", encoding="utf-8")


def is_sae_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder that glassformer wrote with :func:`save_sae` (its sae.json says so)."""
    try:
        _read_meta(Path(path))
    except GlassformerError:
        return False
    return True


def save_sae(sae: SparseAutoencoder, path: str | Path, info: dict[str, Any] | None = None) -> Path:
    """Write ``sae`` as the folder ``path`` (``sae.safetensors`` + ``sae.json`` with the JSON-able ``info``),
    atomically; an existing folder is replaced only when it is an SAE folder glassformer wrote."""
    path = Path(path)
    if path.exists() and not is_sae_folder(path):
        raise GlassformerError(f"{str(path)!r} exists and is not an SAE folder glassformer wrote; "
                               "choose another place (it was left untouched)")
    with atomic_directory(path, SAE_FILES) as temp:
        _write(temp, sae, info)
    return path


def read_sae_info(path: str | Path) -> dict[str, Any]:
    """The ``info`` mapping saved with the SAE at ``path`` ({} when none)."""
    return dict(_read_meta(Path(path)).get("info") or {})


def _read_meta(path: Path) -> dict[str, Any]:
    if not path.is_dir():
        raise MissingFileError(f"SAE folder {str(path)!r} does not exist")
    file = check_inside(path, CONFIG)
    if not file.is_file():
        raise MissingFileError(f"{str(path)!r} has no {CONFIG} (is it an SAE folder written by glassformer?)")
    meta = load_json(file, "SAE config")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise BadFileError(f"{file} is not a glassformer SAE config (its format must be {FORMAT!r})")
    return meta


def load_sae(path: str | Path, map_location: str | torch.device = "cpu") -> SparseAutoencoder:
    """Read an SAE written by :func:`save_sae` (or the ``sae/`` folder inside a ``glassformer sae`` run);
    BadFileError for a config and weights that do not fit each other, or NaN/inf."""
    path = Path(path)
    if not (path / CONFIG).exists() and (path / "sae" / CONFIG).exists():
        path = path / "sae"
    meta = _read_meta(path)
    known = {f.name for f in fields(SAEConfig)}
    try:
        config = SAEConfig(**{k: v for k, v in meta.items() if k in known})
    except (GlassformerError, TypeError) as error:
        raise BadFileError(f"{path / CONFIG}: {error}") from None
    d_in, d_sae = config.d_in, config.d_sae
    expected = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
    weights = read_tensors(check_inside(path, WEIGHTS), expected)
    sae = SparseAutoencoder(config)
    sae.load_state_dict(weights)
    return sae.to(map_location).eval()


def read_tensors(file: Path, expected: dict[str, tuple[int, ...]], optional: Collection[str] = (),
                 ignored: Collection[str] = ()) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors ``file`` as float32, once its header matched ``expected`` ({name: shape};
    names in ``optional`` may be absent, names in ``ignored`` are skipped): names, shapes, float dtypes and the
    file's size are checked before anything is read, then the values (finite); a BadFileError naming the file."""
    if not file.is_file():
        raise MissingFileError(f"file {str(file)!r} does not exist")
    header = {name: spec for name, spec in read_header([file]).items() if name not in ignored}
    unknown = sorted(set(header) - set(expected))
    missing = sorted(set(expected) - set(header) - set(optional))
    if unknown or missing:
        raise BadFileError(f"{file}: " + (f"unexpected tensor {unknown[0]!r}" if unknown else
                                          f"missing tensor {missing[0]!r}") + f" (expected {sorted(expected)})")
    size = 0
    for name, (shape, dtype) in header.items():
        if shape != expected[name]:
            raise BadFileError(f"{file}: {name} has shape {shape}, expected {expected[name]}")
        if dtype not in FLOAT_DTYPES:
            raise BadFileError(f"{file}: {name} has dtype {dtype}, expected a float ({', '.join(FLOAT_DTYPES)})")
        size += math.prod(shape) * DTYPES.get(dtype).itemsize
    if size > file.stat().st_size:
        raise BadFileError(f"{file}: its header describes {size:,} bytes of tensors in a "
                           f"{file.stat().st_size:,}-byte file (truncated or crafted)")
    try:
        with rust_path(file) as name_for_rust:
            tensors = load_file(name_for_rust)
    except (SafetensorError, OSError) as error:
        raise BadFileError(f"{file} is not a readable safetensors file ({error})") from None
    for name in header:
        if not bool(torch.isfinite(tensors[name]).all()):
            raise BadFileError(f"{file}: {name} holds NaN or inf")
    return {name: tensors[name].float() for name in header}


def estimate_input_scale(x: torch.Tensor) -> float:
    """The factor that makes the rows of ``x`` (N, d_in) average a norm of √d_in (1.0 for all-zero x)."""
    mean_norm = float(x.float().norm(dim=-1).mean())
    return math.sqrt(x.shape[-1]) / mean_norm if mean_norm > 0 and math.isfinite(mean_norm) else 1.0

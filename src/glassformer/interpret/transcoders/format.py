"""circuit-tracer's local transcoder folder, read and written as plain tensors per layer.

A folder holds ``config.yaml`` and safetensors files, laid out as circuit-tracer 0.5.0 reads them, so the
same folder serves ``circuit_tracer`` and glassformer:

- per-layer transcoders (PLT, ``model_kind: transcoder_set``): ``layer_{i}.safetensors`` with ``W_enc``
  (d_tc, d), ``b_enc`` (d_tc,), ``W_dec`` (d_tc, d), ``b_dec`` (d,), optional ``W_skip`` (d, d) (applied as
  ``x @ W_skip.T``) and ``activation_function.threshold`` (d_tc,) for JumpReLU;
- cross-layer transcoders (CLT, ``model_kind: cross_layer_transcoder``): ``W_enc_{i}.safetensors`` with
  ``W_enc_{i}`` (d_tc, d), ``b_enc_{i}``, ``b_dec_{i}``, optional ``threshold_{i}``, and
  ``W_dec_{i}.safetensors`` with ``W_dec_{i}`` (d_tc, n_layers - i, d): layer i's features write to the
  MLP outputs of layers i..n_layers-1.

``config.yaml`` names ``feature_input_hook`` / ``feature_output_hook`` (TransformerLens names inside a block,
such as ``ln2.hook_normalized`` and ``hook_mlp_out``), ``activation`` (``relu``, ``topk`` with ``k``;
JumpReLU is told by its thresholds) and, for a PLT, ``transcoders:`` (file names inside the folder).
Every tensor is checked (names, shapes, dtypes from the header, before anything is read; finite values)
and a folder that does not fit gets one :class:`BadFileError` line.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...errors import BadFileError, GlassformerError, MissingFileError
from ...io.checks import check_inside
from ...io.fileio import atomic_directory, claim_outputs, rust_path
from ...io.loaders import load_yaml
from ...io.safetensors_header import read_header
from ..sae.model import read_tensors

PLT, CLT = "transcoder_set", "cross_layer_transcoder"  # circuit-tracer's model_kind values
KINDS, ACTIVATIONS = ("plt", "clt"), ("relu", "jumprelu", "topk")
CONFIG = "config.yaml"
WRITER = "glassformer"  # config.yaml's ``writer``: a folder glassformer may replace
MAX_LAYERS = 1024
_LAYER_FILE = re.compile(r"layer_(\d+)\.safetensors")
_CLT_FILE = re.compile(r"W_(enc|dec)_(\d+)\.safetensors")


def topk(pre: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest entries of the last axis kept as they are (circuit-tracer's TopK), the rest zero."""
    _, index = pre.topk(k, dim=-1, sorted=False)
    return pre * torch.zeros_like(pre).scatter(-1, index, 1.0)


@dataclass
class LayerTranscoder:
    """One layer's tensors (float32). ``W_dec`` is (d_tc, d) for a PLT and (d_tc, n_layers - layer, d) for a
    CLT (row j of the middle axis writes to layer ``layer + j``); ``W_skip`` (d, d) or None; ``threshold``
    (d_tc,) for JumpReLU or None."""

    W_enc: torch.Tensor
    b_enc: torch.Tensor
    W_dec: torch.Tensor
    b_dec: torch.Tensor
    W_skip: torch.Tensor | None = None
    threshold: torch.Tensor | None = None


@dataclass
class Transcoders:
    """A set of transcoders for every layer of a model.

    Args:
        layers: one :class:`LayerTranscoder` per block, in order.
        kind: ``"plt"`` (per-layer) or ``"clt"`` (cross-layer).
        activation: ``"relu"``, ``"jumprelu"`` (every layer has ``threshold``) or ``"topk"`` (with ``k``).
        feature_input_hook / feature_output_hook: where features read and write, inside block i.
        scan: circuit-tracer's identifier of the set (shown in graphs), or None.
    """

    layers: list[LayerTranscoder]
    kind: str = "plt"
    activation: str = "relu"
    k: int | None = None
    feature_input_hook: str = "ln2.hook_normalized"
    feature_output_hook: str = "hook_mlp_out"
    scan: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # other config.yaml keys, kept as read

    @property
    def n_layers(self) -> int:
        """Blocks covered (one LayerTranscoder each)."""
        return len(self.layers)

    @property
    def d_model(self) -> int:
        """The model's width d."""
        return int(self.layers[0].b_dec.shape[0])

    @property
    def d_transcoder(self) -> int:
        """Features per layer."""
        return int(self.layers[0].b_enc.shape[0])

    @property
    def skip(self) -> bool:
        """Whether the layers have a linear skip connection (W_skip)."""
        return self.layers[0].W_skip is not None

    def encode(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """(..., d) the MLP inputs of ``layer`` -> (..., d_tc) its features (ReLU, JumpReLU or TopK)."""
        weights = self.layers[layer]
        pre = x @ weights.W_enc.T + weights.b_enc
        if self.activation == "relu":
            return torch.relu(pre)
        if self.activation == "jumprelu":
            return pre * (pre > weights.threshold)
        return topk(pre, self.k)

    def check(self, where: str = "transcoders") -> Transcoders:
        """Self (shapes, dtypes and options consistent across layers); a BadFileError naming ``where`` if not."""
        if self.kind not in KINDS:
            raise BadFileError(f"{where}: kind must be 'plt' or 'clt', got {self.kind!r}")
        if self.activation not in ACTIVATIONS:
            raise BadFileError(f"{where}: activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if not 1 <= len(self.layers) <= MAX_LAYERS:
            raise BadFileError(f"{where}: must hold 1 to {MAX_LAYERS} layers, got {len(self.layers)}")
        if self.activation == "topk" and not (type(self.k) is int and 1 <= self.k <= self.d_transcoder):
            raise BadFileError(f"{where}: activation 'topk' needs k, an int from 1 to d_transcoder "
                               f"({self.d_transcoder}), got {self.k!r:.80}")
        for name in ("feature_input_hook", "feature_output_hook"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise BadFileError(f"{where}: {name} must be a hook name such as 'hook_mlp_out', "
                                   f"got {getattr(self, name)!r}")
        for i, layer in enumerate(self.layers):
            expected = _shapes(self.kind, self.n_layers, i, self.d_transcoder, self.d_model)
            expected["W_skip"] = expected["W_skip"] if self.skip else None
            expected["threshold"] = expected["threshold"] if self.activation == "jumprelu" else None
            for name, shape in expected.items():
                tensor = getattr(layer, name)
                got = None if tensor is None else tuple(tensor.shape)
                if got != shape:
                    raise BadFileError(f"{where}: layer {i}'s {name} has shape {got}, expected {shape}")
                if tensor is not None and not (tensor.dtype.is_floating_point and bool(tensor.isfinite().all())):
                    raise BadFileError(f"{where}: layer {i}'s {name} must hold finite floats ({tensor.dtype})")
        if self.kind == "clt" and self.skip:
            raise BadFileError(f"{where}: circuit-tracer's cross-layer folder has no skip connection (W_skip)")
        return self

    def check_model(self, model: torch.nn.Module) -> Transcoders:
        """Self when it fits ``model`` (a TransformerLM: as many blocks, the same width, both hooks present in
        every block); else a GlassformerError naming what differs."""
        check_fits(model, self.n_layers, self.d_model, self.feature_input_hook, self.feature_output_hook)
        return self


def check_fits(model: torch.nn.Module, n_layers: int, d_model: int, input_hook: str, output_hook: str) -> None:
    """A GlassformerError unless ``model`` has ``n_layers`` blocks of width ``d_model`` and both hooks in each."""
    from ..points import hook_points

    config = getattr(model, "config", None)
    have = (getattr(config, "n_layers", None), getattr(config, "d_model", None))
    if have != (n_layers, d_model):
        raise GlassformerError(f"transcoders for {n_layers} layers of width {d_model} do not fit a model of "
                               f"{have[0]} layers of width {have[1]}")
    points = hook_points(model)
    for name in (input_hook, output_hook):
        missing = [i for i in range(n_layers) if f"blocks.{i}.{name}" not in points]
        if missing:
            raise GlassformerError(f"the transcoders' hook {name!r} is not a hook point of block {missing[0]} of "
                                   "this model (e.g. 'ln2.hook_normalized', 'hook_resid_mid', 'hook_mlp_out')")


def _layout(kind: str, i: int) -> dict[str, dict[str, str]]:
    """Layer ``i``'s files as circuit-tracer lays them out: {file name: {LayerTranscoder field: tensor name}}."""
    if kind == "plt":
        return {f"layer_{i}.safetensors": {"W_enc": "W_enc", "b_enc": "b_enc", "W_dec": "W_dec", "b_dec": "b_dec",
                                           "W_skip": "W_skip", "threshold": "activation_function.threshold"}}
    return {f"W_enc_{i}.safetensors": {"W_enc": f"W_enc_{i}", "b_enc": f"b_enc_{i}", "b_dec": f"b_dec_{i}",
                                       "threshold": f"threshold_{i}"},
            f"W_dec_{i}.safetensors": {"W_dec": f"W_dec_{i}"}}


def _shapes(kind: str, n_layers: int, i: int, d_tc: int, d: int) -> dict[str, tuple[int, ...]]:
    """The shape of each LayerTranscoder field of layer ``i`` (W_skip and threshold: when there is one)."""
    dec = (d_tc, d) if kind == "plt" else (d_tc, n_layers - i, d)
    return {"W_enc": (d_tc, d), "b_enc": (d_tc,), "W_dec": dec, "b_dec": (d,), "W_skip": (d, d), "threshold": (d_tc,)}


def _config(tc: Transcoders) -> dict[str, Any]:
    config: dict[str, Any] = {"model_kind": PLT if tc.kind == "plt" else CLT, "writer": WRITER,
                              "feature_input_hook": tc.feature_input_hook,
                              "feature_output_hook": tc.feature_output_hook}
    if tc.scan is not None:
        config["scan"] = tc.scan
    if tc.activation != "jumprelu":
        config["activation"] = tc.activation
    if tc.activation == "topk":
        config["k"] = tc.k
    if tc.kind == "plt":
        config["transcoders"] = [f"layer_{i}.safetensors" for i in range(tc.n_layers)]
    return {**config, **{k: v for k, v in tc.extra.items() if k not in config}}  # other keys last, as read


def _files(tc: Transcoders) -> dict[str, dict[str, torch.Tensor]]:
    """{file name: {tensor name: tensor}} as circuit-tracer's ``to_safetensors`` lays them out."""
    files: dict[str, dict[str, torch.Tensor]] = {}
    for i, layer in enumerate(tc.layers):
        for file, names in _layout(tc.kind, i).items():
            files[file] = {name: getattr(layer, part) for part, name in names.items()
                           if getattr(layer, part) is not None}
    return files


def file_names(tc: Transcoders) -> list[str]:
    """The names :func:`write_transcoder_files` writes for ``tc`` (config.yaml first)."""
    return [CONFIG, *_files(tc)]


def write_transcoder_files(folder: str | Path, tc: Transcoders) -> None:
    """Write ``tc``'s config.yaml and safetensors files into the existing ``folder`` (no atomicity: a caller
    that adds files of its own writes all of them into one :func:`~glassformer.io.fileio.atomic_directory`)."""
    import yaml
    from safetensors.torch import save_file

    tc.check()
    folder = Path(folder)
    claim_outputs([folder / name for name in file_names(tc)], what="transcoder file")  # no link, FIFO, user's file
    for name, tensors in _files(tc).items():
        plain = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in tensors.items()}
        with rust_path(folder / name, write=True) as name_for_rust:
            save_file(plain, name_for_rust, metadata={"format": "pt"})
    text = yaml.safe_dump(_config(tc), sort_keys=False, allow_unicode=True)
    (folder / CONFIG).write_text(text, encoding="utf-8")


def is_transcoder_folder(path: str | Path) -> bool:
    """Whether ``path`` is a transcoder folder glassformer wrote (its config.yaml says ``writer: glassformer``)."""
    try:
        config = load_yaml(Path(path) / CONFIG, "transcoder config")
    except GlassformerError:
        return False
    return isinstance(config, dict) and config.get("writer") == WRITER


def save_transcoders(tc: Transcoders, path: str | Path, names: Collection[str] = ()) -> Path:
    """Write ``tc`` as the folder ``path``, atomically; an existing ``path`` is replaced only when it holds
    nothing but files glassformer wrote there (transcoder files and ``names``: other files such a folder may
    hold), else a NotOursError and nothing is touched."""
    path = Path(path)
    owned = set(file_names(tc)) | set(names)
    if path.is_dir():
        owned |= {p.name for p in path.iterdir() if is_transcoder_file(p.name)}
    with atomic_directory(path, owned) as temp:
        write_transcoder_files(temp, tc)
    return path


def is_transcoder_file(name: str) -> bool:
    """Whether ``name`` is one a transcoder folder's files may have (config.yaml, layer_i, W_enc_i, W_dec_i)."""
    return name == CONFIG or bool(_LAYER_FILE.fullmatch(name) or _CLT_FILE.fullmatch(name))


# --- reading -------------------------------------------------------------------------------------------


def _width(file: Path, name: str, ndim: int) -> tuple[int, ...]:
    """The shape of ``name`` in ``file``'s header, which must have ``ndim`` axes of 1 or more."""
    if not file.is_file():
        raise MissingFileError(f"transcoder file {str(file)!r} does not exist")
    header = read_header([file])
    if name not in header:
        raise BadFileError(f"{file}: missing tensor {name!r}")
    shape = header[name][0]
    if len(shape) != ndim or min(shape) < 1:
        raise BadFileError(f"{file}: {name} has shape {shape}, expected {ndim} axes of length 1 or more")
    return shape


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_dir():
        raise MissingFileError(f"transcoder folder {str(path)!r} does not exist")
    file = path / CONFIG
    config = load_yaml(file, "transcoder config")
    if not isinstance(config, dict):
        raise BadFileError(f"{file} must hold a mapping (model_kind, feature_input_hook, ...)")
    kind = config.get("model_kind")
    if kind not in (PLT, CLT):
        raise BadFileError(f"{file}: model_kind must be {PLT!r} or {CLT!r}, got {kind!r:.80}")
    for key in ("feature_input_hook", "feature_output_hook"):
        if not isinstance(config.get(key), str) or not config[key]:
            raise BadFileError(f"{file}: {key} must be a hook name such as 'hook_mlp_out', got "
                               f"{config.get(key)!r:.80}")
    activation = config.get("activation")
    if activation not in (None, "relu", "topk", "jump_relu", "jumprelu"):
        raise BadFileError(f"{file}: activation must be 'relu', 'topk' or absent (JumpReLU is told by "
                           f"thresholds), got {activation!r:.80}")
    scan = config.get("scan")
    if scan is not None and not isinstance(scan, str):
        raise BadFileError(f"{file}: scan must be a string, got {scan!r:.80}")
    return config


def _plt_files(path: Path, config: dict[str, Any]) -> list[Path]:
    names = config.get("transcoders")
    if names is None:  # circuit-tracer's cache layout: layer_0.safetensors, layer_1.safetensors, ...
        found = sorted(int(m.group(1)) for p in path.iterdir() if (m := _LAYER_FILE.fullmatch(p.name)))
        if found != list(range(len(found))) or not found:
            raise BadFileError(f"{path}: expected layer_0.safetensors ... layer_N.safetensors, found layers {found}")
        names = [f"layer_{i}.safetensors" for i in found]
    if not isinstance(names, list) or not names or len(names) > MAX_LAYERS:
        raise BadFileError(f"{path / CONFIG}: transcoders must list 1 to {MAX_LAYERS} file names, "
                           f"got {names!r:.80}")
    for name in names:
        if isinstance(name, str) and name.startswith("hf://"):
            raise BadFileError(f"{path / CONFIG} names {name!r}, on the Hugging Face hub: glassformer reads only "
                               "local files (download the folder first)")
    return [check_inside(path, name, "transcoder file") for name in names]


def load_transcoders(path: str | Path, model: torch.nn.Module | None = None) -> Transcoders:
    """Read the transcoder folder ``path`` (circuit-tracer's local layout, see the module docstring).

    Args:
        path: the folder holding config.yaml.
        model: when given, the set must fit it (:meth:`Transcoders.check_model`) before tensors are read.

    Returns:
        :class:`Transcoders` with float32 tensors; a BadFileError / MissingFileError naming the file for
        anything that does not fit.
    """
    path = Path(path)
    config = _read_config(path)
    known = {"model_kind", "feature_input_hook", "feature_output_hook", "activation", "k", "scan",
             "transcoders", "writer"}
    kind = "plt" if config["model_kind"] == PLT else "clt"
    if kind == "plt":
        files = [[file] for file in _plt_files(path, config)]
        d_tc, d = _width(files[0][0], "b_enc", 1)[0], _width(files[0][0], "b_dec", 1)[0]
    else:
        n = sum(1 for p in path.iterdir() if (m := _CLT_FILE.fullmatch(p.name)) and m.group(1) == "enc")
        if not 1 <= n <= MAX_LAYERS:
            raise BadFileError(f"{path}: a cross-layer folder holds W_enc_0.safetensors ... W_enc_N.safetensors "
                               f"and as many W_dec_i files; found {n} encoder files")
        files = [[path / name for name in _layout(kind, i)] for i in range(n)]
        d_tc, d = _width(files[0][0], "W_enc_0", 2)
    n_layers = len(files)
    if model is not None:
        check_fits(model, n_layers, d, config["feature_input_hook"], config["feature_output_hook"])
    layers = [_read_layer(files[i], kind, _shapes(kind, n_layers, i, d_tc, d), i) for i in range(n_layers)]
    activation = config.get("activation") or "relu"
    if activation in ("jump_relu", "jumprelu") or layers[0].threshold is not None:
        activation = "jumprelu"
    extra = {k: v for k, v in config.items() if k not in known and isinstance(k, str)}
    # check: every layer has a threshold when JumpReLU, none otherwise, and every shape fits
    return Transcoders(layers, kind, activation, config.get("k"), config["feature_input_hook"],
                       config["feature_output_hook"], config.get("scan"), extra).check(str(path))


def _read_layer(files: list[Path], kind: str, shapes: dict[str, tuple[int, ...]], i: int) -> LayerTranscoder:
    """Layer ``i``'s tensors from its ``files`` (those of :func:`_layout`, in order) of the given ``shapes``."""
    parts: dict[str, torch.Tensor | None] = {}
    for file, names in zip(files, _layout(kind, i).values(), strict=True):
        tensors = read_tensors(file, {name: shapes[part] for part, name in names.items()},
                               optional={names.get("W_skip"), names.get("threshold")},
                               ignored={"k"} if kind == "plt" else ())
        parts.update((part, tensors.get(name)) for part, name in names.items())
    return LayerTranscoder(**parts)


def random_transcoders(n_layers: int, d_model: int, d_transcoder: int, *, kind: str = "plt",
                       activation: str = "relu", k: int | None = None, skip: bool = False, seed: int = 0,
                       scale: float = 1.0, feature_input_hook: str = "ln2.hook_normalized",
                       feature_output_hook: str = "hook_mlp_out") -> Transcoders:
    """Random transcoders (tests, docs, a graph's plumbing before training): encoder rows of norm ``scale``,
    negative-leaning encoder biases so a few features fire, small decoders; deterministic in ``seed``."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    layers = []
    for i in range(n_layers):
        enc = randn(d_transcoder, d_model)
        enc = enc / enc.norm(dim=1, keepdim=True) * scale
        dec_shape = (d_transcoder, d_model) if kind == "plt" else (d_transcoder, n_layers - i, d_model)
        layers.append(LayerTranscoder(
            W_enc=enc, b_enc=randn(d_transcoder) * 0.1 - 0.2 * scale, W_dec=randn(*dec_shape) / d_model ** 0.5,
            b_dec=randn(d_model) * 0.01, W_skip=randn(d_model, d_model) * 0.05 if skip else None,
            threshold=(torch.rand(d_transcoder, generator=g) * 0.2 * scale) if activation == "jumprelu" else None))
    return Transcoders(layers, kind, activation, k, feature_input_hook, feature_output_hook,
                       scan=f"random-{kind}-{seed}").check()

"""A graph's files: ``graph.pt`` as circuit-tracer's ``Graph.to_pt`` writes it (so ``Graph.from_pt`` reads it),
read back without unpickling anything but tensors, plain containers and circuit-tracer's two record types;
and the pruned graph as the JSON its frontend draws."""

from __future__ import annotations

import io
import pickle
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ...errors import BadFileError, MissingFileError
from ...io.checks import first_line
from .graph import Graph

MAX_GRAPH_BYTES = 4 << 30  # a graph file larger than 4 GiB is refused before reading


class LogitTarget(NamedTuple):
    """circuit-tracer's ``LogitTarget`` record (stored in graph files under its name)."""

    token_str: str
    vocab_idx: int


@dataclass
class UnifiedConfig:
    """circuit-tracer's ``UnifiedConfig`` (the model's sizes, stored in graph files under its name)."""

    n_layers: int
    d_model: int
    d_head: int
    n_heads: int
    d_mlp: int
    d_vocab: int
    tokenizer_name: str
    model_name: str
    original_architecture: str
    n_key_value_heads: int | None = None
    dtype: Any | None = None


STORED_AS = {LogitTarget: ("circuit_tracer.attribution.targets", "LogitTarget"),
             UnifiedConfig: ("circuit_tracer.utils.tl_nnsight_mapping", "UnifiedConfig")}


class _Pickler(pickle._Pickler):  # the Python pickler: its save_global can name a class we stand in for
    def save_global(self, obj: Any, name: str | None = None) -> None:
        if obj in STORED_AS:
            module, qualname = STORED_AS[obj]
            self.write(pickle.GLOBAL + f"{module}\n{qualname}\n".encode())
            self.memoize(obj)
            return
        super().save_global(obj, name)


_PICKLE_MODULE = types.SimpleNamespace(Pickler=_Pickler, Unpickler=pickle.Unpickler, __name__="pickle")


def graph_record(graph: Graph, model_name: str = "glassformer") -> dict[str, Any]:
    """The dict circuit-tracer's ``Graph.to_pt`` saves, for ``graph``."""
    c = graph.model_config
    heads = int(c.get("n_heads", 1))
    tokens = graph.logit_strings or [""] * graph.n_logits
    return {
        "input_string": graph.prompt,
        "adjacency_matrix": graph.adjacency_matrix,
        "cfg": UnifiedConfig(graph.n_layers, int(c.get("d_model", 0)), int(c.get("d_model", 0)) // max(heads, 1),
                             heads, int(c.get("d_ff", 0)), graph.vocab_size, model_name, model_name,
                             "GPT2LMHeadModel"),
        "active_features": graph.active_features,
        "logit_targets": [LogitTarget(t, int(i)) for t, i in zip(tokens, graph.logit_ids.tolist(), strict=True)],
        "logit_probabilities": graph.logit_probabilities,
        "vocab_size": graph.vocab_size,
        "input_tokens": graph.input_tokens,
        "selected_features": graph.selected_features,
        "activation_values": graph.activation_values,
        "scan": graph.scan,
    }


def graph_bytes_pt(graph: Graph, model_name: str = "glassformer") -> bytes:
    """``graph.pt``'s bytes (a torch zip; circuit-tracer's ``Graph.from_pt`` reads them)."""
    buffer = io.BytesIO()
    torch.save(graph_record(graph, model_name), buffer, pickle_module=_PICKLE_MODULE)
    return buffer.getvalue()


def save_graph_pt(graph: Graph, path: str | Path, model_name: str = "glassformer") -> Path:
    """Write ``graph`` to ``path`` as circuit-tracer's ``Graph.to_pt`` does, atomically."""
    from ...io.fileio import atomic_write

    atomic_write(path, graph_bytes_pt(graph, model_name))
    return Path(path)


def load_graph_pt(path: str | Path) -> Graph:
    """Read a graph file written by :func:`save_graph_pt` or by circuit-tracer's ``Graph.to_pt``: only
    tensors, plain containers and circuit-tracer's two records are unpickled, and every field is checked
    (shapes that fit each other, indices in range); anything else is one BadFileError line."""
    from ...io.loaders import check_zip_sizes

    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"graph file {str(path)!r} does not exist")
    size = path.stat().st_size
    if size == 0 or size > MAX_GRAPH_BYTES:
        raise BadFileError(f"graph file {str(path)!r} is {size:,} bytes (expected 1 to {MAX_GRAPH_BYTES:,})")
    check_zip_sizes(path)
    allowed = [(cls, ".".join(name)) for cls, name in STORED_AS.items()]
    try:
        with torch.serialization.safe_globals(allowed):
            record = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise BadFileError(f"refused to load {str(path)!r}: it holds objects other than a graph's "
                           f"({first_line(error)})") from None
    except Exception as error:  # noqa: BLE001 (whatever torch.load meets in a damaged file is the file's fault)
        raise BadFileError(f"{str(path)!r} is not a readable graph file ({first_line(error)})") from None
    return _graph_from_record(record, str(path))


def _graph_from_record(record: Any, where: str) -> Graph:
    def bad(message: str) -> BadFileError:
        return BadFileError(f"graph file {where!r}: {message}")

    if not isinstance(record, dict):
        raise bad(f"must hold a dict, got {type(record).__name__}")
    needed = {"input_string", "adjacency_matrix", "cfg", "active_features", "logit_targets", "logit_probabilities",
              "vocab_size", "input_tokens", "selected_features", "activation_values"}
    missing = sorted(needed - set(record))
    if missing:
        raise bad(f"has no {missing[0]!r}")
    cfg = record["cfg"]
    if not isinstance(cfg, UnifiedConfig) or not all(isinstance(getattr(cfg, k, None), int) and
                                                     getattr(cfg, k) >= 0 for k in ("n_layers", "d_model")):
        raise bad("cfg must be circuit-tracer's UnifiedConfig with n_layers and d_model")

    def tensor(name: str, ndim: int, kind: str) -> torch.Tensor:
        value = record[name]
        ok = isinstance(value, torch.Tensor) and value.ndim == ndim and (
            value.dtype.is_floating_point if kind == "float" else not value.dtype.is_floating_point
            and value.dtype != torch.bool)
        if not ok:
            raise bad(f"{name} must be a {ndim}-d {kind} tensor")
        if kind == "float" and not bool(value.isfinite().all()):
            raise bad(f"{name} holds NaN or inf")
        return value

    tokens = tensor("input_tokens", 1, "int").long()
    active = tensor("active_features", 2, "int").long()
    values = tensor("activation_values", 1, "float").float()
    selected = tensor("selected_features", 1, "int").long()
    adjacency = tensor("adjacency_matrix", 2, "float").float()
    probabilities = tensor("logit_probabilities", 1, "float").float()
    targets = record["logit_targets"]
    if isinstance(targets, torch.Tensor):  # circuit-tracer's older files: the ids alone
        targets = [LogitTarget("", int(i)) for i in targets.flatten().tolist()]
    if not isinstance(targets, list) or not all(isinstance(t, tuple) and len(t) == 2 and isinstance(t[0], str)
                                                and isinstance(t[1], int) for t in targets):
        raise bad("logit_targets must be a list of (token string, id) records")
    vocab = record["vocab_size"]
    if not isinstance(vocab, int) or vocab < 1:
        raise bad(f"vocab_size must be a positive int, got {vocab!r:.40}")
    L, T, k = cfg.n_layers, tokens.shape[0], len(targets)
    n = selected.shape[0] + (L + 1) * T + k
    if active.shape[1:] != (3,) or values.shape[0] != active.shape[0]:
        raise bad(f"active_features {tuple(active.shape)} and activation_values {tuple(values.shape)} do not fit")
    if adjacency.shape != (n, n):
        raise bad(f"adjacency_matrix is {tuple(adjacency.shape)}, expected ({n}, {n}) for {selected.shape[0]} "
                  f"features, {L} layers, {T} positions and {k} logits")
    if probabilities.shape != (k,):
        raise bad(f"logit_probabilities has {probabilities.shape[0]} values for {k} logits")
    if selected.numel() and not (int(selected.min()) >= 0 and int(selected.max()) < active.shape[0]):
        raise bad("selected_features indexes outside active_features")
    if active.numel() and not (int(active.min()) >= 0 and int(active[:, 0].max()) < L and
                               int(active[:, 1].max()) < T):
        raise bad("active_features holds a layer or position outside the model and prompt")
    scan = record.get("scan")
    return Graph(prompt=str(record["input_string"]), input_tokens=tokens, active_features=active,
                 activation_values=values, selected_features=selected, adjacency_matrix=adjacency,
                 logit_ids=torch.tensor([t[1] for t in targets], dtype=torch.long), logit_probabilities=probabilities,
                 vocab_size=vocab, n_layers=L, scan=scan if isinstance(scan, str) else None,
                 model_config={"d_model": cfg.d_model, "n_heads": cfg.n_heads, "d_ff": cfg.d_mlp, "n_layers": L,
                               "vocab_size": vocab},
                 logit_strings=[t[0] for t in targets])


NODE_KEYS = ("node_id", "feature", "layer", "ctx_idx", "feature_type", "token_prob", "is_target_logit", "run_idx",
             "reverse_ctx_idx", "jsNodeId", "clerp", "influence", "activation")  # the frontend's Node, in order


def _cantor(x: int, y: int) -> int:
    return (x + y) * (x + y + 1) // 2 + y


def frontend_json(graph: Graph, slug: str = "graph", node_threshold: float = 0.8,
                  edge_threshold: float = 0.98) -> dict[str, Any]:
    """The pruned graph as circuit-tracer's frontend reads it (``create_graph_files``'s ``{slug}.json``)."""
    pruned = graph.prune(node_threshold, edge_threshold)
    scores = pruned.cumulative_scores.tolist()
    token_text = graph.token_strings or [str(int(t)) for t in graph.input_tokens]
    logit_text = graph.logit_strings or [str(int(t)) for t in graph.logit_ids]
    nodes: dict[int, dict[str, Any]] = {}
    logit_start = graph.n_features + (graph.n_layers + 1) * graph.n_pos
    for index in pruned.node_mask.nonzero(as_tuple=True)[0].tolist():
        kind, layer, pos, which = graph.node_kind(index)
        base = {"token_prob": 0.0, "is_target_logit": False, "run_idx": 0, "reverse_ctx_idx": 0, "clerp": "",
                "influence": scores[index], "activation": None}
        if kind == "feature":
            node = {"node_id": f"{layer}_{which}_{pos}", "feature": _cantor(layer, which), "layer": str(layer),
                    "ctx_idx": pos, "feature_type": "cross layer transcoder", "jsNodeId": f"{layer}_{which}-0",
                    "activation": float(graph.activation_values[graph.selected_features[index]])}
        elif kind == "error":
            node = {"node_id": f"0_{layer}_{pos}", "feature": -1, "layer": str(layer), "ctx_idx": pos,
                    "feature_type": "mlp reconstruction error", "jsNodeId": f"{layer}_{pos}-0"}
        elif kind == "token":
            node = {"node_id": f"E_{which}_{pos}", "feature": pos, "layer": "E", "ctx_idx": pos,
                    "feature_type": "embedding", "jsNodeId": f"E_{which}-{pos}"}
        else:
            i = index - logit_start
            p = float(graph.logit_probabilities[i])
            top = str(graph.n_layers + 1)
            node = {"node_id": f"{top}_{which}_{pos}", "feature": which, "layer": top, "ctx_idx": pos,
                    "feature_type": "logit", "token_prob": p, "is_target_logit": i == 0,
                    "jsNodeId": f"L_{which}-{pos}", "clerp": f'Output "{logit_text[i]}" (p={p:.3f})',
                    "influence": None}
        merged = {**base, **node}
        nodes[index] = {key: merged[key] for key in NODE_KEYS}
    targets, sources = pruned.edge_mask.nonzero(as_tuple=True)
    links = [{"source": nodes[s]["node_id"], "target": nodes[t]["node_id"],
              "weight": float(graph.adjacency_matrix[t, s])}
             for t, s in zip(targets.tolist(), sources.tolist(), strict=True) if s in nodes and t in nodes]
    linked = {link["source"] for link in links} | {link["target"] for link in links}
    used = [node for node in nodes.values()
            if node["node_id"] in linked or node["feature_type"] in ("embedding", "logit")]
    metadata = {"slug": slug, "scan": graph.scan or "glassformer", "transcoder_list": [],
                "prompt_tokens": token_text, "prompt": graph.prompt, "node_threshold": node_threshold,
                "schema_version": 1}
    return {"metadata": metadata,
            "qParams": {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""},
            "nodes": used, "links": links}

"""The attribution graph page: one offline HTML file (report.py's content-security policy) drawing the pruned
graph, nodes by layer and position, edges by weight; a click on a node shows its activation, influence,
strongest edges and, for a feature, the tokens its decoder promotes and its top examples; shift-clicked nodes
can be grouped into named supernodes."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from .page import asset, page_end, page_start, write_page

LABELS = {"promotes": "tokens its decoder promotes (through the unembedding)", "examples": "top examples",
          "incoming": "strongest inputs", "outgoing": "strongest outputs"}


def graph_page_data(graph: Any, node_threshold: float = 0.8, edge_threshold: float = 0.98,
                    features: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the page script draws: the pruned graph's nodes and edges, token texts, scores, feature info
    (``features``: {node id: {"top_logits": [[token, value]], "examples": [...], "max": float}})."""
    pruned = graph.prune(node_threshold, edge_threshold)
    cumulative = pruned.cumulative_scores.tolist()
    tokens = graph.token_strings or [str(int(t)) for t in graph.input_tokens]
    logits = graph.logit_strings or [str(int(t)) for t in graph.logit_ids]
    nodes, kept = [], pruned.node_mask.nonzero(as_tuple=True)[0].tolist()
    n_before_logits = graph.n_features + (graph.n_layers + 1) * graph.n_pos
    for index in kept:
        kind, layer, pos, which = graph.node_kind(index)
        activation = None
        if kind == "feature":
            label = f"L{layer} #{which} @{pos} {tokens[pos]!r}"
            activation = float(graph.activation_values[graph.selected_features[index]])
        elif kind == "error":
            label = f"error L{layer} @{pos}"
        elif kind == "token":
            label = f"token {tokens[pos]!r} @{pos}"
        else:
            i = index - n_before_logits
            label = f"logit {logits[i]!r} p={float(graph.logit_probabilities[i]):.3f}"
        nodes.append({"id": node_id(graph, index), "kind": kind, "layer": layer, "pos": pos, "label": label,
                      "activation": activation, "influence": cumulative[index]})
    targets, sources = pruned.edge_mask.nonzero(as_tuple=True)
    links = [{"s": node_id(graph, s), "t": node_id(graph, t), "w": float(graph.adjacency_matrix[t, s])}
             for t, s in zip(targets.tolist(), sources.tolist(), strict=True)]
    replacement, completeness = graph.scores()
    return {"prompt": graph.prompt, "tokens": tokens, "n_layers": graph.n_layers, "nodes": nodes, "links": links,
            "scores": {"replacement": replacement, "completeness": completeness},
            "features": features or {}, "labels": LABELS}


def node_id(graph: Any, index: int) -> str:
    """A node's id on the page and in feature info: ``F{layer}_{feature}@{pos}``, ``E{layer}@{pos}``,
    ``T@{pos}``, ``L{token id}``."""
    kind, layer, pos, which = graph.node_kind(index)
    return {"feature": f"F{layer}_{which}@{pos}", "error": f"E{layer}@{pos}", "token": f"T@{pos}",
            "logit": f"L{which}"}[kind]


def graph_html(graph: Any, *, title: str | None = None, node_threshold: float = 0.8, edge_threshold: float = 0.98,
               features: dict[str, dict[str, Any]] | None = None) -> str:
    """The page for ``graph`` as one HTML string."""
    data = graph_page_data(graph, node_threshold, edge_threshold, features)
    title = title or "Attribution graph"
    scores = data["scores"]
    script = asset("graph.js")
    return f"""{page_start(title, "en", asset("graph.css"), script=script)}
<header>
<h1>{html.escape(title)}</h1>
<p class="gf-summary">prompt: <code>{html.escape(graph.prompt)}</code></p>
<table class="gf-graph-scores"><tbody>
<tr><td>replacement score</td><td>{scores["replacement"]:.4f}</td></tr>
<tr><td>completeness score</td><td>{scores["completeness"]:.4f}</td></tr>
<tr><td>nodes kept / all</td><td>{len(data["nodes"])} / {graph.adjacency_matrix.shape[0]}</td></tr>
<tr><td>edges kept</td><td>{len(data["links"])}</td></tr>
</tbody></table>
</header>
<section id="gf-graph">
<div class="gf-controls">
<input id="gf-graph-group-name" type="text" placeholder="supernode name" aria-label="supernode name">
<button id="gf-graph-group" type="button">group the shift-clicked nodes</button>
</div>
<div class="gf-graph-layout"><div id="gf-graph-canvas"><svg id="gf-graph-svg" role="img" aria-label="attribution graph">
</svg></div>
<aside><article id="gf-graph-detail">click a node</article><h3>supernodes</h3><ul id="gf-graph-supernodes"></ul>
</aside></div>
<noscript>The graph is drawn by the page's script; graph.json holds the same nodes and edges.</noscript>
</section>
{page_end("Made by glassformer: offline, nothing is loaded from the network.", "gf-graph-data", data, script)}"""


def write_graph_page(graph: Any, out: str | Path, **options: Any) -> Path:
    """Write :func:`graph_html` of ``graph`` to the file ``out``."""
    return write_page(out, graph_html(graph, **options))

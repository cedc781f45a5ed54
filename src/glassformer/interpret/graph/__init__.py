"""Attribution graphs on your own model: transcoders in place of MLPs, attention patterns and norm scales
frozen, and the direct effects between tokens, features, errors and logits (docs/graphs.md).

    tc = load_transcoders("out/transcoders", model)
    graph = attribute(model, tc, ids)                 # the unpruned graph, circuit-tracer's node order
    replacement, completeness = graph.scores()
    pruned = graph.prune(0.8, 0.98)
    save_graph_pt(graph, "graph.pt")                  # circuit_tracer.graph.Graph.from_pt reads it
"""

from .attribute import LogitTargets, attribute, graph_bytes, select_logits
from .files import frontend_json, load_graph_pt, save_graph_pt
from .graph import Graph, Pruned

__all__ = ["attribute", "Graph", "Pruned", "LogitTargets", "select_logits", "graph_bytes",
           "save_graph_pt", "load_graph_pt", "frontend_json"]

"""``glassformer graph CHECKPOINT --transcoders DIR --prompt TEXT --out DIR``: the attribution graph of a prompt
(docs/graphs.md): ``graph.pt`` (circuit-tracer's ``Graph.from_pt`` reads it), ``graph.json`` (the pruned graph
as circuit-tracer's frontend reads it) and ``graph.html`` (an offline page)."""

import argparse
import json
from pathlib import Path

from ...io.fileio import Writes, atomic_directory, check_not_source

GRAPH_FILES = ("graph.pt", "graph.json", "graph.html")
WRITES = (Writes(("graph", "{ck}", "--transcoders", "{tc}", "--prompt", "hello", "--out", "{out}"),
                 tuple(f"{{out}}/{name}" for name in GRAPH_FILES)),)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``graph`` verb to the ``glassformer`` subparsers."""
    parser = sub.add_parser(
        "graph", help="the attribution graph of a prompt through a checkpoint's transcoders (circuit-tracer's)",
        description="Replace every MLP by its transcoders, freeze attention patterns and norm scales, and measure "
                    "the direct effects between the prompt's tokens, active features, error nodes and the most "
                    "likely next tokens (circuit-tracer's algorithm and files). Writes OUT/graph.pt (unpruned), "
                    "OUT/graph.json (pruned, circuit-tracer's frontend format) and OUT/graph.html (offline page).",
        epilog="example: glassformer graph out/sc/best --transcoders out/sc/transcoders --prompt 'ROMEO:' "
               "--out out/sc/graph")
    parser.add_argument("checkpoint", type=Path, help="a glassformer checkpoint folder (e.g. out/run/best)")
    parser.add_argument("--transcoders", type=Path, required=True,
                        help="a transcoder folder in circuit-tracer's layout (config.yaml + safetensors)")
    parser.add_argument("--prompt", required=True, help="the text to explain (a BOS token is put first when the "
                        "tokenizer has one: position 0 holds no features)")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write (replaced only if ours)")
    parser.add_argument("--max_n_logits", type=int, default=10, help="explain at most this many logits (10)")
    parser.add_argument("--desired_logit_prob", type=float, default=0.95,
                        help="explain the likeliest logits until their probabilities add up to this (0.95)")
    parser.add_argument("--batch_size", type=int, default=64, help="targets per backward pass (64)")
    parser.add_argument("--max_feature_nodes", type=int, default=None,
                        help="explain at most this many features, most influential first (all)")
    parser.add_argument("--node_threshold", type=float, default=0.8, help="pruning: share of influence kept (0.8)")
    parser.add_argument("--edge_threshold", type=float, default=0.98, help="pruning: share of edges kept (0.98)")
    parser.add_argument("--data", type=Path, default=None,
                        help="a text file whose strongest activations the page shows for each kept feature")
    parser.add_argument("--max_memory", default=None, help="refuse before allocating beyond this size (e.g. 4GB)")


def run(args: argparse.Namespace) -> int:
    """Build the graph, write the three files, print a summary line; 0."""
    import torch

    from ...data.text import read_text
    from ...errors import UsageError
    from ...interpret.graph import attribute
    from ...interpret.graph.features import feature_info
    from ...interpret.graph.files import frontend_json, graph_bytes_pt
    from ...interpret.transcoders import load_transcoders
    from ...io.checks import check_number
    from ...io.progress import Heartbeat
    from ...training.checkpoint import load_checkpoint
    from ...viz.report_graph import graph_html, node_id

    for name in ("node_threshold", "edge_threshold", "desired_logit_prob"):
        check_number(f"--{name}", getattr(args, name), 0.0, 1.0)
    if not args.prompt:
        raise UsageError("--prompt must not be empty")
    check_not_source(args.out, [args.checkpoint, args.transcoders, *([args.data] if args.data else [])])
    checkpoint = load_checkpoint(args.checkpoint)
    model, tokenizer = checkpoint.model.eval(), checkpoint.tokenizer
    tc = load_transcoders(args.transcoders, model)
    ids = tokenizer.encode(args.prompt)
    if tokenizer.bos_id is not None and ids[:1] != [tokenizer.bos_id]:  # BOS first: position 0 holds no features
        ids = [tokenizer.bos_id, *ids]
    with Heartbeat("attribution graph", unit="targets") as beat:
        graph = attribute(model, tc, ids, prompt=args.prompt, max_n_logits=args.max_n_logits,
                          desired_logit_prob=args.desired_logit_prob, batch_size=args.batch_size,
                          max_feature_nodes=args.max_feature_nodes, max_memory=args.max_memory,
                          progress=lambda done, total: (setattr(beat, "total", total), beat.update(done)))

    def text_of(token: int) -> str:
        return tokenizer.decode([token], skip_special_tokens=False)

    graph.token_strings = [text_of(t) for t in ids]
    graph.logit_strings = [text_of(int(t)) for t in graph.logit_ids]
    pruned = graph.prune(args.node_threshold, args.edge_threshold)
    kept = {node_id(graph, i): graph.node_kind(i) for i in pruned.node_mask.nonzero(as_tuple=True)[0].tolist()}
    features = {key: (layer, feat) for key, (kind, layer, _, feat) in kept.items() if kind == "feature"}
    text_ids = None
    if args.data is not None:
        text_ids = torch.tensor(tokenizer.encode(read_text(args.data, "--data file")[:200_000]), dtype=torch.long)
    info = feature_info(model, tc, features, token_text=text_of, ids=text_ids)
    page = graph_html(graph, title=f"Attribution graph: {args.prompt[:60]}", node_threshold=args.node_threshold,
                      edge_threshold=args.edge_threshold, features=info)
    front = frontend_json(graph, slug=args.out.name or "graph", node_threshold=args.node_threshold,
                          edge_threshold=args.edge_threshold)
    with atomic_directory(args.out, GRAPH_FILES) as temp:
        (temp / "graph.pt").write_bytes(graph_bytes_pt(graph, model_name=str(args.checkpoint)))
        (temp / "graph.json").write_text(json.dumps(front, ensure_ascii=False) + "\n", encoding="utf-8")
        (temp / "graph.html").write_text(page, encoding="utf-8")
    replacement, completeness = graph.scores()
    print(json.dumps({"nodes": int(graph.adjacency_matrix.shape[0]), "features": graph.n_features,
                      "logits": graph.n_logits, "kept_nodes": int(pruned.node_mask.sum()),
                      "replacement": round(replacement, 4), "completeness": round(completeness, 4),
                      "out": str(args.out)}))
    return 0

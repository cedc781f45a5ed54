"""Does an attribution graph fit a laptop? Builds the graph of a 6-layer model on a 64-token prompt (issue 44,
point 5) and prints the wall time, the process's peak memory beside ``graph_bytes``' estimate (checked
before allocating), and the graph's size; JSON with --json.

    python benchmarks/bench_graph.py                          # 6 layers, d=384, 3,072 features a layer
    python benchmarks/bench_graph.py --d_model 128 --d_transcoder 1024 --threads 2

The transcoders are random with encoder biases set so that about ``--density`` of the features fire on a
position (1%: about 30 of 3,072, the L0 of trained transcoders); what is measured is the graph's cost, not
its meaning. Name the CPU with the figures (``lscpu``).
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch

from glassformer import TransformerLM
from glassformer.interpret.graph import attribute, graph_bytes
from glassformer.interpret.transcoders import random_transcoders


def peak_rss() -> int:
    """The process's peak resident memory so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> None:
    """Parse the options, build one graph, print what it took."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n_layers", type=int, default=6)
    parser.add_argument("--d_model", type=int, default=384)
    parser.add_argument("--d_transcoder", type=int, default=3072)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--density", type=float, default=0.01, help="share of features that fire (0.01)")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--max_feature_nodes", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    d = args.d_model
    model = TransformerLM(vocab_size=65, d_model=d, n_heads=max(1, d // 64), n_layers=args.n_layers, d_ff=4 * d,
                          max_len=max(256, args.tokens), pos="learned").eval()
    tc = random_transcoders(args.n_layers, d, args.d_transcoder, scale=1.0, seed=0)
    cut = float(torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(1 - args.density)))
    for layer in tc.layers:  # unit-norm encoder rows on unit-variance inputs: pre-activations ~ N(b, 1)
        layer.b_enc.fill_(-cut)
    ids = torch.randint(0, 65, (args.tokens,))
    before = peak_rss()
    shown = [0.0]

    def progress(done: int, total: int) -> None:
        if time.monotonic() - shown[0] > 10:
            shown[0] = time.monotonic()
            print(f"  {done:,} of {total:,} targets, {time.monotonic() - start:.0f} s", flush=True)

    start = time.monotonic()
    graph = attribute(model, tc, ids, batch_size=args.batch_size, max_feature_nodes=args.max_feature_nodes,
                      progress=progress)
    wall = time.monotonic() - start
    row = {"n_layers": args.n_layers, "d_model": d, "d_transcoder": args.d_transcoder, "tokens": args.tokens,
           "threads": args.threads, "batch_size": args.batch_size, "nodes": int(graph.adjacency_matrix.shape[0]),
           "features": graph.n_features, "logits": graph.n_logits, "wall_s": round(wall, 1),
           "peak_rss_gb": round(peak_rss() / 1e9, 3), "rss_before_gb": round(before / 1e9, 3),
           "estimate_gb": round(graph_bytes(model, tc, args.tokens, args.batch_size, graph.n_features,
                                            graph.n_logits, graph.active_features.shape[0]) / 1e9, 3),
           "replacement": round(graph.scores()[0], 4)}
    if args.json:
        print(json.dumps(row))
    else:
        for key, value in row.items():
            print(f"{key:>14}  {value}")


if __name__ == "__main__":
    main()

"""Attribution graphs that find mechanisms, checked by path patching (docs/learn/08-from-heads-to-features.md).

Two models, each with a per-layer transcoder set and the attribution graph of one prompt:

- **induction**: ``glassformer recipe induction_heads_mlp`` (configs/induction_heads_mlp.yaml: the induction
  recipe's model with MLPs, 2 layers, d 64, RoPE, GELU MLPs of 256). A plain run with MLPs does not form the
  induction pair within 1,500 steps (docs/results.md), so the recipe's MLPs join late (``recipe.mlp_from_step``,
  here ``--attn_steps``): until then they are held at zero (their output layer zeroed, every MLP weight frozen)
  and the attention-only model forms its previous-token and induction heads; then everything trains to
  ``--steps``. The prompt: ``<bos>`` and 12 random tokens, then the first ``--repeat`` of them again; the graph explains
  the next token of the copy. Its scores are set beside circuit-tracer 0.5.0's on the same files (the model
  exported as a Hugging Face GPT-NeoX folder; the reference venv of tests/test_graph_vs_circuit_tracer.py).
- **shakespeare**: ``glassformer recipe shakespeare_char_fast`` (2 layers, d 128), its transcoders, and the graph
  of a prompt that ends inside a frequent word.

For each graph: the strongest path from a prompt token to the top logit (the product of the row-normalised
edge weights, as influence is computed), how much of that path's first edge runs through each attention head
(the edge again with one head's output cut from the gradient: attention patterns are frozen, so the edge is a
sum over heads' OV paths), and path patching (glassformer.interpret.path_patching) of the same token, changed
to 8 others in turn, into each head's value input, measuring the logit the graph explains: the graph's head
and path patching's head are set side by side. For induction also the paths into that head's keys (the
whole first copy changed). Writes JSON to ``--results``, the induction graph's picture to ``--image``, and
prints a table (docs/learn/08-from-heads-to-features.md quotes them). Trained parts found in ``--out`` are
read back (``--retrain``: train again).

    python examples/21_graph_mechanisms.py --out out/graph_mechanisms
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from glassformer.interpret import path_patching
from glassformer.interpret.graph import Graph, attribute, frontend_json, save_graph_pt
from glassformer.interpret.graph.graph import normalized
from glassformer.interpret.hooks import hooks
from glassformer.interpret.transcoders import TranscoderTrainConfig, load_transcoders, run_transcoders
from glassformer.recipes.induction import ALPHABET, RepeatedSegments, best_heads, measure
from glassformer.runtime.kernel_choice import cpu_name
from glassformer.training import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "circuit_tracer_reference.py"
CT_VENV = Path(os.environ.get("GLASSFORMER_CT_VENV") or Path.home() / ".cache/glassformer/circuit-tracer-0.5.0")


# ---------------------------------------------------------------------------------------------------------
# reading a graph


def node_name(graph: Graph, index: int, strings: Sequence[str]) -> str:
    """A node in words: ``L1 F293 @5 'k'`` (feature 293 of layer 1 at position 5, token 'k'), ``err L0 @5``,
    ``tok @5 'k'``, ``logit 'k'``; ``strings``: the text of every token id."""
    kind, layer, pos, what = graph.node_kind(index)
    if kind == "feature":
        return f"L{layer} F{what} @{pos} {strings[int(graph.input_tokens[pos])]!r}"
    if kind == "error":
        return f"err L{layer} @{pos}"
    if kind == "token":
        return f"tok @{pos} {strings[what]!r}"
    return f"logit {strings[what]!r}"


def strongest_path(graph: Graph, logit: int = 0, position: int | None = None) -> list[int]:
    """Node indices of the strongest path from a prompt token (the one at ``position``, None: any) to logit node
    ``logit`` (0: the likeliest): the path whose product of row-normalised |A| (the weights influence sums
    over) is largest; token first."""
    B = normalized(graph.adjacency_matrix)  # (N, N), rows = targets
    N, f, T, L = B.shape[0], graph.n_features, graph.n_pos, graph.n_layers
    best = torch.zeros(N)
    best[N - graph.n_logits + logit] = 1.0
    step = torch.full((N,), -1, dtype=torch.long)  # the next node on each node's best path
    for _ in range(N):  # the graph is acyclic: at most N rounds
        value, into = (best[:, None] * B).max(dim=0)  # best path through each node's strongest target
        better = value > best
        if not better.any():
            break
        best, step = torch.where(better, value, best), torch.where(better, into, step)
    tokens = torch.arange(f + L * T, f + (L + 1) * T)
    node = int(tokens[best[tokens].argmax()]) if position is None else f + L * T + position
    path = [node]
    while step[node] >= 0:
        node = int(step[node])
        path.append(node)
    return path


@contextlib.contextmanager
def heads_cut(model: torch.nn.Module, cut: Sequence[tuple[int, int]]) -> Iterator[None]:
    """While inside, the outputs of the heads ``cut`` ((layer, head) pairs) keep their values but pass no
    gradient: with attention patterns frozen, an attribution edge then loses exactly its paths through them."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in cut:
        by_layer.setdefault(layer, []).append(head)

    def hook_for(chosen: list[int]):
        def hook(z: torch.Tensor, _: object) -> torch.Tensor:  # (B, T, h, hd)
            z = z.clone()
            z[:, :, chosen] = z[:, :, chosen].detach()
            return z
        return hook

    with hooks(model, [(f"blocks.{layer}.attn.hook_z", hook_for(heads)) for layer, heads in by_layer.items()]):
        yield


def edge_by_head(model: torch.nn.Module, tc: Any, ids: torch.Tensor, graph: Graph, target: int, source: int,
                 **settings: Any) -> dict[str, float]:
    """{"L{l}H{h}": the share of the edge source -> target (node indices of ``graph``, built from ``ids`` with
    ``settings``) that runs through head h of layer l}: 1 - (the edge with that head cut) / (the edge)."""
    full = float(graph.adjacency_matrix[target, source])
    shares = {}
    for layer, block in enumerate(model.blocks):
        for head in range(block.self_attn.n_heads):
            with heads_cut(model, [(layer, head)]):
                cut = attribute(model, tc, ids, target_ids=graph.logit_ids.tolist(), **settings)
            shares[f"L{layer}H{head}"] = 1.0 - float(cut.adjacency_matrix[target, source]) / full
    return shares


def target_metric(target_id: int, kind: str = "logit"):
    """The metric path patching measures at the last position: the target's logit minus the mean logit (what a
    graph's logit node is: ``kind`` "logit") or its log-probability ("logprob")."""
    def metric(logits: torch.Tensor) -> torch.Tensor:
        last = logits[:, -1].float()
        if kind == "logprob":
            return last.log_softmax(-1)[:, target_id].mean()
        return (last[:, target_id] - last.mean(-1)).mean()
    return metric


def value_patching(model: torch.nn.Module, clean: torch.Tensor, corrupted: torch.Tensor, target_id: int,
                   kind: str = "logit") -> dict[str, float]:
    """{"L{l}H{h}": the fall of :func:`target_metric` when only the token embeddings' path into head h's values
    carries the corrupted prompt} (path patching, noising), averaged over the rows of ``corrupted`` (B, T),
    each a corrupted version of the one row of ``clean`` (1, T)."""
    metric = target_metric(target_id, kind)
    clean = clean.expand(corrupted.shape[0], -1)
    out = {}
    for layer, block in enumerate(model.blocks):
        for head in range(block.self_attn.n_heads):
            # noising: metric(clean) - metric(patched), what the corrupted path takes away
            out[f"L{layer}H{head}"] = path_patching(model, clean, corrupted, metric, [("embed", f"L{layer}H{head}.v")])
    return out


def key_patching(model: torch.nn.Module, clean: torch.Tensor, corrupted: torch.Tensor, target_id: int,
                 receiver: str) -> dict[str, float]:
    """{sender: the fall of the target's logit (:func:`target_metric`) when only sender -> ``receiver`` (e.g.
    "L1H2.k") carries the corrupted prompt}, for the embedding and every earlier head and MLP, and "all"."""
    metric = target_metric(target_id)
    layer = int(receiver[1:receiver.index("H")])
    senders = ["embed", *(f"L{l}H{h}" for l in range(layer) for h in range(model.blocks[l].self_attn.n_heads)),
               *(f"MLP{l}" for l in range(layer) if model.blocks[l].ffn is not None)]
    out = {s: path_patching(model, clean, corrupted, metric, [(s, receiver)]) for s in senders}
    out["all"] = path_patching(model, clean, corrupted, metric, [(s, receiver) for s in senders])
    return out


def read_graph(model: torch.nn.Module, tc: Any, ids: torch.Tensor, strings: Sequence[str], prompt: str,
               swaps: Sequence[int], **settings: Any) -> dict[str, Any]:
    """The graph of ``ids`` and what it shows: scores, its strongest path, the first edge of that path by head,
    and path patching of the path's token into each head's values, averaged over the prompt with that token
    changed to each of the first 8 of ``swaps`` that differ from it. Returns a JSON-ready dict; the graph itself
    under "graph"."""
    graph = attribute(model, tc, ids, prompt=prompt, **settings)
    replacement, completeness = graph.scores()
    pruned = graph.prune(0.8, 0.98)
    path = strongest_path(graph)
    by_head = edge_by_head(model, tc, ids, graph, path[1], path[0], **settings)
    target_id = int(graph.logit_ids[0])
    source = graph.node_kind(path[0])[2]  # the path's token's position
    others = [t for t in swaps if t != int(ids[source])][:8]
    corrupted = ids.repeat(len(others), 1)  # (k, T): the path's token changed to each of 8 others
    corrupted[:, source] = torch.tensor(others)
    patched = value_patching(model, ids[None], corrupted, target_id)
    by_logprob = value_patching(model, ids[None], corrupted, target_id, "logprob")
    influence = graph.influence()
    top = influence[:graph.n_features].argsort(descending=True)[:8].tolist()
    return {
        "graph": graph, "path_nodes": path,
        "prompt": prompt, "tokens": len(ids), "logits": [strings[int(i)] for i in graph.logit_ids],
        "logit_probabilities": [round(float(p), 4) for p in graph.logit_probabilities],
        "active_features": int(graph.active_features.shape[0]), "nodes": int(graph.adjacency_matrix.shape[0]),
        "pruned_nodes": int(pruned.node_mask.sum()), "replacement": round(replacement, 4),
        "completeness": round(completeness, 4),
        "strongest_path": [node_name(graph, n, strings) for n in path],
        "path_edges": [round(float(graph.adjacency_matrix[b, a]), 4) for a, b in zip(path, path[1:])],
        "first_edge_by_head": {k: round(v, 4) for k, v in by_head.items()},
        "graph_head": max(by_head, key=by_head.get),
        "swapped": {"position": source, "token": strings[int(ids[source])], "into": [strings[t] for t in others]},
        "value_path_patching": {k: round(v, 4) for k, v in patched.items()},
        "patching_head": max(patched, key=patched.get),
        "value_path_patching_logprob": {k: round(v, 4) for k, v in by_logprob.items()},
        "top_features": [{"node": node_name(graph, i, strings), "influence": round(float(influence[i]), 4)}
                         for i in top],
    }


# ---------------------------------------------------------------------------------------------------------
# the induction model


def train_induction(out: Path, attn_steps: int, steps: int, threads: int) -> dict[str, Any]:
    """``glassformer recipe induction_heads_mlp`` into ``out``: the MLPs held at zero for ``attn_steps`` steps, then
    everything to ``steps`` (constant lr 3e-3, batches of 32 rows of 64 tokens); the recipe's results.json."""
    subprocess.run([sys.executable, "-m", "glassformer", "recipe", "induction_heads_mlp", "--out_dir", str(out),
                    "--progress", "false", "--num_threads", str(threads), "--max_steps", str(steps),
                    "--recipe.mlp_from_step", str(attn_steps)], check=True, capture_output=True)
    return json.loads((out / "results.json").read_text())


def write_corpus(path: Path, task: RepeatedSegments, rows: int, seed: int) -> None:
    """``rows`` rows of the task as one line of text (no <bos>: windows are read anywhere in it)."""
    ids = task.rows(rows, torch.Generator().manual_seed(seed))[:, 1:]
    path.write_text("".join(ALPHABET[int(i) - task.low] for i in ids.flatten()), encoding="utf-8")


def transcoders(model: Any, tokenizer: Any, corpus: Path, out: Path, steps: int, d_transcoder: int,
                context: int) -> dict[str, Any]:
    """A per-layer JumpReLU set on ``corpus`` (examples/20_transcoders_induction.py's settings); its metrics."""
    config = TranscoderTrainConfig.from_dict({
        "data": [str(corpus)], "out_dir": str(out), "kind": "plt", "activation": "jumprelu",
        "d_transcoder": d_transcoder, "steps": steps, "batch_size": 1024, "buffer_size": 16384, "context": context,
        "model_batch": 32, "lr": 1e-3, "lr_decay_steps": steps // 5, "sparsity_coefficient": 2e-3,
        "sparsity_warmup_steps": steps // 10, "eval_batches": 8, "feature_windows": 0, "progress": False,
        "log_every": 100})
    started = time.perf_counter()
    m = run_transcoders(config, model, tokenizer)["metrics"]
    return {"nmse": [round(v, 4) for v in m["nmse"]], "l0": [round(v, 1) for v in m["l0"]], "dead": m["dead"],
            "seconds": round(time.perf_counter() - started, 1),
            **{k: round(m[k], 4) for k in ("ce_clean", "ce_replaced", "ce_zero", "ce_recovered") if k in m}}


def induction_prompt(task: RepeatedSegments, length: int, repeat: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, copy_changed): ``<bos>`` + ``length`` distinct random tokens + their first ``repeat`` again, and
    the same with the whole first copy changed to tokens not in the prompt (nothing to look back at)."""
    g = torch.Generator().manual_seed(seed)
    segment = (torch.randperm(task.tokenizer.vocab_size - task.low, generator=g)[:length] + task.low).tolist()
    ids = torch.tensor([task.bos, *segment, *segment[:repeat]])
    unused = torch.tensor(sorted(set(range(task.low, task.tokenizer.vocab_size)) - set(segment)))
    copy_changed = ids.clone()
    copy_changed[1:1 + length] = unused[:length]
    return ids, copy_changed


def circuit_tracer_scores(model: Any, tokenizer: Any, tc_dir: Path, ids: torch.Tensor, graph: Graph, out: Path,
                          settings: dict[str, Any]) -> dict[str, Any]:
    """circuit-tracer 0.5.0's graph of the same prompt on the same files (the model as a GPT-NeoX folder), run
    by tests/circuit_tracer_reference.py in the cached reference venv; {"skipped": reason} without it."""
    from glassformer.interop.hf_dir import save_hf_dir

    python = CT_VENV / "bin" / "python"
    if not python.is_file():
        return {"skipped": f"no circuit-tracer venv at {CT_VENV} (tests/test_graph_vs_circuit_tracer.py makes it)"}
    save_hf_dir(model, tokenizer, out / "hf")
    save_graph_pt(graph, out / "graph.pt")
    (out / "graph.json").write_text(json.dumps(frontend_json(graph)))
    job = {"hf_dir": str(out / "hf"), "runs": [{
        "name": "induction", "transcoders": str(tc_dir), "ids": ids.tolist(), "graph_pt": str(out / "graph.pt"),
        "graph_json": str(out / "graph.json"), "settings": settings}]}
    (out / "job.json").write_text(json.dumps(job))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    started = time.perf_counter()
    done = subprocess.run([str(python), str(REFERENCE), str(out / "job.json"), str(out / "reference.pt")], env=env,
                          capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        return {"skipped": f"the reference failed: {done.stderr.strip().splitlines()[-1:]}"}
    theirs = torch.load(out / "reference.pt", weights_only=True)["induction"]
    A, B = graph.adjacency_matrix, theirs["adjacency"]
    replacement, completeness = theirs["scores"].tolist()
    return {"replacement": round(replacement, 4), "completeness": round(completeness, 4),
            "nodes": int(B.shape[0]), "same_features": bool(torch.equal(graph.active_features,
                                                                        theirs["active_features"])),
            "max_rel_adjacency_diff": float((A - B).abs().max() / B.abs().max()) if A.shape == B.shape else None,
            "seconds": round(time.perf_counter() - started, 1)}


def induction(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out / "induction"
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "recipe" / "results.json").is_file() or args.retrain:
        train_induction(out / "recipe", args.attn_steps, args.steps, args.threads)
    recipe = json.loads((out / "recipe" / "results.json").read_text())
    model = load_checkpoint(out / "recipe" / "with_mlps" / "model").model.eval()
    task = RepeatedSegments(62, 64, 6, 20, 0)
    record = measure(model, task, 0, 20, 32)
    result: dict[str, Any] = {"model_s": round(recipe["wall_s"], 1), "mlp_from_step": recipe["recipe"]["mlp_from_step"],
                              "steps": recipe["config"]["max_steps"], "best_heads": best_heads(record),
                              "previous_token_scores": record["previous_token"],
                              "induction_scores": record["induction"]}
    corpus = out / "segments.txt"
    write_corpus(corpus, task, 4000, seed=1)
    if not (out / "transcoders" / "config.yaml").is_file() or args.retrain:
        result["transcoders"] = transcoders(model, task.tokenizer, corpus, out / "transcoders", args.tc_steps,
                                            args.d_transcoder, 64)
    else:
        result["transcoders"] = json.loads((out / "transcoders" / "metrics.json").read_text())
    tc = load_transcoders(out / "transcoders", model)
    ids, copy_changed = induction_prompt(task, 12, args.repeat, seed=3)
    strings = [task.tokenizer.decode([i]) if i != task.bos else "<bos>" for i in range(task.tokenizer.vocab_size)]
    prompt = "".join(strings[int(i)] for i in ids[1:])
    settings = {"max_n_logits": 5, "desired_logit_prob": 0.95, "batch_size": 64}
    unused = [int(t) for t in copy_changed[1:13]]  # tokens not in the prompt
    read = read_graph(model, tc, ids, strings, prompt, unused, **settings)
    graph = read.pop("graph")
    result["graph"] = read
    path_head = read["patching_head"]
    result["key_patching"] = {k: round(v, 4) for k, v in
                              key_patching(model, ids[None], copy_changed[None], int(graph.logit_ids[0]),
                                           f"{path_head}.k").items()}
    result["circuit_tracer"] = circuit_tracer_scores(model, task.tokenizer, out / "transcoders", ids, graph, out,
                                                     settings)
    if args.image:
        draw(graph, read, strings, args.image)
    return result


# ---------------------------------------------------------------------------------------------------------
# the Shakespeare char model


def shakespeare(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out / "shakespeare"
    if not (out / "lm" / "best").is_dir() or args.retrain:
        subprocess.run([sys.executable, "-m", "glassformer", "recipe", "shakespeare_char_fast", "--out_dir",
                        str(out / "lm"), "--progress", "false", "--num_threads", str(args.threads),
                        "--recipe.sample_tokens", "1"], check=True, capture_output=True)
    model = load_checkpoint(out / "lm" / "best")
    tokenizer, model = model.tokenizer, model.model.eval()
    recipe = json.loads((out / "lm" / "results.json").read_text())
    result: dict[str, Any] = {"model_s": round(recipe["wall_s"], 1),
                              "val_loss": round(recipe["training"]["val_loss"], 4)}
    corpus = Path(__file__).resolve().parents[1] / "src/glassformer/recipes/data/tinyshakespeare/input.txt"
    if not (out / "transcoders" / "config.yaml").is_file() or args.retrain:
        result["transcoders"] = transcoders(model, tokenizer, corpus, out / "transcoders", args.char_tc_steps,
                                            8 * model.config.d_model, 64)
    else:
        result["transcoders"] = json.loads((out / "transcoders" / "metrics.json").read_text())
    tc = load_transcoders(out / "transcoders", model)
    text = args.char_prompt
    ids = torch.tensor(tokenizer.encode(text))
    strings = [tokenizer.decode([i]) for i in range(tokenizer.vocab_size)]
    read = read_graph(model, tc, ids, strings, text, tokenizer.encode(args.char_swaps), max_n_logits=5,
                      desired_logit_prob=0.95, batch_size=64)
    read.pop("graph")
    result["graph"] = read
    return result


# ---------------------------------------------------------------------------------------------------------
# the picture


def draw(graph: Graph, read: dict[str, Any], strings: Sequence[str], image: Path, node_threshold: float = 0.95) -> None:
    """The graph pruned at ``node_threshold`` (looser than the 0.8 of the JSON, so that the features next in
    influence show too) as a PNG: x the position, y the layer (tokens below, logits above), edges by weight
    (blue +, red -), the strongest path drawn thick."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pruned, A = graph.prune(node_threshold, 0.98), graph.adjacency_matrix
    kept = pruned.node_mask.nonzero().flatten().tolist()
    L, T = graph.n_layers, graph.n_pos
    spots: dict[int, tuple[float, float]] = {}
    crowd: dict[tuple[int, int], int] = {}
    for n in kept:
        kind, layer, pos, _ = graph.node_kind(n)
        row = {"token": 0, "logit": 2 * L + 2}.get(kind, 2 * layer + 1 + (kind == "error"))
        if kind == "logit":
            pos = T + len([m for m in spots if graph.node_kind(m)[0] == "logit"])
        k = crowd.get((row, pos), 0)
        crowd[(row, pos)] = k + 1
        spots[n] = (pos + 0.22 * k, row + 0.25 * (k % 3))
    fig, ax = plt.subplots(figsize=(12, 5.5))
    edges = pruned.edge_mask.nonzero().tolist()
    biggest = max((abs(float(A[t, s])) for t, s in edges), default=1.0)
    strongest = read["path_nodes"]
    on_path = set(zip(strongest, strongest[1:]))
    for t, s in edges:
        if s in spots and t in spots:
            w = float(A[t, s])
            thick = (s, t) in on_path
            ax.plot(*zip(spots[s], spots[t]), color="#1f77b4" if w > 0 else "#d62728",
                    lw=4.0 if thick else 0.3 + 2.5 * abs(w) / biggest, alpha=1.0 if thick else 0.45, zorder=1)
    colours = {"feature": "#444444", "error": "#bbbbbb", "token": "#2ca02c", "logit": "#ff7f0e"}
    for n, (x, y) in spots.items():
        kind = graph.node_kind(n)[0]
        ax.scatter([x], [y], s=60 if n in strongest else 30, color=colours[kind], zorder=2,
                   edgecolors="black" if n in strongest else "none")
    for kind, colour in colours.items():
        ax.scatter([], [], s=30, color=colour, label=f"{kind}s" if kind != "error" else "error nodes")
    ax.legend(loc="center left", fontsize=8, frameon=False)
    for pos in range(T):
        ax.text(pos, -0.7, strings[int(graph.input_tokens[pos])], ha="center", fontsize=9, family="monospace")
    for n in spots:
        if graph.node_kind(n)[0] == "logit":
            x, y = spots[n]
            ax.text(x, y + 0.35, strings[graph.node_kind(n)[3]], ha="center", fontsize=9, family="monospace")
    for n in strongest[1:-1]:
        x, y = spots.get(n, (None, None))
        if x is not None:
            ax.text(x + 0.15, y + 0.15, read["strongest_path"][strongest.index(n)].split(" @")[0], fontsize=8)
    ax.set_yticks([0, *[2 * i + 1 for i in range(L)], 2 * L + 2], ["tokens", *[f"layer {i}" for i in range(L)],
                                                                    "logits"])
    ax.set_xticks([])
    ax.set_title(f"{read['prompt']!r}: the attribution graph pruned at node threshold {node_threshold} "
                 f"({int(pruned.node_mask.sum())} of {read['nodes']} nodes); thick: the strongest path", fontsize=10,
                 pad=24)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    image.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(image, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------


def table(results: dict[str, Any]) -> str:
    """The printed summary."""
    lines = ["| model | nmse per layer | replacement | completeness | circuit-tracer (repl., compl.) | "
             "strongest path | graph's head | path patching's head |", "|" + "---|" * 8]
    for name in ("induction", "shakespeare"):
        if name not in results:
            continue
        r = results[name]
        g = r["graph"]
        ct = r.get("circuit_tracer", {})
        theirs = f"{ct['replacement']}, {ct['completeness']}" if "replacement" in ct else ct.get("skipped", "-")
        lines.append(f"| {name} | {r['transcoders']['nmse']} | {g['replacement']} | {g['completeness']} | {theirs} | "
                     f"{' -> '.join(g['strongest_path'])} | {g['graph_head']} "
                     f"({g['first_edge_by_head'][g['graph_head']]:.2f}) | {g['patching_head']} "
                     f"({g['value_path_patching'][g['patching_head']]:+.2f} logit) |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/graph_mechanisms"))
    parser.add_argument("--only", choices=["induction", "shakespeare"], help="one model only")
    parser.add_argument("--retrain", action="store_true", help="train again what is already in --out")
    parser.add_argument("--attn_steps", type=int, default=500, help="induction: steps with the MLPs held at zero "
                        "(the recipe's mlp_from_step)")
    parser.add_argument("--steps", type=int, default=1200, help="induction: steps in all (the recipe's max_steps)")
    parser.add_argument("--tc_steps", type=int, default=1000, help="induction: transcoder steps")
    parser.add_argument("--d_transcoder", type=int, default=512, help="induction: features per layer")
    parser.add_argument("--repeat", type=int, default=5, help="induction: tokens of the copy in the prompt")
    parser.add_argument("--char_tc_steps", type=int, default=600, help="shakespeare: transcoder steps")
    parser.add_argument("--char_prompt", default="\nROMEO:\nI will not go with th")
    parser.add_argument("--char_swaps", default="etaoinsrh", help="shakespeare: what the path's character "
                        "becomes for path patching (8 that differ from it, the effects averaged)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--results", type=Path, default=ROOT / "docs/results/graph_mechanisms.json")
    parser.add_argument("--image", type=Path, default=ROOT / "docs/images/graph-induction.png")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results: dict[str, Any] = {"cpu": cpu_name(), "threads": args.threads, "date": time.strftime("%Y-%m-%d"),
                               "command": " ".join(sys.argv[1:])}
    for name, part in (("induction", induction), ("shakespeare", shakespeare)):
        if args.only in (None, name):
            results[name] = part(args)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()

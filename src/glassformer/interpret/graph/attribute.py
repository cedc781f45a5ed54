"""Build an attribution graph: the direct, linear effects between input tokens, transcoder features, error
nodes and the top next-token logits of one prompt, in the model's *local replacement model*
(Ameisen et al. 2025, "Circuit Tracing"; the same algorithm and node order as circuit-tracer 0.5.0).

The local replacement model: every MLP output is the transcoders' reconstruction plus an *error* that makes
it exact; attention patterns and norm scales are held at their values on this prompt. With those frozen,
everything between one node's output and another node's input is linear (attention's V/O, the residual
stream, centring, skip connections), so the effect of source s on target t is one gradient contraction:
``A[t, s] = a_s * dec_s . d(in_t)/d(out)``, where ``in_t`` is t's encoder pre-activation (or the
demeaned logit). Each backward pass takes a batch of targets (one per copy of the prompt in the batch)
and gives a row of A for each, against every source at once.

Node order (rows = targets, columns = sources): active features by (layer, position, feature), then
error nodes (layer-major, ``n_layers * n_pos``), then token embeddings (``n_pos``), then logits.
Position 0 holds no features and no error (as circuit-tracer: its first position carries artefacts).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ...errors import ArgumentTypeError, GlassformerError
from ...io.budget import FLOAT, check_fits
from ...io.checks import check_int, check_number
from ...models.inputs import check_token_ids
from ...nn.freezing import frozen
from ..hooks import hooks, run_with_cache
from ..transcoders.format import Transcoders
from .graph import Graph, partial_influences

ALIASES = {"mlp.hook_in": "ln2.hook_out", "mlp.hook_out": "hook_mlp_out"}  # circuit-tracer's wrapper names


class _Stop(Exception):
    """Raised by the final-norm hook of the batched forward: the logits (B, T, V) are never needed there."""


def point_name(hook: str, layer: int) -> str:
    """The model's hook point for a transcoder hook inside block ``layer`` ("blocks.2.ln2.hook_normalized")."""
    return f"blocks.{layer}.{ALIASES.get(hook, hook)}"


@dataclass
class _Setup:
    """What one forward pass on the prompt gives: features, decoders, errors, embeddings, logits."""

    active: torch.Tensor  # (n, 3) long: layer, position, feature
    values: torch.Tensor  # (n,) activations
    encoders: torch.Tensor  # (n, d): W_enc rows of the active features
    dec_layer: torch.Tensor  # (m,) the layer each decoder vector writes to (PLT: m = n)
    dec_pos: torch.Tensor  # (m,)
    dec_node: torch.Tensor  # (m,) the feature node it belongs to
    decoders: torch.Tensor  # (m, d): activation * W_dec
    errors: torch.Tensor  # (L, T, d)
    embeds: torch.Tensor  # (T, d): the token embeddings hook_embed sees
    logits: torch.Tensor  # (V,) at the last position


def keeper(kept: dict, key: object) -> Callable:
    """A hook that keeps the first row of what it sees, in float32 and off autograd, as ``kept[key]``."""
    def keep(x: torch.Tensor, hook: object) -> None:
        kept[key] = x[0].detach().float()
    return keep


def _setup(model: nn.Module, tc: Transcoders, ids: torch.Tensor) -> _Setup:
    L = tc.n_layers
    inputs = [point_name(tc.feature_input_hook, layer) for layer in range(L)]
    outputs = [point_name(tc.feature_output_hook, layer) for layer in range(L)]
    with torch.no_grad():
        logits, kept = run_with_cache(model, ids[None], names=["hook_embed", *inputs, *outputs])
    active, values, encoders, dec_layer, dec_pos, dec_node, decoders = [], [], [], [], [], [], []
    recon = torch.stack([layer.b_dec for layer in tc.layers])[:, None, :].repeat(1, ids.shape[0], 1)  # (L, T, d)
    start = 0
    for layer, weights in enumerate(tc.layers):
        x = kept[inputs[layer]][0].float()  # (T, d)
        acts = tc.encode(layer, x)  # (T, d_tc)
        acts[:1] = 0  # position 0 holds no features
        pos, feat = acts.nonzero(as_tuple=True)
        n = pos.shape[0]
        active.append(torch.stack([torch.full_like(pos, layer), pos, feat], dim=1))
        values.append(acts[pos, feat])
        encoders.append(weights.W_enc[feat])
        nodes = torch.arange(start, start + n)
        start += n
        if weights.W_skip is not None:
            recon[layer] += x @ weights.W_skip.T
        if tc.kind == "plt":
            written = {layer: weights.W_dec[feat]}
        else:
            written = {layer + j: weights.W_dec[feat, j] for j in range(L - layer)}
        for target, rows in written.items():
            vecs = rows * acts[pos, feat][:, None]  # (n, d)
            recon[target].index_add_(0, pos, vecs)
            dec_layer.append(torch.full_like(pos, target))
            dec_pos.append(pos)
            dec_node.append(nodes)
            decoders.append(vecs)
    errors = torch.stack([kept[name][0].float() for name in outputs]) - recon
    errors[:, :1] = 0  # nor an error
    return _Setup(torch.cat(active), torch.cat(values), torch.cat(encoders), torch.cat(dec_layer),
                  torch.cat(dec_pos), torch.cat(dec_node), torch.cat(decoders), errors,
                  kept["hook_embed"][0].float(), logits[0, -1].float())


@dataclass
class LogitTargets:
    """The logits a graph explains: token ids, their probabilities and demeaned unembedding rows (k, d)."""

    ids: torch.Tensor
    probabilities: torch.Tensor
    vectors: torch.Tensor


def unembedding(model: nn.Module) -> torch.Tensor:
    """The model's output matrix (V, d) (the token embedding when tied)."""
    weight = model.head.weight
    return (model.embeddings.tok.weight if weight is None else weight).detach().float()


def select_logits(logits: torch.Tensor, unembed: torch.Tensor, max_n_logits: int = 10,
                  desired_logit_prob: float = 0.95, ids: Sequence[int] | None = None) -> LogitTargets:
    """The most likely next tokens until their probabilities add up to ``desired_logit_prob`` (at most
    ``max_n_logits``), or the given ``ids``; each with its unembedding row minus the mean row (a logit's
    gradient relative to the average logit, which is what the softmax sees)."""
    probs = torch.softmax(logits, dim=-1)
    if ids is None:
        top_p, top = probs.topk(min(max_n_logits, probs.shape[0]))
        cutoff = int(torch.searchsorted(top_p.cumsum(0), desired_logit_prob)) + 1
        chosen = top[:cutoff]
    else:
        chosen = torch.as_tensor(list(ids), dtype=torch.long)
        check_token_ids(chosen[None], probs.shape[0], "target_ids")
    return LogitTargets(chosen, probs[chosen], unembed[chosen] - unembed.mean(0, keepdim=True))


class _Replacement:
    """One forward pass of ``batch`` copies of the prompt through the local replacement model, kept for
    many backward passes (``rows`` gives attribution rows for up to ``batch`` targets at a time)."""

    def __init__(self, model: nn.Module, tc: Transcoders, ids: torch.Tensor, setup: _Setup, batch: int):
        self.tc, self.setup, self.batch = tc, setup, batch
        self.inputs: list[torch.Tensor | None] = [None] * tc.n_layers
        self.outputs: list[torch.Tensor | None] = [None] * tc.n_layers
        self.final: torch.Tensor | None = None
        self.embed: torch.Tensor | None = None
        pairs = [("hook_embed", self._embed), ("ln_final.hook_out", self._final)]
        for layer in range(tc.n_layers):
            pairs += [(point_name(tc.feature_input_hook, layer), self._input(layer)),
                      (point_name(tc.feature_output_hook, layer), self._output(layer))]
        if model.config.norm_first:  # the MLP's value is all that is used: keep its activations off autograd
            pairs += [(f"blocks.{layer}.ln2.hook_out", lambda x, hook: x.detach()) for layer in range(tc.n_layers)]
        with torch.enable_grad(), frozen(model), hooks(model, pairs), contextlib.suppress(_Stop):
            model(ids[None].expand(batch, -1))
        self.by_position = []  # per layer: (position, feature nodes, their decoder vectors (m, d)) written there
        for layer in range(tc.n_layers):
            mine = setup.dec_layer == layer
            pos, node, vecs = setup.dec_pos[mine], setup.dec_node[mine], setup.decoders[mine]
            self.by_position.append([(p, node[pos == p], vecs[pos == p]) for p in pos.unique().tolist()])
        if self.final is None:
            raise GlassformerError("the model has no ln_final.hook_out: attribution graphs need a decoder-only "
                                   "language model with a final norm")

    def _embed(self, x: torch.Tensor, hook: object) -> torch.Tensor:
        self.embed = x.detach().float().requires_grad_(True)
        return self.embed.to(x.dtype)

    def _final(self, x: torch.Tensor, hook: object) -> None:
        self.final = x
        raise _Stop

    def _input(self, layer: int) -> Callable:
        def fn(x: torch.Tensor, hook: object) -> None:
            self.inputs[layer] = x
        return fn

    def _output(self, layer: int) -> Callable:
        weights = self.tc.layers[layer]

        def fn(x: torch.Tensor, hook: object) -> torch.Tensor:
            source = self.inputs[layer]
            skip = source @ weights.W_skip.T if weights.W_skip is not None else source * 0
            out = skip + (x - skip).detach()  # the value of the MLP, the gradient of the skip path alone
            self.outputs[layer] = out
            return out
        return fn

    def rows(self, layers: torch.Tensor, positions: torch.Tensor, vectors: torch.Tensor,
             n_columns: int) -> torch.Tensor:
        """Attribution rows (k, n_columns) for k <= batch targets: target i reads ``vectors[i]`` (d,) at
        ``positions[i]`` of the input of block ``layers[i]`` (``n_layers``: the final norm's output)."""
        s, L = self.setup, self.tc.n_layers
        k = layers.shape[0]
        probe = 0
        for layer in layers.unique().tolist():
            at = (layers == layer).nonzero(as_tuple=True)[0]
            reads = self.final if layer == L else self.inputs[layer]
            inject = torch.zeros(self.batch, reads.shape[1], reads.shape[2], dtype=reads.dtype)
            inject[at, positions[at]] = vectors[at].to(reads.dtype)
            probe = probe + (reads * inject).sum()
        grads = torch.autograd.grad(probe, [*self.outputs, self.embed], retain_graph=True, allow_unused=True)
        rows = torch.zeros(k, n_columns)
        for layer in range(L):
            g = grads[layer]
            if g is None:
                continue
            g = g[:k].float()  # (k, T, d)
            if self.by_position[layer]:  # one small matmul a position: (k, d) @ (d, m_p)
                effect = torch.cat([g[:, p] @ vecs.T for p, _, vecs in self.by_position[layer]], dim=1)
                rows.index_add_(1, torch.cat([nodes for _, nodes, _ in self.by_position[layer]]), effect)
            T = g.shape[1]
            start = s.active.shape[0] + layer * T
            rows[:, start:start + T] = torch.einsum("ktd,td->kt", g, s.errors[layer])
        if grads[L] is not None:
            T = s.embeds.shape[0]
            start = s.active.shape[0] + L * T
            rows[:, start:start + T] = torch.einsum("ktd,td->kt", grads[L][:k].float(), s.embeds)
        return rows


def graph_bytes(model: nn.Module, tc: Transcoders, length: int, batch: int, n_features: int, n_logits: int,
                n_active: int | None = None) -> int:
    """What :func:`attribute` holds at its peak, in bytes: the batched forward with its autograd graph
    (measured: 9.6k floats a position and layer at d=384, h=6, T=64; counted as 16d + 3d_ff + 4hT), the edge
    rows and the square adjacency matrix over all nodes, and the active features' encoder and decoder rows
    (``n_active``, default ``n_features``)."""
    c = model.config
    per_position = c.n_layers * (16 * c.d_model + 3 * c.d_ff + 4 * c.n_heads * length)
    forward = batch * length * per_position * FLOAT
    n_nodes = n_features + (c.n_layers + 1) * length + n_logits
    decoder_rows = 1 if tc.kind == "plt" else (tc.n_layers + 1) / 2
    active = n_features if n_active is None else n_active
    vectors = int(active * c.d_model * (1 + decoder_rows)) + tc.n_layers * length * tc.d_transcoder
    return forward + (2 * n_nodes * n_nodes + vectors) * FLOAT


def attribute(model: nn.Module, tc: Transcoders, ids: Sequence[int] | torch.Tensor, *, prompt: str = "",
              max_n_logits: int = 10, desired_logit_prob: float = 0.95, target_ids: Sequence[int] | None = None,
              batch_size: int = 64, max_feature_nodes: int | None = None, update_interval: int = 4,
              max_memory: object = None, progress: Callable[[int, int], None] | None = None) -> Graph:
    """The unpruned attribution graph of ``ids`` (a prompt's token ids) in ``model`` with transcoders ``tc``.

    Args:
        model: a decoder-only TransformerLM (causal, final norm); ``tc`` must fit it.
        ids: token ids (T,), T >= 2; position 0 holds no features or errors (put a BOS token there).
        prompt: the text of ``ids``, kept in the graph.
        max_n_logits / desired_logit_prob: which logits are explained (circuit-tracer's defaults), unless
            ``target_ids`` names them.
        batch_size: targets per backward pass (and copies of the prompt in the one forward pass).
        max_feature_nodes: explain at most this many features (the most influential first), None: all.
        update_interval: batches between re-rankings of the features by influence.
        max_memory: a size ("4GB"): refuse before allocating when the estimate exceeds it (default: the
            memory available).
        progress: called as ``progress(done, total)`` after each backward batch.

    Returns:
        a :class:`Graph` (adjacency (N, N), rows = targets, columns = sources).
    """
    if not isinstance(tc, Transcoders):
        raise ArgumentTypeError(f"tc must be Transcoders (load_transcoders), got {type(tc).__name__}")
    tc.check_model(model)
    check_int("batch_size", batch_size, 1, 1 << 16)
    check_int("max_n_logits", max_n_logits, 1, 1 << 16)
    check_int("update_interval", update_interval, 1, 1 << 16)
    check_int("max_feature_nodes", max_feature_nodes, 1, allow_none=True)
    check_number("desired_logit_prob", desired_logit_prob, 0.0, 1.0)
    c = getattr(model, "config", None)
    if getattr(c, "arch", None) != "lm" or c.attn != "causal" or c.head_transform:
        raise GlassformerError("attribution graphs need a causal TransformerLM (decoder-only, no head transform)")
    ids = torch.as_tensor(ids, dtype=torch.long).flatten()
    check_token_ids(ids[None], c.vocab_size, "ids")
    if not 2 <= ids.shape[0] <= c.max_len:
        raise GlassformerError(f"the prompt must be 2 to {c.max_len} tokens long, got {ids.shape[0]}")
    check_fits(graph_bytes(model, tc, ids.shape[0], batch_size, 0, max_n_logits), "the attribution graph's "
               f"forward pass ({batch_size} copies of {ids.shape[0]} tokens)", max_memory)
    with _inference(model):
        return _edges(model, tc, ids, prompt, max_n_logits, desired_logit_prob, target_ids, batch_size,
                      max_feature_nodes, update_interval, max_memory, progress)


@contextlib.contextmanager
def _inference(model: nn.Module) -> Iterator[None]:
    """While inside, the model is in eval mode (no dropout) and its parameters ask for no gradient (the backward
    passes need the activations' alone: weight gradients would double their work); both come back after."""
    training, asking = model.training, [p for p in model.parameters() if p.requires_grad]
    model.eval()
    for p in asking:
        p.requires_grad_(False)
    try:
        yield
    finally:
        model.train(training)
        for p in asking:
            p.requires_grad_(True)


def _edges(model: nn.Module, tc: Transcoders, ids: torch.Tensor, prompt: str, max_n_logits: int,
           desired_logit_prob: float, target_ids: Sequence[int] | None, batch_size: int,
           max_feature_nodes: int | None, update_interval: int, max_memory: object,
           progress: Callable[[int, int], None] | None) -> Graph:
    """:func:`attribute`'s work once its arguments are checked: the forward pass on the prompt, then the rows of
    every logit and of the features explained, assembled into the graph (circuit-tracer's phases 3-5)."""
    c = model.config
    setup = _setup(model, tc, ids)
    targets = select_logits(setup.logits, unembedding(model), max_n_logits, desired_logit_prob, target_ids)
    n_active, T, L = setup.active.shape[0], ids.shape[0], tc.n_layers
    n_feat = n_active if max_feature_nodes is None else min(max_feature_nodes, n_active)
    n_logits = targets.ids.shape[0]
    logit_start = n_active + (L + 1) * T
    n_nodes = logit_start + n_logits
    check_fits(graph_bytes(model, tc, T, batch_size, n_feat, n_logits, n_active), f"the attribution graph ({n_nodes:,} "
               f"nodes, {n_active:,} active features)", max_memory)
    batch = min(batch_size, max(n_feat, n_logits))
    replacement = _Replacement(model, tc, ids, setup, batch)
    edges = torch.zeros(n_feat + n_logits, n_nodes)
    row_node = torch.zeros(n_feat + n_logits, dtype=torch.long)  # the node each row of ``edges`` explains
    filled = 0

    def explain(nodes: torch.Tensor, layers: torch.Tensor, positions: torch.Tensor, vectors: torch.Tensor) -> None:
        """The next rows of ``edges``: those of ``nodes``, which read ``vectors`` at ``positions`` of ``layers``."""
        nonlocal filled
        k = nodes.shape[0]
        edges[filled:filled + k, :logit_start] = replacement.rows(layers, positions, vectors, logit_start)
        row_node[filled:filled + k] = nodes
        filled += k
        if progress:
            progress(filled, n_logits + n_feat)

    for i in range(0, n_logits, batch):
        k = min(batch, n_logits - i)
        explain(torch.arange(logit_start + i, logit_start + i + k), torch.full((k,), L), torch.full((k,), T - 1),
                targets.vectors[i:i + k])
    visited = torch.zeros(n_active, dtype=torch.bool)
    while int(visited.sum()) < n_feat:
        if n_feat == n_active:
            pending = torch.arange(n_active)
        else:  # the most influential features not yet explained, by the rows so far
            influence = partial_influences(edges[:filled], targets.probabilities, row_node[:filled])
            ranked = influence[:n_active].argsort(descending=True)
            pending = ranked[~visited[ranked]][:min(update_interval * batch, n_feat - int(visited.sum()))]
        for j in range(0, pending.shape[0], batch):
            chosen = pending[j:j + batch]
            explain(chosen, setup.active[chosen, 0], setup.active[chosen, 1], setup.encoders[chosen])
            visited[chosen] = True
    replacement = None  # frees the batched forward and its autograd graph before the adjacency is built
    selected = visited.nonzero(as_tuple=True)[0]
    if n_feat < n_active:
        edges = edges[:, torch.cat([selected, torch.arange(n_active, n_nodes)])]
    edges = edges[row_node.argsort()]  # features in node order, then logits
    size = edges.shape[1]
    adjacency = torch.zeros(size, size)
    adjacency[:n_feat] = edges[:n_feat]
    adjacency[size - n_logits:] = edges[n_feat:]
    return Graph(prompt=prompt, input_tokens=ids, active_features=setup.active, activation_values=setup.values,
                 selected_features=selected, adjacency_matrix=adjacency, logit_ids=targets.ids,
                 logit_probabilities=targets.probabilities, vocab_size=c.vocab_size, n_layers=L,
                 scan=tc.scan, model_config={"d_model": c.d_model, "n_heads": c.n_heads, "d_ff": c.d_ff,
                                             "n_layers": L, "vocab_size": c.vocab_size})

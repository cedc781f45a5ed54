"""Circuits: path patching and automatic circuit discovery on the edge graph of a causal pre-norm
TransformerLM (n_kv_heads == n_heads): senders ``embed``, ``L{l}H{h}``, ``MLP{l}`` write into the stream
that receivers ``L{l}H{h}.q/.k/.v``, ``MLP{l}``, ``logits`` read (Elhage et al. 2021). Hooks rewrite each
receiver's input so one edge can be cut, patched or differentiated alone (docs/interpret.md).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError
from ..io.budget import check_fits, forward_bytes
from ..io.checks import check_int, check_number, shown
from ..models import TransformerLM
from ..models.inputs import check_token_ids
from ..validate import check_choice
from .hooks import Hooks

Metric = Callable[[torch.Tensor], torch.Tensor]
KINDS = ("q", "k", "v")


@dataclass
class EdgeGraph:
    """The senders and receivers of a TransformerLM, in forward order, and ``allowed``: (S, R) bool, True
    where an edge exists (the sender writes before the receiver reads)."""

    senders: list[str]
    receivers: list[str]
    allowed: torch.Tensor

    @classmethod
    def of(cls, model: nn.Module) -> "EdgeGraph":
        """The graph of ``model``; an error for a model it does not cover."""
        if not isinstance(model, TransformerLM) or model.config.attn != "causal":
            raise GlassformerError(f"circuits read causal TransformerLMs, got {type(model).__name__}")
        c = model.config
        if not c.norm_first:
            raise GlassformerError("circuits need a pre-norm model (norm_first=True): in a post-norm one the "
                                   "stream is not a sum of the components' writes")
        if (c.n_kv_heads or c.n_heads) != c.n_heads:
            raise GlassformerError(f"circuits need n_kv_heads == n_heads, this model has {c.n_kv_heads} and "
                                   f"{c.n_heads}")
        # places in forward order: layer l's heads read at 2 l and write for 2 l + 1 on, its MLP reads at
        # 2 l + 1 and writes for 2 l + 2 on; the logits read at 2 L
        senders, s_after, receivers, r_place = ["embed"], [0], [], []
        for layer, block in enumerate(model.blocks):
            heads = [f"L{layer}H{head}" for head in range(c.n_heads)]
            mlp = [] if block.ffn is None else [f"MLP{layer}"]
            receivers += [f"{head}.{k}" for head in heads for k in KINDS] + mlp
            r_place += [2 * layer] * (3 * len(heads)) + [2 * layer + 1] * len(mlp)
            senders += heads + mlp
            s_after += [2 * layer + 1] * len(heads) + [2 * layer + 2] * len(mlp)
        receivers.append("logits")
        r_place.append(2 * c.n_layers)
        return cls(senders, receivers, torch.tensor([[r >= s for r in r_place] for s in s_after]))

    def edges(self) -> list[tuple[str, str]]:
        """Every (sender, receiver) edge."""
        return [(self.senders[i], self.receivers[j]) for i, j in self.allowed.nonzero().tolist()]

    def index(self, edges: Sequence[tuple], length: int) -> torch.Tensor:
        """(S, R, T) bool: True at the given edges, each a (sender, receiver) pair (every position) or a
        (sender, receiver, position) triple (that query position of the receiver alone, from 0; -1: the last),
        for rows of ``length`` tokens; an error naming an unknown or impossible edge."""
        if isinstance(edges, (str, bytes)) or not isinstance(edges, Sequence):
            raise ArgumentTypeError(f"edges must be a list of (sender, receiver[, position]), got {shown(edges)}")
        chosen = torch.zeros(*self.allowed.shape, length, dtype=torch.bool)
        for edge in edges:
            if not (isinstance(edge, (tuple, list)) and len(edge) in (2, 3)
                    and all(isinstance(n, str) for n in edge[:2])):
                raise ArgumentTypeError(f"an edge is a (sender, receiver[, position]) of names, got {shown(edge)}")
            sender, receiver, *position = edge
            if sender not in self.senders or receiver not in self.receivers:
                raise GlassformerError(f"no edge {sender!r} -> {receiver!r}: senders are {self.senders[:6]}..., "
                                       f"receivers {self.receivers[:6]}...")
            i, j = self.senders.index(sender), self.receivers.index(receiver)
            if not self.allowed[i, j]:
                raise GlassformerError(f"{sender} does not write before {receiver} reads: no such edge")
            if position:  # a triple: that query position alone
                at = check_int(f"the position of edge {shown(edge)}", position[0], -length, length - 1)
                chosen[i, j, at] = True
            else:
                chosen[i, j] = True
        return chosen


class _EdgeRun:
    """Hooks for one forward that record every sender's write and rewrite receiver r's input, at the tap where
    the block reads it (a head's q/k/v input, the MLP's input, the last stream), as
    ``stream + sum_u weight[u, r] * (other[u] - write_u) + leaf[r]``; ``weight`` (S, R) or (S, R, T) (per
    position); ``other`` (S, B, T, d) None: no rewrite; ``leaf`` (R, B, T, d): zeros whose gradient is
    d metric / d receiver input; ``embed``: the embedding to run from."""

    def __init__(self, model: TransformerLM, graph: EdgeGraph, other: torch.Tensor | None = None,
                 weight: torch.Tensor | None = None, leaf: torch.Tensor | None = None,
                 embed: torch.Tensor | None = None):
        self.model, self.graph, self.other, self.weight = model, graph, other, weight
        self.leaf, self.embed = leaf, embed
        self.writes: dict[str, torch.Tensor] = {}  # sender -> (B, T, d)
        self.r_index = {name: j for j, name in enumerate(graph.receivers)}

    def hooks(self) -> list[tuple[str, Callable]]:
        L = len(self.model.blocks)
        out: list[tuple[str, Callable]] = [("blocks.0.hook_resid_pre", self._store("embed"))]
        if self.embed is not None:
            out.append(("hook_embed", lambda x, hook: self.embed.to(x.dtype)))
        else:  # kept beside the writes: the embedding eap-ig runs from
            out.append(("hook_embed", self._store("hook_embed")))
        for layer, block in enumerate(self.model.blocks):
            out += [*((f"blocks.{layer}.hook_{kind}_input", self._heads(layer, kind)) for kind in KINDS),
                    (f"blocks.{layer}.attn.hook_z", self._z(layer))]
            if block.ffn is not None:
                out += [(f"blocks.{layer}.hook_mlp_in", self._rewritten(f"MLP{layer}")),
                        (f"blocks.{layer}.hook_mlp_out", self._store(f"MLP{layer}"))]
        return out + [(f"blocks.{L - 1}.hook_resid_post", self._rewritten("logits"))]  # what the final norm reads

    def _store(self, sender: str) -> Callable:
        def hook(x: torch.Tensor, _: Any) -> torch.Tensor:
            self.writes[sender] = x
            return x
        return hook

    def _input(self, receiver: str, stream: torch.Tensor) -> torch.Tensor:
        """The receiver's input: the stream, rewritten (see the class text)."""
        j, x = self.r_index[receiver], stream
        if self.other is not None:
            col = self.weight[:, j]  # (S,), or (S, T): a weight per (query) position
            for i in col.reshape(len(col), -1).any(1).nonzero().flatten().tolist():
                w = col[i] if col.dim() == 1 else col[i][:, None]  # () or (T, 1), against (B, T, d)
                x = x + w * (self.other[i] - self.writes[self.graph.senders[i]])
        if self.leaf is not None:
            x = x + self.leaf[j]
        return x.to(stream.dtype)

    def _rewritten(self, receiver: str) -> Callable:
        return lambda x, _: self._input(receiver, x)

    def _heads(self, layer: int, kind: str) -> Callable:
        def hook(x: torch.Tensor, _: Any) -> torch.Tensor:  # x (B, T, h, d): the stream, one copy per head
            heads = [self._input(f"L{layer}H{head}.{kind}", x[:, :, head]) for head in range(x.shape[2])]
            return torch.stack(heads, dim=2)  # the block norms and projects each head's own input
        return hook

    def _z(self, layer: int) -> Callable:
        attention = self.model.blocks[layer].self_attn

        def hook(z: torch.Tensor, _: Any) -> torch.Tensor:  # (B, T, h, hd)
            writes = attention.per_head_output(z)  # (B, T, h, d): each head's write
            for head in range(writes.shape[2]):
                self.writes[f"L{layer}H{head}"] = writes[:, :, head]
            return z
        return hook

    def run(self, ids: torch.Tensor) -> torch.Tensor:
        """The logits of ``ids`` with these hooks."""
        with Hooks(self.model, self.hooks()):
            return self.model(ids)


def _checked_inputs(model: nn.Module, clean: torch.Tensor, corrupted: torch.Tensor) -> EdgeGraph:
    graph = EdgeGraph.of(model)
    for name, ids in (("clean", clean), ("corrupted", corrupted)):
        check_token_ids(ids, model.config.vocab_size, name)
        if 0 in ids.shape:
            raise GlassformerError(f"{name} must hold at least one sequence of at least one token, got shape "
                                   f"{tuple(ids.shape)}")
    if clean.shape != corrupted.shape:
        raise GlassformerError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} must have one shape")
    return graph


def metric_value(metric: Metric, logits: torch.Tensor, differentiable: bool = False) -> torch.Tensor:
    """``metric(logits)``, which must be a 0-dim float tensor (that requires grad, when ``differentiable``)."""
    if not callable(metric):
        raise ArgumentTypeError(f"metric must be a function of the logits, got {shown(metric)}")
    value = metric(logits)
    if not isinstance(value, torch.Tensor) or value.dim() != 0 or not value.dtype.is_floating_point:
        raise GlassformerError(f"metric must return a 0-dim float tensor from the logits, got {shown(value)}")
    if differentiable and not value.requires_grad:
        raise GlassformerError("metric must be differentiable: its value does not depend on the logits through "
                               "torch operations (no .item(), argmax or a new tensor)")
    return value


@torch.no_grad()
def sender_writes(model: TransformerLM, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, (S, B, T, d) every sender's write) of one plain forward of ``ids``."""
    return _recorded(model, EdgeGraph.of(model), ids)[:2]


def _recorded(model: TransformerLM, graph: EdgeGraph, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(logits, (S, B, T, d) every sender's write, (B, T, d) ``hook_embed``) of one plain forward of ``ids``."""
    run = _EdgeRun(model, graph)
    logits = run.run(ids)
    return logits, torch.stack([run.writes[name] for name in graph.senders]), run.writes["hook_embed"]


@torch.no_grad()
def path_patching(model: TransformerLM, clean: torch.Tensor, corrupted: torch.Tensor, metric: Metric,
                  edges: Sequence[tuple], *, direction: str = "noising") -> float:
    """How much of metric(clean) - metric(corrupted) the paths ``edges`` (e.g. ``[("L0H3", "L1H2.k")]``; a
    position as a third element, :meth:`EdgeGraph.index`) carry,
    positive when they carry the clean behaviour (docs/interpret.md, "One sign"). "noising" runs ``clean``
    with the edges carrying the corrupted writes: metric(clean) - metric(patched), what cutting them loses;
    "denoising" runs ``corrupted`` with the edges carrying the clean writes: metric(patched) - metric(corrupted)."""
    check_choice("direction", direction, ("noising", "denoising"))
    graph = _checked_inputs(model, clean, corrupted)
    weight = graph.index(edges, clean.shape[1]).float()  # (S, R, T)
    base_ids, other_ids = (clean, corrupted) if direction == "noising" else (corrupted, clean)
    _, other_writes = sender_writes(model, other_ids)
    base = float(metric_value(metric, model(base_ids)))
    patched = float(metric_value(metric, _EdgeRun(model, graph, other_writes, weight).run(base_ids)))
    return base - patched if direction == "noising" else patched - base


@dataclass
class EdgeScores:
    """Every edge's attribution (:func:`edge_attribution`): ``scores`` (S, R), the estimated metric(clean) -
    metric(the edge alone corrupted), path patching's noising sign (positive: the edge carries the clean
    behaviour; docs/interpret.md, "One sign"); 0 where there is no edge."""

    graph: EdgeGraph
    scores: torch.Tensor
    clean_metric: float
    corrupted_metric: float
    method: str
    by_position: torch.Tensor | None = None  # (S, R, T): each edge's score at each query position of its receiver

    def top(self, k: int = 10) -> list[tuple[str, str, float]]:
        """The ``k`` edges of largest |score|: [(sender, receiver, score)], largest first."""
        flat = self.scores.abs().masked_fill(~self.graph.allowed.to(self.scores.device), -1.0).flatten()
        order = flat.argsort(descending=True)[:check_int("k", k, 1)].tolist()
        R = len(self.graph.receivers)
        return [(self.graph.senders[i // R], self.graph.receivers[i % R], float(self.scores.flatten()[i]))
                for i in order if flat[i] >= 0]


def edge_attribution(model: TransformerLM, clean: torch.Tensor, corrupted: torch.Tensor, metric: Metric, *,
                     method: str = "eap-ig", steps: int = 8) -> EdgeScores:
    """Score every edge at once: ``(write_clean - write_corrupted) . d metric / d receiver input``, the
    gradient taken on the clean run ("eap") or averaged over ``steps`` embeddings from the corrupted to the
    clean one ("eap-ig", closer to exact patching): an estimate of :func:`path_patching` (noising) of each
    edge alone, with its sign (docs/interpret.md, "One sign")."""
    check_choice("method", method, ("eap", "eap-ig"))
    check_int("steps", steps, 1, 256)
    graph = _checked_inputs(model, clean, corrupted)
    # kept at once: each sender's clean, corrupted and delta writes, each receiver's leaf, gradient and sum,
    # both in float64 for the product, the per-position scores, and a forward pass
    positions = clean.numel() * model.config.d_model
    check_fits((5 * len(graph.senders) + 5 * len(graph.receivers)) * positions * 4
               + len(graph.senders) * len(graph.receivers) * clean.shape[1] * 12  # the per-position scores
               + forward_bytes(model.config, clean.shape[0], clean.shape[1]),
               f"edge_attribution over {len(graph.senders)} senders x {len(graph.receivers)} receivers on "
               f"{tuple(clean.shape)} tokens")
    with torch.no_grad():
        clean_logits, clean_writes, embed_clean = _recorded(model, graph, clean)
        corrupted_logits, corrupted_writes, embed_corrupted = _recorded(model, graph, corrupted)
    delta = clean_writes - corrupted_writes  # (S, B, T, d)
    alphas = [1.0] if method == "eap" else [(i + 0.5) / steps for i in range(steps)]
    grad_sum = torch.zeros(len(graph.receivers), *clean_writes.shape[1:], dtype=torch.float32, device=delta.device)
    for alpha in alphas:
        leaf = torch.zeros_like(grad_sum, requires_grad=True)
        embed = embed_corrupted + alpha * (embed_clean - embed_corrupted) if method == "eap-ig" else None
        with torch.enable_grad():
            value = metric_value(metric, _EdgeRun(model, graph, leaf=leaf, embed=embed).run(clean), True)
            (grad,) = torch.autograd.grad(value, leaf)
        grad_sum += grad
    grads = grad_sum / len(alphas)  # (R, B, T, d)
    by_position = torch.einsum("sbtd,rbtd->srt", delta.double(), grads.double())  # (S, R, T) per query position
    by_position = by_position.masked_fill(~graph.allowed[..., None].to(by_position.device), 0.0)
    return EdgeScores(graph, by_position.sum(-1).float(), float(metric_value(metric, clean_logits)),
                      float(metric_value(metric, corrupted_logits)), method, by_position.float())


@dataclass
class Circuit:
    """A found circuit (:func:`find_circuit`): ``edges`` [(sender, receiver, score)] by |score|, largest
    first; ``faithfulness`` (metric(circuit) - metric(corrupted)) / (metric(clean) - metric(corrupted)), where
    ``corrupted_metric`` is the empty circuit's under ``ablation``; ``curve`` [(edges kept, faithfulness)] of
    the sizes tried; ``logits`` (B, T, V) the circuit's run."""

    edges: list[tuple[str, str, float]]
    faithfulness: float
    circuit_metric: float
    clean_metric: float
    corrupted_metric: float
    method: str
    total_edges: int
    curve: list[tuple[int, float]] = field(default_factory=list)
    ablation: str = "corrupted"
    logits: torch.Tensor | None = field(default=None, repr=False)  # (B, T, V) the circuit's run

    def has_edge(self, sender: str, receiver: str) -> bool:
        """Whether ``sender -> receiver`` is in the circuit."""
        return any(s == sender and r == receiver for s, r, _ in self.edges)

    def to_dict(self) -> dict[str, Any]:
        """The circuit as JSON-able values (what a microscope record or a file holds)."""
        return {"edges": [[s, r, round(v, 5)] for s, r, v in self.edges], "faithfulness": round(self.faithfulness, 5),
                "circuit_metric": self.circuit_metric, "clean_metric": self.clean_metric,
                "corrupted_metric": self.corrupted_metric, "method": self.method, "total_edges": self.total_edges,
                "curve": [[k, round(f, 5)] for k, f in self.curve], "ablation": self.ablation}


ABLATIONS = ("corrupted", "mean", "zero", "resample")


def resample_rows(batch: int, seed: int = 0) -> torch.Tensor:
    """The row each row takes its writes from under ``ablation="resample"``: a seeded permutation of
    ``batch`` rows with no row left in place (batch >= 2)."""
    check_int("batch", batch, 2)
    g = torch.Generator().manual_seed(check_int("seed", seed, 0))
    shift = torch.randperm(batch, generator=g)  # a random cycle: row order[i] takes row order[i + 1]
    order = torch.empty(batch, dtype=torch.long)
    order[shift] = shift.roll(-1)
    return order


def _ablated_writes(writes: torch.Tensor, ablation: str, seed: int) -> torch.Tensor:
    """What non-circuit edges carry, from the reference (corrupted) rows' writes (S, B, T, d)."""
    check_choice("ablation", ablation, ABLATIONS)
    if ablation == "mean":
        return writes.mean(1, keepdim=True).expand_as(writes)  # each position's mean over the rows
    if ablation == "zero":
        return torch.zeros_like(writes)
    if ablation == "resample":
        if writes.shape[1] < 2:
            raise GlassformerError("ablation='resample' needs at least 2 rows (each row takes another's writes)")
        return writes[:, resample_rows(writes.shape[1], seed).to(writes.device)]
    return writes


@torch.no_grad()
def circuit_logits(model: TransformerLM, clean: torch.Tensor, corrupted: torch.Tensor,
                   edges: Sequence[tuple], *, ablation: str = "corrupted", seed: int = 0) -> torch.Tensor:
    """(B, T, V) the logits of the circuit ``edges`` alone, run on ``clean``: every other edge carries, in place
    of the sender's clean write, what ``ablation`` says, from the reference rows ``corrupted``: "corrupted"
    (the same row's corrupted write), "mean" (each position's mean over the reference rows), "zero"
    (nothing), "resample" (another reference row's write, :func:`resample_rows`; pass ``corrupted=clean`` for
    the classic mean and resample ablations). An edge is a (sender, receiver) pair, or a (sender, receiver,
    position) triple kept at that query position only (:meth:`EdgeGraph.index`)."""
    graph = _checked_inputs(model, clean, corrupted)
    return _circuit_run(model, graph, clean, edges, _ablated_writes(sender_writes(model, corrupted)[1], ablation, seed))


def _circuit_run(model: TransformerLM, graph: EdgeGraph, clean: torch.Tensor, edges: Sequence[tuple],
                 other: torch.Tensor) -> torch.Tensor:
    """(B, T, V) :func:`circuit_logits` given the writes ``other`` (S, B, T, d) the non-circuit edges carry."""
    kept = graph.index(edges, clean.shape[1])  # (S, R, T)
    weight = (graph.allowed[..., None] & ~kept).float()
    if bool((kept == kept[..., :1]).all()):
        weight = weight[..., 0]  # the same at every position: one weight per edge
    return _EdgeRun(model, graph, other, weight.to(clean.device)).run(clean)


def circuit_metric(model: TransformerLM, clean: torch.Tensor, corrupted: torch.Tensor, metric: Metric,
                   edges: Sequence[tuple], *, ablation: str = "corrupted", seed: int = 0) -> float:
    """``metric`` of :func:`circuit_logits` (the same arguments): the circuit ``edges`` alone, the rest ablated."""
    logits = circuit_logits(model, clean, corrupted, edges, ablation=ablation, seed=seed)
    return float(metric_value(metric, logits))


def find_circuit(model: TransformerLM, clean: torch.Tensor, corrupted: torch.Tensor, metric: Metric, *,
                 target: float = 0.9, method: str = "eap-ig", steps: int = 8,
                 scores: EdgeScores | None = None, ablation: str = "corrupted", seed: int = 0) -> Circuit:
    """The smallest set of top-ranked edges (by |EAP score|) whose circuit is ``target`` (0 to 1) faithful:
    sizes 1, 2, 4, ... are tried, then bisected; when none reaches ``target``, the whole graph.
    ``method``, ``steps``: as :func:`edge_attribution`, ignored when ``scores`` is given; ``ablation``, ``seed``:
    what the other edges carry (:func:`circuit_logits`); faithfulness is measured from the empty circuit's
    metric under that ablation (the corrupted metric for "corrupted"). The Circuit holds its run's ``logits``."""
    check_number("target", target, 0.0, 1.0)
    check_choice("ablation", ablation, ABLATIONS)  # before the attribution, which takes the longest
    scores = scores or edge_attribution(model, clean, corrupted, metric, method=method, steps=steps)
    ranked = scores.top(int(scores.graph.allowed.sum()))
    clean_m = scores.clean_metric
    graph = _checked_inputs(model, clean, corrupted)
    with torch.no_grad():  # what the other edges carry, the same for every size tried
        other = _ablated_writes(sender_writes(model, corrupted)[1], ablation, seed)

    def run(k: int) -> torch.Tensor:  # (B, T, V) the top k edges alone
        with torch.no_grad():
            return _circuit_run(model, graph, clean, [(s, r) for s, r, _ in ranked[:k]], other)

    baseline = scores.corrupted_metric if ablation == "corrupted" else float(metric_value(metric, run(0)))
    tried: dict[int, float] = {}  # edges kept -> the circuit's metric
    span = clean_m - baseline

    def faithful(k: int) -> float:
        """(metric(top k edges) - baseline) / (clean - baseline); nan when clean equals the baseline."""
        if k not in tried:
            tried[k] = float(metric_value(metric, run(k)))
        return (tried[k] - baseline) / span if span != 0 else float("nan")

    k, last = 1, 0
    while k < len(ranked) and not faithful(k) >= target:
        last, k = k, min(2 * k, len(ranked))
    if faithful(k) >= target:  # else k is every edge, and no size reaches the target
        lo, hi = last, k  # faithful(hi) >= target; lo is 0 or a size that fell short
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if faithful(mid) >= target else (mid, hi)
        k = hi
    logits = run(k)
    return Circuit(ranked[:k], faithful(k), tried[k], clean_m, baseline, scores.method, len(ranked),
                   [(n, faithful(n)) for n in sorted(tried)], ablation, logits)


def induction_task(repeated: torch.Tensor, length: int, start: int, low: int, vocab: int,
                   seed: int = 2) -> tuple[torch.Tensor, torch.Tensor, Metric]:
    """(clean, corrupted, metric) of a repeated-tokens probe ``repeated`` (B, start + 2n): the corrupted
    rows' first copy is other random tokens in [low, vocab); the metric is the mean log-probability of the
    second copy's next tokens."""
    B = repeated.shape[0]
    corrupted = repeated.clone()
    other = torch.randint(low, vocab, (B, length), generator=torch.Generator().manual_seed(seed))
    corrupted[:, start:start + length] = other.to(repeated.device)
    targets = repeated[:, start + length + 1:]

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, start + length:-1].float().log_softmax(-1).gather(-1, targets[..., None]).mean()
    return repeated, corrupted, metric


def induction_circuit(model: TransformerLM, probe: Any, *, method: str = "eap-ig", steps: int = 4,
                      target: float = 0.9) -> dict[str, Any]:
    """A microscope measurement: :func:`find_circuit` on the probe's :func:`induction_task`, as a dict."""
    clean, corrupted, metric = induction_task(probe.repeated, probe.length, probe.start, probe.low,
                                              model.config.vocab_size)
    return find_circuit(model, clean, corrupted, metric, method=method, steps=steps, target=target).to_dict()

"""An attribution graph and what is read from it: influence on the logits, pruning, and the replacement and
completeness scores (the definitions of circuit-tracer 0.5.0's ``graph.py``, written here from the paper's
description: influence is the logit-weighted sum of all paths through the row-normalised |A|)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from ...errors import GlassformerError
from ...io.checks import check_number


@dataclass
class Graph:
    """The unpruned graph of one prompt. Nodes: ``selected_features`` (indices into ``active_features``),
    errors (``n_layers * n_pos``, layer-major), tokens (``n_pos``), logits (``len(logit_ids)``), in this order;
    ``adjacency_matrix`` (N, N): row = target, column = source, the direct effect."""

    prompt: str
    input_tokens: torch.Tensor  # (T,) long
    active_features: torch.Tensor  # (n, 3) long: layer, position, feature
    activation_values: torch.Tensor  # (n,)
    selected_features: torch.Tensor  # (f,) indices into active_features
    adjacency_matrix: torch.Tensor  # (N, N) float32
    logit_ids: torch.Tensor  # (k,) long
    logit_probabilities: torch.Tensor  # (k,)
    vocab_size: int
    n_layers: int
    scan: str | None = None
    model_config: dict[str, Any] = field(default_factory=dict)
    token_strings: list[str] | None = None  # the prompt's tokens as text (for pages), when known
    logit_strings: list[str] | None = None

    @property
    def n_pos(self) -> int:
        """Prompt length T."""
        return int(self.input_tokens.shape[0])

    @property
    def n_features(self) -> int:
        """Feature nodes (the selected features)."""
        return int(self.selected_features.shape[0])

    @property
    def n_logits(self) -> int:
        """Logit nodes."""
        return int(self.logit_ids.shape[0])

    @property
    def logit_weights(self) -> torch.Tensor:
        """(N,): the logits' probabilities at their nodes, zero elsewhere."""
        weights = torch.zeros(self.adjacency_matrix.shape[0])
        weights[-self.n_logits:] = self.logit_probabilities.float()
        return weights

    def node_kind(self, index: int) -> tuple[str, int, int, int]:
        """(kind, layer, position, feature or token id) of node ``index``; kind is feature, error, token, logit."""
        f, T, L = self.n_features, self.n_pos, self.n_layers
        if index < f:
            layer, pos, feat = self.active_features[self.selected_features[index]].tolist()
            return "feature", layer, pos, feat
        if index < f + L * T:
            layer, pos = divmod(index - f, T)
            return "error", layer, pos, -1
        if index < f + (L + 1) * T:
            pos = index - f - L * T
            return "token", -1, pos, int(self.input_tokens[pos])
        return "logit", L, T - 1, int(self.logit_ids[index - f - (L + 1) * T])

    def influence(self) -> torch.Tensor:
        """(N,) each node's total influence on the logits: ``w (B + B² + ...)``, B the row-normalised |A|."""
        return total_influence(normalized(self.adjacency_matrix), self.logit_weights)

    def scores(self) -> tuple[float, float]:
        """(replacement, completeness). Replacement: the share of the tokens' and errors' influence that
        comes from tokens (1: every path from input to logits runs through features). Completeness: each
        node's share of non-error input, averaged with weights = its influence plus its logit weight."""
        f, T, L = self.n_features, self.n_pos, self.n_layers
        B = normalized(self.adjacency_matrix)
        weights = self.logit_weights
        influence = total_influence(B, weights)
        tokens = influence[f + L * T:f + (L + 1) * T].sum()
        errors = influence[f:f + L * T].sum()
        replacement = tokens / (tokens + errors)
        non_error = 1 - B[:, f:f + L * T].sum(dim=1)
        output = influence + weights
        completeness = (non_error * output).sum() / output.sum()
        return float(replacement), float(completeness)

    def prune(self, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> Pruned:
        """Keep the nodes that carry ``node_threshold`` of the influence (tokens and logits always), then the
        edges that carry ``edge_threshold`` of what is left, then drop features and errors left with no way
        out and features left with no way in, until nothing changes."""
        check_number("node_threshold", node_threshold, 0.0, 1.0)
        check_number("edge_threshold", edge_threshold, 0.0, 1.0)
        A, weights = self.adjacency_matrix, self.logit_weights
        f, keep_always = self.n_features, self.n_logits + self.n_pos
        influence = total_influence(normalized(A), weights)
        nodes = influence >= threshold_for(influence, node_threshold)
        nodes[-keep_always:] = True
        kept = A.clone()
        kept[~nodes] = 0
        kept[:, ~nodes] = 0
        B = normalized(kept)
        edge_scores = B * (total_influence(B, weights) + weights)[:, None]
        edges = edge_scores >= threshold_for(edge_scores.flatten(), edge_threshold)
        inner = slice(0, nodes.shape[0] - keep_always)

        def drop_dead_ends() -> None:
            nodes[inner] &= edges[:, inner].any(0)  # features and errors need a way out
            nodes[:f] &= edges[:f].any(1)  # features need a way in

        before = nodes.clone()
        drop_dead_ends()
        while not torch.equal(nodes, before):  # a node dropped may leave others without a way in or out
            before = nodes.clone()
            edges[~nodes] = False
            edges[:, ~nodes] = False
            drop_dead_ends()
        order = influence.argsort(descending=True)
        cumulative = torch.zeros_like(influence)
        cumulative[order] = influence[order].cumsum(0) / influence.sum()
        return Pruned(nodes, edges, cumulative)


class Pruned(NamedTuple):
    """A pruned graph: which nodes (N,) and edges (N, N) stay, and each node's cumulative influence rank
    (the share of all influence held by the nodes at least as influential as it)."""

    node_mask: torch.Tensor
    edge_mask: torch.Tensor
    cumulative_scores: torch.Tensor


def normalized(A: torch.Tensor) -> torch.Tensor:
    """|A| with each row summing to 1 (rows of zeros stay zero)."""
    B = A.abs()
    return B / B.sum(dim=1, keepdim=True).clamp(min=1e-10)


def total_influence(B: torch.Tensor, weights: torch.Tensor, rows: torch.Tensor | None = None,
                    max_iter: int = 1000) -> torch.Tensor:
    """``w B + w B² + ...`` (the graph is acyclic, so the series ends); a GlassformerError if it does not.
    ``rows``: the node each row of B explains, when B holds the rows of some nodes only."""
    step, total = weights, torch.zeros_like(weights)
    for _ in range(max_iter):
        step = (step if rows is None else step[rows]) @ B
        if not step.any():
            return total
        total += step
    raise GlassformerError(f"influence did not vanish after {max_iter} steps: the graph has a cycle")


def threshold_for(scores: torch.Tensor, share: float) -> torch.Tensor:
    """The score at which the largest scores, taken in order, first hold ``share`` of the total."""
    ordered = scores.sort(descending=True).values
    cumulative = ordered.cumsum(0) / ordered.sum()
    index = min(int(torch.searchsorted(cumulative, share)), ordered.shape[0] - 1)
    return ordered[index]


def partial_influences(edges: torch.Tensor, logit_probabilities: torch.Tensor, row_node: torch.Tensor,
                       max_iter: int = 128) -> torch.Tensor:
    """Influence of every column of a partly filled edge matrix (rows: the nodes ``row_node`` names), which
    ranks the features still to explain (circuit-tracer's ``max_feature_nodes`` queue)."""
    weights = torch.zeros(edges.shape[1])
    weights[-logit_probabilities.shape[0]:] = logit_probabilities.float()
    return total_influence(normalized(edges), weights, row_node, max_iter)

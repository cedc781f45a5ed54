"""What each feature of an SAE does, gathered for its page: its frequency, largest activation, histogram,
top-activating contexts, and (for a hook in the residual space the output layer reads) the tokens whose
logits its decoder direction raises and lowers most (through the unembedding; the final norm left out).
"""

from collections.abc import Iterator
from typing import Any

import torch

from ...io.checks import check_int
from .activations import ActivationSource
from .model import SparseAutoencoder

RESIDUAL_KINDS = ("embed", "resid_pre", "resid_mid", "resid_mid2", "resid_post", "attn_out", "mlp_out",
                  "cross_attn_out", "ln_final", "decoder_ln_final")


def _label(tokenizer: Any, i: int) -> str:
    return str(tokenizer.id_to_token(int(i))) if hasattr(tokenizer, "id_to_token") else str(i)


@torch.no_grad()
def feature_summary(sae: SparseAutoencoder, source: ActivationSource, windows: int = 128, *, top: int = 8,
                    before: int = 16, after: int = 4, bins: int = 20, logit_tokens: int = 8,
                    residual: bool | None = None) -> dict[str, Any]:
    """The JSON-able data of the feature pages from ``windows`` inputs of a held-out ``source``: ``top``
    contexts per feature (``before`` and ``after`` tokens around each peak), ``bins`` histogram bins and
    ``logit_tokens`` output tokens pushed up and down; features most frequent first. ``sae``: anything with
    ``encode``, ``W_dec`` (d_sae, d), ``hook`` and ``config.d_sae``/``config.kind`` (one layer of a transcoder
    set too); ``residual``: whether W_dec writes to the residual stream (None: as the source's hook says)."""
    check_int("windows", windows, 1, 1 << 20)
    for name, value, low in (("top", top, 1), ("before", before, 0), ("after", after, 0), ("bins", bins, 1),
                             ("logit_tokens", logit_tokens, 0)):
        check_int(name, value, low, 4096)
    d_sae = sae.config.d_sae
    token_rows, act_rows, valid_rows = [], [], []
    while sum(len(t) for t in token_rows) < windows:
        inputs = source.next_inputs()
        token_rows.append(inputs.tokens.cpu())
        act_rows.append(source.activations(inputs).cpu())
        valid_rows.append(inputs.valid.cpu())
    width = max(t.shape[1] for t in token_rows)
    pad = torch.nn.functional.pad
    tokens = torch.cat([pad(t, (0, width - t.shape[1])) for t in token_rows])  # (W, T)
    valid = torch.cat([pad(v, (0, width - v.shape[1])) for v in valid_rows])
    acts = torch.cat([pad(a, (0, 0, 0, width - a.shape[1])) for a in act_rows])  # (W, T, d_in)
    W, T = tokens.shape
    # Pass 1: each feature's frequency, largest activation, and top positions.
    fired = torch.zeros(d_sae, dtype=torch.long)
    peak = torch.zeros(d_sae)
    best_values = torch.full((0, d_sae), -1.0)
    best_index = torch.zeros((0, d_sae), dtype=torch.long)
    flat_valid = valid.reshape(-1)
    chunks = acts.reshape(W * T, -1).split(4096)

    def encoded() -> Iterator[tuple[int, torch.Tensor]]:  # (offset, (n, d_sae) features), padding zeroed
        offset = 0
        for chunk in chunks:
            yield offset, sae.encode(chunk) * flat_valid[offset:offset + len(chunk), None]
            offset += len(chunk)

    for offset, f in encoded():
        fired += (f > 0).sum(0)
        peak = torch.maximum(peak, f.max(0).values)
        k = min(top, len(f))
        values, index = f.topk(k, dim=0)  # (k, d_sae)
        best_values = torch.cat([best_values, values])
        best_index = torch.cat([best_index, index + offset])
        keep = best_values.topk(min(top, len(best_values)), dim=0)
        best_values, best_index = keep.values, best_index.gather(0, keep.indices)
    # Pass 2: histograms between 0 and each feature's peak.
    hist = torch.zeros(d_sae, bins, dtype=torch.long)
    for _, f in encoded():
        rows, cols = (f > 0).nonzero(as_tuple=True)
        b = (f[rows, cols] / peak[cols] * bins).long().clamp(max=bins - 1)
        hist.view(-1).index_add_(0, cols * bins + b, torch.ones_like(b))
    effects = _logit_effects(sae, source, logit_tokens, residual)
    n_tokens = int(valid.sum())
    features, used = [], set()
    order = sorted(range(d_sae), key=lambda i: (-int(fired[i]), i))
    for i in order:
        if fired[i] == 0:
            break
        contexts = []
        for value, at in zip(best_values[:, i].tolist(), best_index[:, i].tolist(), strict=True):
            if value <= 0:
                continue
            w, t = divmod(at, T)
            lo, hi = max(0, t - before), min(T, t + after + 1)
            ids = [int(x) for x, ok in zip(tokens[w, lo:hi].tolist(), valid[w, lo:hi].tolist(), strict=True) if ok]
            f_ctx = sae.encode(acts[w, lo:hi])[:, i].tolist()
            contexts.append({"tokens": ids, "acts": [round(a, 3) for a in f_ctx[:len(ids)]], "peak": t - lo})
            used.update(ids)
        feature = {"id": i, "frequency": round(int(fired[i]) / max(1, n_tokens), 6), "max": round(float(peak[i]), 4),
                   "hist": hist[i].tolist(), "contexts": contexts}
        if effects is not None:
            up, down = effects
            feature["up"] = [[int(t), round(float(v), 3)] for t, v in zip(up[1][i], up[0][i], strict=True)]
            feature["down"] = [[int(t), round(-float(v), 3)] for t, v in zip(down[1][i], down[0][i], strict=True)]
            used.update(t for t, _ in feature["up"] + feature["down"])
        features.append(feature)
    vocab = {str(i): _label(source.tokenizer, i) for i in sorted(used)}
    return {"hook": sae.hook, "tokens": n_tokens, "d_sae": d_sae, "kind": sae.config.kind,
            "dead": [i for i in range(d_sae) if fired[i] == 0], "vocab": vocab, "features": features,
            "logit_note": None if effects is not None else "this hook is not in the residual space the output "
                                                            "layer reads, so no output tokens are listed"}


def _logit_effects(sae: SparseAutoencoder, source: ActivationSource, n: int, residual: bool | None = None):
    """((top values, top ids), (bottom values, bottom ids)) of W_dec through the unembedding, or None."""
    point, model = source.point, source.model
    if residual is None:
        residual = point.stack != "encoder_blocks" and point.short in RESIDUAL_KINDS
    if n == 0 or not residual:
        return None
    if sae.W_dec.shape[-1] != model.config.d_model or not hasattr(model, "logits"):
        return None
    directions = sae.W_dec.detach()  # (d_sae, d)
    zero = torch.zeros(1, model.config.d_model, device=directions.device)
    effect = (model.logits(directions[None]) - model.logits(zero[None]))[0].float()  # (d_sae, V)
    n = min(n, effect.shape[-1])
    return effect.topk(n, dim=-1), (-effect).topk(n, dim=-1)

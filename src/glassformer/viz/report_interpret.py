"""The report's "why" sections from glassformer.interpret as shaded HTML tables: the logit lens, head scores
and ablation effects (the drop in the log-probability of the model's top prediction without one head)."""

import html
from collections.abc import Callable
from typing import Any

import torch

from ..interpret import head_ablation_effects, head_scores, logit_lens
from ..models import TransformerLM
from .i18n import text as tr

Label = Callable[[list[int]], list[str]]


def gather_interpret(model: TransformerLM, x: torch.Tensor, tokens: list[str], label: Label, *, lens: bool, heads: bool,
                     ablation: bool, low: int, bos: int | None, notes: list[str], lang: str,
                     **kwargs: Any) -> dict[str, Any] | None:
    """The data of the sections asked for (``lens``, ``heads``, ``ablation``) on the (1, T) input ``x``, or None.
    ``low``, ``bos``: the smallest ordinary token id and the start token; ``notes``: why a section was left out."""
    found: dict[str, Any] = {}
    if lens:
        top = logit_lens(model, x, top_k=5, **kwargs)  # (L + 1, 1, T, k)
        rows = [tr("lens.before", lang, block=i) for i in range(top.ids.shape[0] - 1)] + [tr("lens.output", lang)]
        cells = [[[{"id": int(i), "label": lab, "p": round(float(p), 4)}
                   for i, lab, p in zip(ids.tolist(), label(ids.tolist()), probs.tolist())]
                  for ids, probs in zip(layer_ids[0], layer_probs[0])]
                 for layer_ids, layer_probs in zip(top.ids, top.probs)]
        found["lens"] = {"tokens": tokens, "rows": rows, "top": cells}
    if heads:
        if model.config.attn != "causal":
            notes.append(tr("note.heads_causal_only", lang))
        else:
            length = max(2, min(20, (model.config.max_len - (bos is not None)) // 2))
            scores = head_scores(model, length, 8, low=low, bos=bos)
            found["heads"] = {"length": length, "previous_token": scores.previous_token.tolist(),
                              "induction": scores.induction.tolist(), "loss_first": scores.loss_first,
                              "loss_repeat": scores.loss_repeat}
    if ablation:
        with torch.no_grad():
            intact = model(x, **kwargs).float().log_softmax(-1)  # (1, T, V)
        choice = intact.argmax(-1, keepdim=True)  # the model's own top prediction at each position

        def metric(logits: torch.Tensor) -> torch.Tensor:
            return logits.float().log_softmax(-1).gather(-1, choice).mean()

        effects = head_ablation_effects(model, x, metric=metric, **kwargs)  # ablated - intact
        found["ablation"] = {"base": float(metric(intact)), "drop": (-effects).tolist()}
    return found or None


def _shade(value: float, rgb: tuple[int, int, int], scale: float = 1.0) -> str:
    """An inline background whose opacity is |value| / scale (clamped to [0, 1])."""
    alpha = min(1.0, abs(value) / scale) if scale > 0 else 0.0
    return f"background: rgba({rgb[0]}, {rgb[1]}, {rgb[2]}, {alpha * 0.85:.3f})"


def head_table(values: list[list[float]], cls: str, rgb: tuple[int, int, int], scale: float, fmt: str,
               lang: str = "en") -> str:
    """An (L, h) table of ``values``, each cell shaded by ``rgb`` (red below 0) as |value| / ``scale``, printed as
    ``fmt`` (the report's and the run page's head tables)."""
    heads = len(values[0])
    head = "".join(f"<th>{html.escape(tr('table.head', lang, head=h))}</th>" for h in range(heads))
    body = "".join(
        f"<tr><th>{html.escape(tr('table.layer', lang, layer=layer))}</th>" + "".join(
            f'<td style="{_shade(v, rgb if v >= 0 else (200, 60, 60), scale)}">{v:{fmt}}</td>' for v in row)
        + "</tr>" for layer, row in enumerate(values))
    return f'<table class="{cls}"><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>'


def interpret_html(data: dict[str, Any], shown: Callable[[str], str], lang: str = "en") -> str:
    """The sections' HTML (``shown`` escapes a token label for display; labels in ``lang``)."""

    def label(key: str, **fields: Any) -> str:
        return html.escape(tr(key, lang, **fields))

    parts = []
    if "lens" in data:
        lens = data["lens"]
        head = "".join(f'<th title="{label("lens.position", n=n)}"><code>{shown(t)}</code></th>'
                       for n, t in enumerate(lens["tokens"]))
        rows = []
        for name, cells in zip(lens["rows"], lens["top"]):
            tds = []
            for cands in cells:
                best = cands[0]
                title = html.escape(", ".join(f"{c['label']!r} {c['p']:.3f}" for c in cands))
                tds.append(f'<td class="gf-lens-cell" title="{title}" style="{_shade(best["p"], (70, 130, 220))}">'
                           f'<code>{shown(best["label"])}</code><span class="gf-p">{best["p"]:.2f}</span></td>')
            rows.append(f"<tr><th>{html.escape(name)}</th>{''.join(tds)}</tr>")
        parts.append(
            f'<section id="gf-lens"><h2>{label("lens.title")}</h2><p>{label("lens.intro")}</p>'
            f'<div class="gf-scroll"><table class="gf-lens"><thead><tr><th>{label("lens.read")}</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div></section>")
    if "heads" in data:
        h = data["heads"]
        parts.append(
            f'<section id="gf-heads"><h2>{label("heads.title")}</h2><p>'
            + label("heads.intro", length=h["length"], first=f"{h['loss_first']:.2f}",
                    repeat=f"{h['loss_repeat']:.2f}") + "</p>"
            f'<h3>{label("heads.previous")}</h3>'
            + head_table(h["previous_token"], "gf-head-table gf-prev", (70, 130, 220), 1.0, ".2f", lang)
            + f'<h3>{label("heads.induction")}</h3>'
            + head_table(h["induction"], "gf-head-table gf-induction", (60, 160, 90), 1.0, ".2f", lang)
            + "</section>")
    if "ablation" in data:
        a = data["ablation"]
        scale = max((abs(v) for row in a["drop"] for v in row), default=0.0)
        parts.append(
            f'<section id="gf-ablation"><h2>{label("ablation.title")}</h2><p>'
            + label("ablation.intro", base=f"{a['base']:.3f}") + "</p>"
            + head_table(a["drop"], "gf-head-table gf-ablation", (230, 140, 40), scale, ".3f", lang) + "</section>")
    return "\n".join(parts)

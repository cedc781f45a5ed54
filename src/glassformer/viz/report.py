"""write_report: one self-contained HTML page showing what a model does with one input.

The page holds everything inline (data as JSON, script and style from ``report_assets/``), so it
opens offline, from an e-mail attachment or a USB stick; a Content-Security-Policy forbids every
network request. It shows:

- the attention of every layer and head: a *head view* (one layer; a line from each query token to
  each key token, weight as opacity) and a *model view* (a layers x heads grid of heatmaps; click one
  to enlarge it). An encoder-decoder gets three views: encoder self-attention, decoder
  self-attention and cross-attention. A prefix-LM's prefix boundary and padded positions are marked;
- the shape of every step of the forward pass, the config and the parameter count;
- for models that generate, the generation trace: per step the top-k candidates and the choice.

Long inputs: the page scrolls, and inputs longer than ``max_tokens`` are cut to their first
``max_tokens`` tokens *before* the model runs, with a note saying so (the weights shown are then
exactly the model's weights for the text shown). Attention weights are stored as bytes (weight x 255,
about 0.002 precision), base64-encoded, one byte per weight.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError, check_int
from ..fileio import atomic_write
from ..generation.api import pad_id_for, special_id
from ..models.common import count_params
from ..nn.masks import check_prefix_len
from .i18n import HTML_LANG, js_labels, resolve_lang
from .i18n import text as tr
from .report_interpret import gather_interpret, interpret_html
from .shapes import shape_trace

PAD_LABEL = "<pad>"


@dataclass
class AttentionView:
    """One family of attention maps: (L, h, Tq, Tk) weights with the tokens along both axes."""

    key: str  # "self", "enc", "cross"
    title: str
    caption: str
    query_tokens: list[str]
    key_tokens: list[str]
    weights: torch.Tensor  # (L, h, Tq, Tk)
    query_pad: list[bool]
    key_pad: list[bool]
    prefix_len: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The view for the page's script: labels, pad flags, and the (L, h, Tq, Tk) weights as base64 bytes
        (weight x 255, rounded; row-major)."""
        L, h, Tq, Tk = self.weights.shape
        quantised = (self.weights.float().clamp(0, 1) * 255).round().to(torch.uint8)
        return {
            "key": self.key, "title": self.title, "caption": self.caption,
            "query_tokens": self.query_tokens, "key_tokens": self.key_tokens,
            "n_layers": L, "n_heads": h, "query_pad": self.query_pad, "key_pad": self.key_pad,
            "prefix_len": self.prefix_len,
            "weights": base64.b64encode(quantised.contiguous().numpy().tobytes()).decode("ascii"),
        }


@dataclass
class ReportData:
    """Everything the page shows, gathered from one forward pass (and one generation)."""

    title: str
    structure: str
    summary: str
    views: list[AttentionView]
    shapes: dict[str, list[int]]
    config: dict[str, Any]
    params: int
    params_by_part: dict[str, int]
    generation: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    interpret: dict[str, Any] | None = None  # logit lens, head scores, ablation effects (report_interpret.py)
    lang: str = "en"  # the language of the page's labels (glassformer.viz.i18n)

    def to_json(self) -> dict[str, Any]:
        """What the page's script reads (the ``gf-data`` element): title, views, shapes, params, notes, generation."""
        return {"title": self.title, "structure": self.structure, "views": [v.to_json() for v in self.views],
                "shapes": self.shapes, "params": self.params, "notes": self.notes,
                "generation": self.generation, "interpret": self.interpret, "labels": js_labels(self.lang)}


# ---------------------------------------------------------------------------------------------- inputs
def _to_ids(value: Any, tokenizer: Any, name: str, add_special_tokens: bool | None = False) -> list[int]:
    """Text (with a tokenizer) or token ids (a list, or a (T,) / (1, T) tensor) -> a list of ids.

    ``add_special_tokens=None`` encodes as the tokenizer does by default (a Hugging Face tokenizer adds
    its specials, as ``transformers`` does; glassformer's own tokenizers add none).
    """
    if isinstance(value, str):
        if tokenizer is None:
            raise ArgumentTypeError(f"{name} is text but no tokenizer was given; pass a tokenizer or token ids")
        ids = list(tokenizer.encode(value) if add_special_tokens is None
                   else tokenizer.encode(value, add_special_tokens=add_special_tokens))
    elif isinstance(value, torch.Tensor):
        if value.dim() == 2 and value.shape[0] == 1:
            value = value[0]
        if value.dim() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
            raise GlassformerError(f"{name} as a tensor must be integer ids of shape (T,) or (1, T), "
                                   f"got dtype {value.dtype} shape {tuple(value.shape)}")
        ids = [int(i) for i in value.tolist()]
    elif isinstance(value, Sequence) and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        ids = list(value)
    else:
        raise ArgumentTypeError(f"{name} must be text, a list of token ids or an id tensor, "
                                f"got {type(value).__name__}")
    if not ids:
        raise GlassformerError(f"{name} is empty: it gives no tokens")
    return ids


def _labels(ids: Sequence[int], tokenizer: Any, pad: Sequence[bool] | None = None) -> list[str]:
    """The printable piece of each id (the id itself without a tokenizer); padding shows as <pad>."""
    if tokenizer is None:
        labels = [str(i) for i in ids]
    elif hasattr(tokenizer, "id_to_token"):
        labels = [str(tokenizer.id_to_token(int(i))) for i in ids]
    else:  # a Hugging Face tokenizer
        labels = [str(t) for t in tokenizer.convert_ids_to_tokens([int(i) for i in ids])]
    if pad is not None:
        labels = [PAD_LABEL if p else t for t, p in zip(labels, pad, strict=True)]
    return labels


# What one report may be asked to draw: the page holds L x h x T^2 bytes of weights per attention view
# and one table row per generation step, so these bound its size (and the time to build it).
MAX_TOKENS = 2048  # longest input (max_tokens, pad_to)
MAX_STEPS = 1024  # generation trace steps
MAX_TOP_K = 100  # candidates shown per step


def check_report_options(*, max_tokens: int = 128, generate: int = 16, top_k: int = 5,
                         pad_to: int | None = None, prefix: str = "") -> None:
    """A one-line error naming the first option out of the bounds above (before any model runs);
    ``prefix`` goes before each name ("--" for the command line)."""
    check_int(f"{prefix}max_tokens", max_tokens, 1, MAX_TOKENS)
    check_int(f"{prefix}generate", generate, 0, MAX_STEPS)
    check_int(f"{prefix}top_k", top_k, 1, MAX_TOP_K)
    check_int(f"{prefix}pad_to", pad_to, 1, MAX_TOKENS, allow_none=True)


def _cap(ids: list[int], max_tokens: int, name: str, notes: list[str], lang: str = "en") -> list[int]:
    if len(ids) > max_tokens:
        notes.append(tr("note.cap", lang, name=tr(f"note.name.{name}", lang), n=len(ids), max_tokens=max_tokens))
        return ids[:max_tokens]
    return ids


def _pad(ids: list[int], pad_to: int | None, pad_id: int) -> tuple[list[int], list[bool]]:
    """Right-pad ``ids`` to ``pad_to`` tokens (at least ``len(ids)``) with ``pad_id``; return (ids, pad flags)."""
    if pad_to is None:
        return ids, [False] * len(ids)
    check_int("pad_to", pad_to, len(ids))
    n = pad_to - len(ids)
    return ids + [pad_id] * n, [False] * len(ids) + [True] * n


# ---------------------------------------------------------------------------------------------- gather
STRUCTURES = {"causal": "decoder-only (causal)", "bidirectional": "encoder-only (bidirectional)",
              "prefix": "prefix-LM"}


def _structure(config: Any) -> str:
    return "encoder-decoder" if config.arch == "encoder-decoder" else STRUCTURES[config.attn]


def _structure_label(config: Any, lang: str) -> str:
    """The structure's name in ``lang`` (the page's data keeps the English one)."""
    return tr("structure." + ("encoder-decoder" if config.arch == "encoder-decoder" else config.attn), lang)


def _params_by_part(model: nn.Module) -> dict[str, int]:
    """Trainable parameters of each top-level part; a shared (tied) matrix counts at its first owner."""
    seen: set[int] = set()
    parts: dict[str, int] = {}
    for name, child in [("", model)] + list(model.named_children()):
        params = child.parameters(recurse=bool(name)) if name else model.parameters(recurse=False)
        n = 0
        for p in params:
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
        if n:
            parts[name or "(model)"] = n
    return parts


def _stack(weights: list[torch.Tensor]) -> torch.Tensor:
    """[(1, h, Tq, Tk)] per layer -> (L, h, Tq, Tk)."""
    return torch.stack([w[0] for w in weights]).detach().float().cpu()


def _generation_trace(model: nn.Module, tokenizer: Any, ids: list[int], steps: int, top_k: int,
                      **options: Any) -> dict[str, Any]:
    """Per step of a greedy continuation: the top-k candidates with probabilities and the choice."""
    from ..generation.trace import trace_generation

    eos = special_id(tokenizer, "eos")
    if eos is not None:
        options["eos_token_id"] = eos
    records = trace_generation(model, ids, steps, top_k=top_k, **options)
    rows = [{"chosen": r["chosen"], "chosen_label": _labels([r["chosen"]], tokenizer)[0],
             "candidates": [{"id": i, "label": _labels([i], tokenizer)[0], "p": p} for i, p in r["top_k"]]}
            for r in records]
    new_ids = [r["chosen"] for r in rows]
    text = tokenizer.decode(new_ids) if tokenizer is not None else " ".join(map(str, new_ids))
    if new_ids and not text.strip():  # only special tokens (an untrained model's <bos> ...): show them
        text = "".join(r["chosen_label"] for r in rows)
    return {"steps": rows, "ids": new_ids, "continuation": text, "top_k": top_k}


def _trace_notes(generation: dict[str, Any] | None, notes: list[str]) -> None:
    """A note when the trace looks like an untrained model's: the same token chosen at every step."""
    if generation and len(generation["ids"]) >= 4 and len(set(generation["ids"])) == 1:
        notes.append(f"The greedy choice is {generation['steps'][0]['chosen_label']!r} at every step of the "
                     "generation trace: what a model with random weights (a --preset, untrained) does. Train it, "
                     "or inspect a checkpoint, for a trace that means something.")


@torch.no_grad()
def gather(
    model: nn.Module,
    tokenizer: Any,
    text: str | Sequence[int] | torch.Tensor,
    target: str | Sequence[int] | torch.Tensor | None = None,
    *,
    prefix_len: int | None = None,
    pad_to: int | None = None,
    start_id: int | None = None,
    generate: int = 16,
    top_k: int = 5,
    max_tokens: int = 128,
    add_special_tokens: bool | None = None,
    title: str | None = None,
    logit_lens: bool = False,
    head_scores: bool = False,
    ablation: bool = False,
    lang: str = "en",
) -> ReportData:
    """Run the model once with attention weights on and collect what :func:`write_report` shows.

    Arguments are those of :func:`write_report`. Returns a :class:`ReportData` whose views hold
    (L, h, Tq, Tk) weights; the model's training mode is restored.
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "arch"):
        raise ArgumentTypeError(f"model must be a glassformer TransformerLM or EncoderDecoder, "
                                f"got {type(model).__name__}")
    check_report_options(max_tokens=max_tokens, generate=generate, top_k=top_k, pad_to=pad_to)
    lang = resolve_lang(lang)
    structure = _structure(config)
    notes: list[str] = []
    ids = _to_ids(text, tokenizer, "text", add_special_tokens)
    if not ids:
        raise GlassformerError("text is empty (it encodes to no tokens); give at least one character")
    eos = special_id(tokenizer, "eos")
    if config.arch == "encoder-decoder" and isinstance(text, str) and eos is not None and ids[-1] != eos:
        ids.append(eos)  # a source ends with eos, as in glassformer's seq2seq data
    ids = _cap(ids, max_tokens, "text", notes, lang)
    tgt = None if target is None else _cap(_to_ids(target, tokenizer, "target"), max_tokens, "target", notes, lang)
    pad_id = pad_id_for(tokenizer)
    was_training = model.training
    model.eval()
    try:
        if config.arch == "encoder-decoder":
            data = _gather_encdec(model, tokenizer, ids, tgt, pad_to, pad_id, start_id, prefix_len, generate,
                                  top_k, notes, lang)
            asked = dict(lens=logit_lens, heads=head_scores, ablation=ablation)
            interpret = gather_interpret(model, None, [], list, notes=notes, lang=lang, **asked)  # a note when asked
        else:
            data = _gather_lm(model, tokenizer, ids, tgt, pad_to, pad_id, prefix_len, generate, top_k, notes, lang)
            interpret = _gather_interpret_lm(model, tokenizer, data[3], logit_lens, head_scores, ablation, notes,
                                             lang)
    finally:
        model.train(was_training)
    views, shapes, generation = data[:3]
    params = count_params(model)
    dims = (tr("report.dims_encdec", lang, enc=config.n_enc, dec=config.n_dec) if config.arch == "encoder-decoder"
            else tr("report.dims_lm", lang, layers=config.n_layers))
    shown_structure = _structure_label(config, lang)
    summary = tr("report.summary", lang, model=type(model).__name__, structure=shown_structure, dims=dims,
                 heads=config.n_heads, d_model=config.d_model, params=f"{params:,}")
    return ReportData(title=title or tr("report.title", lang, structure=shown_structure), structure=structure,
                      summary=summary,
                      views=views, shapes=shapes, config=config.to_dict(), params=params,
                      params_by_part=_params_by_part(model), generation=generation, notes=notes,
                      interpret=interpret, lang=lang)


def _gather_interpret_lm(model, tokenizer, inputs, lens, heads, ablation, notes, lang="en"):
    """The report_interpret sections of a TransformerLM's input ``inputs`` = (x, pad, prefix_len, tokens)."""
    x, pad, prefix_len, tokens = inputs
    specials = getattr(tokenizer, "specials", None) or ()
    first = len(specials) if specials and special_id(tokenizer, specials[0]) == 0 else 0  # specials first: skip them
    return gather_interpret(model, x, tokens, lambda ids: _labels(ids, tokenizer), lens=lens, heads=heads,
                            ablation=ablation, low=first,
                            bos=special_id(tokenizer, "bos"), notes=notes, lang=lang, pad=pad,
                            prefix_len=prefix_len)


def _gather_lm(model, tokenizer, ids, tgt, pad_to, pad_id, prefix_len, generate, top_k, notes, lang="en"):
    attn = model.config.attn
    if attn == "prefix":
        if tgt is not None:
            prefix_len = len(ids) if prefix_len is None else prefix_len
            ids = ids + tgt
        elif prefix_len is None:
            prefix_len = len(ids)
            notes.append(tr("note.no_target_prefix", lang))
        prefix_len = check_prefix_len(prefix_len, len(ids), batch=1)
        if isinstance(prefix_len, torch.Tensor):  # a (1,) tensor: the report shows one row
            prefix_len = int(prefix_len[0])
    elif tgt is not None:
        raise GlassformerError(f"target is used by prefix-LM and encoder-decoder models; this model is "
                               f"attn={attn!r} (put the whole input in text)")
    elif prefix_len is not None:
        raise GlassformerError(f"prefix_len is only meaningful for attn='prefix' models; "
                               f"this model is attn={attn!r}")
    real = ids
    ids, pad = _pad(ids, pad_to, pad_id)
    x = torch.tensor([ids], device=next(model.parameters()).device)
    pad_t = torch.tensor([pad], device=x.device) if any(pad) else None
    _, weights = model(x, pad=pad_t, prefix_len=prefix_len, return_attn=True)
    tokens = _labels(ids, tokenizer, pad)
    caption = tr(f"caption.{attn}", lang, prefix_len=prefix_len) + (tr("caption.padded", lang) if any(pad) else "")
    views = [AttentionView("self", tr("view.self", lang), caption, tokens, tokens, _stack(weights), pad, pad,
                           prefix_len if attn == "prefix" else None)]
    shapes = shape_trace(model, x, depth=2, pad=pad_t, prefix_len=prefix_len)
    generation = None
    if generate and attn != "bidirectional":
        options = {"prefix_len": prefix_len} if attn == "prefix" else {}
        if tgt is not None:  # the model's own answer to the prefix, as long as the target: compare the two
            real, generate = real[:prefix_len], min(generate, len(tgt))
            notes.append(f"The generation trace answers the prefix alone, for the target's {len(tgt)} tokens: "
                         "compare its choices with the target.")
        generation = _generation_trace(model, tokenizer, real, generate, top_k, **options)
        _trace_notes(generation, notes)
    elif attn == "bidirectional":
        notes.append(tr("note.encoder_only", lang))
    return views, shapes, generation, (x, pad_t, prefix_len, tokens)


def _gather_encdec(model, tokenizer, src, tgt, pad_to, pad_id, start_id, prefix_len, generate, top_k, notes,
                   lang="en"):
    if prefix_len is not None:
        raise GlassformerError("prefix_len is only meaningful for attn='prefix' models, not an encoder-decoder")
    start = special_id(tokenizer, "bos") if start_id is None else start_id
    if start is None:
        raise GlassformerError("an encoder-decoder report needs the decoder's start token: pass start_id "
                               "or use a tokenizer with a bos token")
    generation = None
    if generate:
        steps = generate if tgt is None else min(generate, len(tgt) + 1)  # a target's length and its eos
        generation = _generation_trace(model, tokenizer, src, steps, top_k, decoder_start_token_id=start)
        _trace_notes(generation, notes)
    if tgt is None:
        tgt = generation["ids"] if generation else []
        notes.append(tr("note.no_target_encdec" if generation else "note.no_target_encdec_alone", lang))
    src, src_pad = _pad(src, pad_to, pad_id)
    device = next(model.parameters()).device
    s = torch.tensor([src], device=device)
    t = torch.tensor([[start] + tgt], device=device)
    src_pad_t = torch.tensor([src_pad], device=device) if any(src_pad) else None
    _, log = model(s, t, src_pad=src_pad_t, return_attn=True)
    src_tokens = _labels(src, tokenizer, src_pad)
    tgt_tokens = _labels(t[0].tolist(), tokenizer)
    tgt_pad = [False] * len(tgt_tokens)
    padded = tr("caption.padded_source", lang) if any(src_pad) else ""
    views = [
        AttentionView("enc", tr("view.enc", lang), tr("caption.enc", lang) + padded,
                      src_tokens, src_tokens, _stack(log["enc"]), src_pad, src_pad),
        AttentionView("self", tr("view.dec", lang), tr("caption.dec", lang),
                      tgt_tokens, tgt_tokens, _stack(log["self"]), tgt_pad, tgt_pad),
        AttentionView("cross", tr("view.cross", lang), tr("caption.cross", lang) + padded,
                      tgt_tokens, src_tokens, _stack(log["cross"]), tgt_pad, src_pad),
    ]
    shapes = shape_trace(model, s, t, depth=2, src_pad=src_pad_t)
    return views, shapes, generation


# ---------------------------------------------------------------------------------------------- render
def _asset(name: str) -> str:
    return resources.files("glassformer.viz").joinpath("report_assets", name).read_text(encoding="utf-8")


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element: no '<', '>' or '&' can end it early."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _table(rows: list[tuple[str, str]], cls: str, head: tuple[str, str]) -> str:
    body = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in rows)
    return (f'<table class="{cls}"><thead><tr><th>{html.escape(head[0])}</th><th>{html.escape(head[1])}</th>'
            f"</tr></thead><tbody>{body}</tbody></table>")


def _shown(token: str) -> str:
    """A token with its whitespace made visible (as the page's script does): ↵ ⇥, and ␣ for spaces alone."""
    token = token.replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")
    return html.escape(token.replace(" ", "␣") if token and not token.strip(" ") else token)


def _generation_html(gen: dict[str, Any], lang: str = "en") -> str:
    rows = []
    for n, step in enumerate(gen["steps"], start=1):
        cells = []
        for cand in step["candidates"]:
            chosen = " gf-chosen" if cand["id"] == step["chosen"] else ""
            bar = f'<span class="gf-bar" style="width:{100 * cand["p"]:.1f}%"></span>'
            cells.append(f'<td class="gf-cand{chosen}" title="id {cand["id"]}">{bar}<span class="gf-cand-text">'
                         f'<code>{_shown(cand["label"])}</code> {cand["p"]:.3f}</span></td>')
        chosen_label = _shown(step["chosen_label"])
        rows.append(f'<tr class="gf-step"><td>{n}</td><td><code>{chosen_label}</code></td>'
                    f'{"".join(cells)}</tr>')
    head = "".join(f"<th>#{k + 1}</th>" for k in range(gen["top_k"]))
    return (f'<p>{html.escape(tr("generation.continuation", lang))} <code class="gf-continuation">'
            f'{html.escape(gen["continuation"])}</code></p>'
            f'<table class="gf-generation"><thead><tr><th>{html.escape(tr("generation.step", lang))}</th>'
            f'<th>{html.escape(tr("generation.chosen", lang))}</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "font-src 'none'; connect-src 'none'")


def render_html(data: ReportData) -> str:
    """The report page for ``data``: one HTML document, everything inline."""
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in data.notes)
    tabs = "".join(f'<button class="gf-tab" data-view="{v.key}">{html.escape(v.title)}</button>'
                   for v in data.views)
    config_rows = [(k, json.dumps(v)) for k, v in data.config.items()]
    lang = data.lang

    def label(key: str, **fields: Any) -> str:
        return html.escape(tr(key, lang, **fields))

    part_rows = [(k, f"{v:,}") for k, v in data.params_by_part.items()]
    part_rows.append((tr("model.total", lang), f"{data.params:,}"))
    shape_rows = [(k, "(" + ", ".join(map(str, v)) + ")") for k, v in data.shapes.items()]
    generation = ""
    if data.generation is not None:
        gen = data.generation
        generation = (f'<section id="gf-generation"><h2>{label("section.generation")}</h2>'
                      f'<p>{label("generation.intro", steps=len(gen["steps"]), top_k=gen["top_k"])}</p>'
                      f"{_generation_html(gen, lang)}</section>")
    return f"""<!DOCTYPE html>
<html lang="{HTML_LANG[lang]}">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{html.escape(data.title)}</title>
<style>
{_asset("report.css")}
</style>
</head>
<body>
<header>
<h1>{html.escape(data.title)}</h1>
<p class="gf-summary">{html.escape(data.summary)}</p>
{f'<ul class="gf-notes">{notes}</ul>' if notes else ""}
</header>
<section id="gf-attention">
<h2>{label("section.attention")}</h2>
<nav class="gf-tabs">{tabs}</nav>
<div id="gf-views"></div>
<noscript>{label("noscript")}</noscript>
</section>
{generation}
{interpret_html(data.interpret, _shown, lang) if data.interpret else ""}
<section id="gf-shapes"><h2>{label("section.shapes")}</h2>
<p>{label("shapes.intro")}</p>
{_table(shape_rows, "gf-shape-table", (tr("shapes.step", lang), tr("shapes.shape", lang)))}</section>
<section id="gf-config"><h2>{label("section.model")}</h2>
<p>{label("model.params", params=f"{data.params:,}")}</p>
{_table(part_rows, "gf-param-table", (tr("model.part", lang), tr("model.parameters", lang)))}
{_table(config_rows, "gf-config-table", (tr("model.field", lang), tr("model.value", lang)))}</section>
<footer>{label("footer")}</footer>
<script type="application/json" id="gf-data">{_script_json(data.to_json())}</script>
<script>
{_asset("report.js")}
</script>
</body>
</html>
"""


def report_html(model: nn.Module, tokenizer: Any, text: str | Sequence[int] | torch.Tensor,
                target: str | Sequence[int] | torch.Tensor | None = None, **kwargs: Any) -> str:
    """The report page as a string; arguments as for :func:`write_report`."""
    return render_html(gather(model, tokenizer, text, target, **kwargs))


def write_report(
    model: nn.Module,
    tokenizer: Any,
    text: str | Sequence[int] | torch.Tensor,
    target: str | Sequence[int] | torch.Tensor | None = None,
    out: str | Path = "report.html",
    **kwargs: Any,
) -> Path:
    """Write a self-contained HTML report of ``model`` reading ``text``.

    Args:
        model: a TransformerLM (causal, bidirectional or prefix) or EncoderDecoder, e.g. from
            ``glassformer.load`` or a Hugging Face model converted by ``glassformer.interop``.
        tokenizer: a glassformer (or Hugging Face) tokenizer, or None when text and target are ids.
        text: the input: text, or token ids (a list, a (T,) or (1, T) tensor). For an
            encoder-decoder the source (text gets the tokenizer's eos appended, as in
            glassformer's seq2seq data); for a prefix-LM the prefix.
        target: encoder-decoder: the target (the decoder reads the start token, then the target);
            prefix-LM: the continuation after the prefix. Other models take none.
        out: the HTML file to write (its folder is created).
    Keyword args:
        prefix_len: prefix-LM only: prefix length (default: the length of ``text``).
        pad_to: right-pad ``text`` with the pad token to this many tokens, with a padding mask,
            to show how padding is masked.
        start_id: the decoder's start token (default: the tokenizer's bos token).
        generate: steps of the greedy generation trace for causal and prefix LMs (0: none).
        top_k: candidates shown per generation step.
        max_tokens: inputs longer than this are cut to their first ``max_tokens`` tokens
            (with a note in the report); the page holds L·h·T² bytes of weights per view.
        add_special_tokens: True/False: whether the tokenizer adds bos/eos (or [CLS]/[SEP]) around
            ``text``; None (default): the tokenizer's own default (a Hugging Face tokenizer adds them,
            as ``transformers`` does; glassformer's char, byte and BPE tokenizers do not).
        title: the page title.
        lang: the language of the page's labels, notes and captions: "en" (default) or "zh"
            (glassformer.viz.i18n; ``glassformer inspect --lang`` also follows the locale).
        logit_lens, head_scores, ablation: add the sections of glassformer.interpret (TransformerLM
            only): the logit lens (layers x positions, top tokens), each head's previous-token and
            induction score (causal models), and each head's ablation effect (one forward per head).
    Returns:
        The path written.
    """
    path = Path(out)
    page = report_html(model, tokenizer, text, target, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, page, what="report")  # never a folder, a device or a link
    return path


# ---------------------------------------------------------------------------------------------- notebooks
class Report:
    """A report page held in memory: shows inline in Jupyter, ``save(path)`` writes it.

    In a notebook the page is shown in a sandboxed ``<iframe>`` (its script may run, its style and
    element ids cannot clash with the notebook's or another report's).

    Args:
        html: the page, as :func:`report_html` returns it.
    """

    def __init__(self, html: str):
        self.html = html

    @classmethod
    def build(cls, model: nn.Module, tokenizer: Any, text: str | Sequence[int] | torch.Tensor,
              target: str | Sequence[int] | torch.Tensor | None = None, **kwargs: Any) -> Report:
        """The report of ``model`` reading ``text``; arguments as for :func:`write_report`."""
        return cls(report_html(model, tokenizer, text, target, **kwargs))

    @classmethod
    def open(cls, path: str | Path) -> Report:
        """A report page written earlier (by :func:`write_report` or ``glassformer inspect``)."""
        return cls(Path(path).read_text(encoding="utf-8"))

    def save(self, path: str | Path) -> Path:
        """Write the page to ``path`` (its folder is created); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, self.html, what="report")
        return path

    def _repr_html_(self) -> str:
        """Jupyter's hook: the page in a sandboxed iframe."""
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" sandbox="allow-scripts" '
                'style="width: 100%; height: 720px; border: 1px solid #ddd" title="glassformer report"></iframe>')

    def __repr__(self) -> str:
        return f"Report({len(self.html):,} characters of HTML)"

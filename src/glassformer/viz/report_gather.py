"""The report's data: one forward pass with attention weights on (and a generation trace) as a :class:`ReportData`."""

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError
from ..generation.api import pad_id_for, special_id
from ..models.common import count_params
from ..models.inputs import check_prefix_len
from .i18n import js_labels, resolve_lang
from .i18n import text as tr
from .report_interpret import gather_interpret
from .report_tokens import cap_ids, check_report_options, generation_trace, pad_ids, to_ids, token_labels
from .shapes import shape_trace


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
        """The view for the page's script; the weights as base64 bytes (weight x 255, rounded; row-major)."""
        L, h, Tq, Tk = self.weights.shape
        quantised = (self.weights.float().clamp(0, 1) * 255).round().to(torch.uint8)
        return {"key": self.key, "title": self.title, "caption": self.caption, "query_tokens": self.query_tokens,
                "key_tokens": self.key_tokens, "n_layers": L, "n_heads": h, "query_pad": self.query_pad,
                "key_pad": self.key_pad, "prefix_len": self.prefix_len,
                "weights": base64.b64encode(quantised.contiguous().numpy().tobytes()).decode("ascii")}


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
        """What the page's script reads (the ``gf-data`` element)."""
        return {"title": self.title, "structure": self.structure, "views": [v.to_json() for v in self.views],
                "shapes": self.shapes, "params": self.params, "notes": self.notes,
                "generation": self.generation, "interpret": self.interpret, "labels": js_labels(self.lang)}


def _params_by_part(model: nn.Module) -> dict[str, int]:
    """Trainable parameters of each top-level part; a shared (tied) matrix counts at its first owner."""
    seen: set[int] = set()
    parts: dict[str, int] = {}
    for name, child in [("", model), *model.named_children()]:
        fresh = [p for p in (child.parameters() if name else model.parameters(recurse=False))
                 if p.requires_grad and id(p) not in seen]
        seen.update(map(id, fresh))
        if n := sum(p.numel() for p in fresh):
            parts[name or "(model)"] = n
    return parts


def _stack(weights: list[torch.Tensor]) -> torch.Tensor:
    """[(1, h, Tq, Tk)] per layer -> (L, h, Tq, Tk)."""
    return torch.stack([w[0] for w in weights]).detach().float().cpu()


@torch.no_grad()
def gather(model: nn.Module, tokenizer: Any, text: str | Sequence[int] | torch.Tensor,
           target: str | Sequence[int] | torch.Tensor | None = None, *, prefix_len: int | None = None,
           pad_to: int | None = None, start_id: int | None = None, generate: int = 16, top_k: int = 5,
           max_tokens: int = 128, add_special_tokens: bool | None = None, title: str | None = None,
           logit_lens: bool = False, head_scores: bool = False, ablation: bool = False,
           lang: str = "en") -> ReportData:
    """Run the model once with attention weights on and collect what :func:`write_report` shows (arguments
    as there); the views hold (L, h, Tq, Tk) weights. The model's training mode is restored."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "arch"):
        raise ArgumentTypeError(f"model must be a glassformer TransformerLM or EncoderDecoder, "
                                f"got {type(model).__name__}")
    check_report_options(max_tokens=max_tokens, generate=generate, top_k=top_k, pad_to=pad_to)
    lang = resolve_lang(lang)
    structure = "encoder-decoder" if config.arch == "encoder-decoder" else config.attn
    notes: list[str] = []
    ids = to_ids(text, tokenizer, "text", add_special_tokens)  # never empty
    eos = special_id(tokenizer, "eos")
    if config.arch == "encoder-decoder" and isinstance(text, str) and eos is not None and ids[-1] != eos:
        ids.append(eos)  # a source ends with eos, as in glassformer's seq2seq data
    ids = cap_ids(ids, max_tokens, "text", notes, lang)
    tgt = None if target is None else cap_ids(to_ids(target, tokenizer, "target"), max_tokens, "target", notes, lang)
    pad_id = pad_id_for(tokenizer)
    was_training = model.training
    model.eval()
    try:
        if config.arch == "encoder-decoder":
            views, shapes, generation = _gather_encdec(model, tokenizer, ids, tgt, pad_to, pad_id, start_id,
                                                       prefix_len, generate, top_k, notes, lang)
            interpret = None
            if logit_lens or head_scores or ablation:
                notes.append(tr("note.interpret_encdec", lang))
        else:
            views, shapes, generation, (x, pad, prefix, tokens) = _gather_lm(
                model, tokenizer, ids, tgt, pad_to, pad_id, prefix_len, generate, top_k, notes, lang)
            specials = getattr(tokenizer, "specials", None) or ()
            low = len(specials) if specials and special_id(tokenizer, specials[0]) == 0 else 0  # skip leading specials
            interpret = gather_interpret(model, x, tokens, lambda ids: token_labels(ids, tokenizer), lens=logit_lens,
                                         heads=head_scores, ablation=ablation, low=low, notes=notes, lang=lang,
                                         bos=special_id(tokenizer, "bos"), pad=pad, prefix_len=prefix)
    finally:
        model.train(was_training)
    params = count_params(model)
    dims = (tr("report.dims_encdec", lang, enc=config.n_enc, dec=config.n_dec) if config.arch == "encoder-decoder"
            else tr("report.dims_lm", lang, layers=config.n_layers))
    shown_structure = tr(f"structure.{structure}", lang)  # the page's data keeps the English name
    summary = tr("report.summary", lang, model=type(model).__name__, structure=shown_structure, dims=dims,
                 heads=config.n_heads, d_model=config.d_model, params=f"{params:,}")
    return ReportData(title=title or tr("report.title", lang, structure=shown_structure),
                      structure=tr(f"structure.{structure}", "en"), summary=summary, views=views, shapes=shapes,
                      config=config.to_dict(), params=params, params_by_part=_params_by_part(model),
                      generation=generation, notes=notes, interpret=interpret, lang=lang)


def _gather_lm(model, tokenizer, ids, tgt, pad_to, pad_id, prefix_len, generate, top_k, notes, lang="en"):
    attn = model.config.attn
    if attn == "prefix":
        if tgt is None and prefix_len is None:
            notes.append(tr("note.no_target_prefix", lang))
        prefix_len = len(ids) if prefix_len is None else prefix_len
        ids = ids + (tgt or [])
        prefix_len = check_prefix_len(prefix_len, len(ids), batch=1)
        if isinstance(prefix_len, torch.Tensor):  # a (1,) tensor: the report shows one row
            prefix_len = int(prefix_len[0])
    elif tgt is not None:
        raise GlassformerError(f"target is used by prefix-LM and encoder-decoder models; this model is "
                               f"attn={attn!r} (put the whole input in text)")
    elif prefix_len is not None:
        raise GlassformerError(f"prefix_len is only meaningful for attn='prefix' models; this model is attn={attn!r}")
    real = ids
    ids, pad = pad_ids(ids, pad_to, pad_id)
    x = torch.tensor([ids], device=next(model.parameters()).device)
    pad_t = torch.tensor([pad], device=x.device) if any(pad) else None
    _, weights = model(x, pad=pad_t, prefix_len=prefix_len, return_attn=True)
    tokens = token_labels(ids, tokenizer, pad)
    caption = tr(f"caption.{attn}", lang, prefix_len=prefix_len) + (tr("caption.padded", lang) if any(pad) else "")
    views = [AttentionView("self", tr("view.self", lang), caption, tokens, tokens, _stack(weights), pad, pad,
                           prefix_len if attn == "prefix" else None)]
    shapes = shape_trace(model, x, depth=2, pad=pad_t, prefix_len=prefix_len)
    generation = None
    if generate and attn != "bidirectional":
        options = {"prefix_len": prefix_len} if attn == "prefix" else {}
        if tgt is not None:  # the model's own answer to the prefix, as long as the target: compare the two
            real, generate = real[:prefix_len], min(generate, len(tgt))
            notes.append(tr("note.trace_target", lang, n=len(tgt)))
        generation = generation_trace(model, tokenizer, real, generate, top_k, notes, lang, **options)
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
        generation = generation_trace(model, tokenizer, src, steps, top_k, notes, lang, decoder_start_token_id=start)
    if tgt is None:
        tgt = generation["ids"] if generation else []
        notes.append(tr("note.no_target_encdec" if generation else "note.no_target_encdec_alone", lang))
    src, src_pad = pad_ids(src, pad_to, pad_id)
    device = next(model.parameters()).device
    s = torch.tensor([src], device=device)
    t = torch.tensor([[start] + tgt], device=device)
    src_pad_t = torch.tensor([src_pad], device=device) if any(src_pad) else None
    _, log = model(s, t, src_pad=src_pad_t, return_attn=True)
    src_tokens = token_labels(src, tokenizer, src_pad)
    tgt_tokens = token_labels(t[0].tolist(), tokenizer)
    tgt_pad = [False] * len(tgt_tokens)
    padded = tr("caption.padded_source", lang) if any(src_pad) else ""
    views = [AttentionView("enc", tr("view.enc", lang), tr("caption.enc", lang) + padded,
                           src_tokens, src_tokens, _stack(log["enc"]), src_pad, src_pad),
             AttentionView("self", tr("view.dec", lang), tr("caption.dec", lang),
                           tgt_tokens, tgt_tokens, _stack(log["self"]), tgt_pad, tgt_pad),
             AttentionView("cross", tr("view.cross", lang), tr("caption.cross", lang) + padded,
                           tgt_tokens, src_tokens, _stack(log["cross"]), tgt_pad, src_pad)]
    shapes = shape_trace(model, s, t, depth=2, src_pad=src_pad_t)
    return views, shapes, generation



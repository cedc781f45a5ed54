"""A generation trace: at every step, what the model saw, its top candidates and what was chosen."""

import html
from typing import Any

from ..errors import GlassformerError
from ..io.checks import check_int
from ..io.textwidth import clip, display_width, pad
from .api import PromptLike, _eval_mode, iter_steps, setup_generation
from .protocol import Generative


class GenerationTrace(list):
    """The list of step records :func:`trace_generation` returns; in Jupyter it shows as a table."""

    def _repr_html_(self) -> str:
        """Jupyter's hook: one row per step, the choice in bold."""
        rows = []
        for r in self:
            top = r.get("top_k_text", r["top_k"])
            cells = "".join(
                f"<td>{'<b>' if i == r['chosen'] else ''}<code>{html.escape(repr(piece))}</code> {p:.3f}"
                f"{'</b>' if i == r['chosen'] else ''}</td>"
                for (piece, p), (i, _) in zip(top, r["top_k"], strict=True))
            context = html.escape(repr(r.get("context_text", r["context"]))[-40:])
            chosen = html.escape(repr(r.get("chosen_text", r["chosen"])))
            rows.append(f"<tr><td>{r['step']}</td><td><code>{context}</code></td>"
                        f"<td><code>{chosen}</code> {r['chosen_probability']:.3f}</td>{cells}</tr>")
        width = max((len(r["top_k"]) for r in self), default=0)
        head = "".join(f"<th>#{k + 1}</th>" for k in range(width))
        return (f"<table><thead><tr><th>step</th><th>context (end)</th><th>chosen</th>{head}</tr></thead>"
                f"<tbody>{''.join(rows)}</tbody></table>")


def trace_generation(model: Generative, ids: PromptLike, max_new_tokens: int = 12, top_k: int = 4,
                     tokenizer: Any = None, **options: Any) -> GenerationTrace:
    """Generate from one prompt and record each step (greedy by default; no beam search).

    ``top_k``: candidates recorded per step, not a filter (that is ``sample_top_k``). Returns a
    :class:`GenerationTrace`, one dict per step: ``step``, ``context`` (the ids the model saw), ``chosen``,
    ``chosen_probability``, ``top_k`` [(id, probability)] best first, from the distribution the choice
    was drawn from; with a tokenizer also ``context_text``, ``chosen_text``, ``top_k_text``."""
    check_int("top_k", top_k, 1)
    if "sample_top_k" in options:
        options["top_k"] = options.pop("sample_top_k")
    records = GenerationTrace()
    with _eval_mode(model):
        setup = setup_generation(model, ids, max_new_tokens=max_new_tokens, tokenizer=tokenizer, **options)
        decoder = setup.decoder
        if decoder.tokens.shape[0] != 1:
            raise GlassformerError(f"trace_generation follows one prompt; got {decoder.tokens.shape[0]} rows")
        for number, step in enumerate(iter_steps(setup), start=1):
            seen_until = decoder.length - 1  # the context excludes the token just chosen
            context = decoder.tokens[0, max(0, seen_until - decoder.window):seen_until].tolist()
            probs = step.scores[0].softmax(dim=-1)
            top_p, top_ids = probs.topk(min(top_k, probs.shape[-1]))
            chosen = int(step.tokens[0])
            record: dict[str, Any] = {
                "step": number, "context": context, "chosen": chosen,
                "chosen_probability": float(probs[chosen]),
                "top_k": [(int(i), float(p)) for p, i in zip(top_p, top_ids, strict=True)],
            }
            if tokenizer is not None:
                record["context_text"] = tokenizer.decode(context, skip_special_tokens=False)
                record["chosen_text"] = tokenizer.id_to_token(chosen)
                record["top_k_text"] = [(tokenizer.id_to_token(i), p) for i, p in record["top_k"]]
            records.append(record)
    return records


def format_trace(records: list[dict[str, Any]], context_width: int = 30) -> str:
    """A plain-text table of a :func:`trace_generation` result, one line per step: step, context (its
    end, at most ``context_width`` display columns), choice (probability) and candidates."""
    check_int("context_width", context_width, 4)
    rows = []
    for r in records:
        context = repr(r.get("context_text", r["context"]))
        if display_width(context) > context_width:  # the end of the context is what the model just read
            context = "…" + clip(context, context_width - 1, keep="end")
        chosen = f"{r.get('chosen_text', r['chosen'])!r} ({r['chosen_probability']:.3f})"
        candidates = [f"{piece!r}:{p:.3f}" for piece, p in r.get("top_k_text", r["top_k"])]
        rows.append((r["step"], context, chosen, candidates))
    context_w = max((display_width(c) for _, c, _, _ in rows), default=0)
    chosen_w = max((display_width(c) for _, _, c, _ in rows), default=0)
    candidate_w = max((display_width(c) for *_, cs in rows for c in cs), default=0)
    return "\n".join(
        f"{step:>3}  {pad(context, context_w, '>')}  -> {pad(chosen, chosen_w)}   "
        + "  ".join(pad(c, candidate_w) for c in candidates).rstrip()
        for step, context, chosen, candidates in rows)

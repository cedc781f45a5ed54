"""write_report: one self-contained, offline HTML page (everything inline, no network by its Content-Security-Policy)
of what a model does with one input: every head's attention, the forward pass's shapes, the generation trace."""

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .i18n import text as tr
from .page import asset, page_end, page_start, shown_token, write_page
from .report_gather import ReportData, gather
from .report_interpret import interpret_html
from .report_tokens import check_report_options

__all__ = ["Report", "check_report_options", "gather", "render_html", "report_html", "write_report"]


def _table(rows: list[tuple[str, str]], cls: str, head: tuple[str, str]) -> str:
    body = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in rows)
    return (f'<table class="{cls}"><thead><tr><th>{html.escape(head[0])}</th><th>{html.escape(head[1])}</th>'
            f"</tr></thead><tbody>{body}</tbody></table>")


def _generation_html(gen: dict[str, Any], lang: str = "en") -> str:
    rows = []
    for n, step in enumerate(gen["steps"], start=1):
        cells = []
        for cand in step["candidates"]:
            chosen = " gf-chosen" if cand["id"] == step["chosen"] else ""
            bar = f'<span class="gf-bar" style="width:{100 * cand["p"]:.1f}%"></span>'
            cells.append(f'<td class="gf-cand{chosen}" title="id {cand["id"]}">{bar}<span class="gf-cand-text">'
                         f'<code>{shown_token(cand["label"])}</code> {cand["p"]:.3f}</span></td>')
        chosen_label = shown_token(step["chosen_label"])
        rows.append(f'<tr class="gf-step"><td>{n}</td><td><code>{chosen_label}</code></td>{"".join(cells)}</tr>')
    head = "".join(f"<th>#{k + 1}</th>" for k in range(gen["top_k"]))
    return (f'<p>{html.escape(tr("generation.continuation", lang))} <code class="gf-continuation">'
            f'{html.escape(gen["continuation"])}</code></p>'
            f'<table class="gf-generation"><thead><tr><th>{html.escape(tr("generation.step", lang))}</th>'
            f'<th>{html.escape(tr("generation.chosen", lang))}</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


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
    return f"""{page_start(data.title, lang, script=asset("report.js"))}
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
{interpret_html(data.interpret, shown_token, lang) if data.interpret else ""}
<section id="gf-shapes"><h2>{label("section.shapes")}</h2>
<p>{label("shapes.intro")}</p>
{_table(shape_rows, "gf-shape-table", (tr("shapes.step", lang), tr("shapes.shape", lang)))}</section>
<section id="gf-config"><h2>{label("section.model")}</h2>
<p>{label("model.params", params=f"{data.params:,}")}</p>
{_table(part_rows, "gf-param-table", (tr("model.part", lang), tr("model.parameters", lang)))}
{_table(config_rows, "gf-config-table", (tr("model.field", lang), tr("model.value", lang)))}</section>
{page_end(label("footer"), "gf-data", data.to_json(), asset("report.js"))}"""


def report_html(model: nn.Module, tokenizer: Any, text: str | Sequence[int] | torch.Tensor,
                target: str | Sequence[int] | torch.Tensor | None = None, **kwargs: Any) -> str:
    """The report page as a string; arguments as for :func:`write_report`."""
    return render_html(gather(model, tokenizer, text, target, **kwargs))


def write_report(model: nn.Module, tokenizer: Any, text: str | Sequence[int] | torch.Tensor,
                 target: str | Sequence[int] | torch.Tensor | None = None, out: str | Path = "report.html",
                 **kwargs: Any) -> Path:
    """Write a self-contained HTML report of ``model`` (a TransformerLM or EncoderDecoder) reading ``text`` (text,
    or ids when ``tokenizer`` is None) to ``out``; returns the path. ``target``: an encoder-decoder's target or a
    prefix-LM's continuation. Keyword options (``prefix_len``, ``pad_to``, ``start_id``, ``generate``, ``top_k``,
    ``max_tokens``, ``add_special_tokens``, ``title``, ``lang``, ``logit_lens``, ``head_scores``, ``ablation``):
    see docs/learn/report.md.
    """
    return Report(report_html(model, tokenizer, text, target, **kwargs)).save(out)


class Report:
    """A report page (``html``, as :func:`report_html` returns it) held in memory: shown in Jupyter in a
    sandboxed ``<iframe>``, written by ``save(path)``."""

    def __init__(self, html: str):
        self.html = html

    @classmethod
    def build(cls, model: nn.Module, tokenizer: Any, text: str | Sequence[int] | torch.Tensor,
              target: str | Sequence[int] | torch.Tensor | None = None, **kwargs: Any) -> "Report":
        """The report of ``model`` reading ``text``; arguments as for :func:`write_report`."""
        return cls(report_html(model, tokenizer, text, target, **kwargs))

    @classmethod
    def open(cls, path: str | Path) -> "Report":
        """A report page written earlier (by :func:`write_report` or ``glassformer inspect``)."""
        return cls(Path(path).read_text(encoding="utf-8"))

    def save(self, path: str | Path) -> Path:
        """Write the page to ``path`` (its folder is created); returns the path."""
        return write_page(path, self.html, "report")

    def _repr_html_(self) -> str:
        """Jupyter's hook: the page in a sandboxed iframe."""
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" sandbox="allow-scripts" '
                'style="width: 100%; height: 720px; border: 1px solid #ddd" title="glassformer report"></iframe>')

    def __repr__(self) -> str:
        return f"Report({len(self.html):,} characters of HTML)"

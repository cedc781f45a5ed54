"""Feature pages of a sparse autoencoder (or of one layer of transcoders): one self-contained, offline HTML page
listing the features of :func:`glassformer.interpret.sae.feature_summary` (drawn by report_assets/sae.js)."""

import html
import math
from pathlib import Path
from typing import Any

from .i18n import js_labels, resolve_lang
from .i18n import text as tr
from .page import asset, page_end, page_start, write_page

# (metric, format); each metric's label is the catalogue's sae.metric.<metric> (glassformer.viz.i18n)
METRIC_NAMES = (("nmse", ".3f"), ("explained_variance", ".3f"), ("mse", ".4g"), ("l0", ".1f"), ("dead", "d"),
                ("dense", "d"), ("ce_clean", ".4f"), ("ce_sae", ".4f"), ("ce_replaced", ".4f"), ("ce_zero", ".4f"),
                ("ce_zero_mlps", ".4f"), ("ce_recovered", ".3f"), ("tokens", ",d"))


def _metrics_table(metrics: dict[str, Any], lang: str = "en") -> str:
    rows = []
    for key, fmt in METRIC_NAMES:
        value = metrics.get(key)
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            continue
        tokens = metrics.get("tokens")  # "dead" names its sample: these tokens, not the feature list's
        label = html.escape(tr(f"sae.metric.{key}", lang, tokens=f"{tokens:,}" if isinstance(tokens, int) else "?"),
                            quote=False)
        rows.append(f'<tr data-metric="{key}"><td>{label}</td><td>{format(value, fmt)}</td></tr>')
    return f'<table class="gf-sae-metrics"><tbody>{"".join(rows)}</tbody></table>' if rows else ""


def feature_pages_html(summary: dict[str, Any], *, metrics: dict[str, Any] | None = None,
                       title: str | None = None, lang: str = "en") -> str:
    """The page for ``summary`` (from ``feature_summary``) as one HTML string, its words in ``lang``."""
    lang = resolve_lang(lang)

    def label(key: str, **fields: Any) -> str:
        return html.escape(tr(key, lang, **fields))

    title = title or tr("sae.title", lang, hook=summary.get("hook", ""))
    live = len(summary["features"])
    facts = tr("sae.facts_transcoder" if "layer" in summary else "sae.facts", lang, hook=summary.get("hook", "?"),
               kind=summary.get("kind", "?"), features=f"{summary['d_sae']:,}", live=f"{live:,}",
               tokens=f"{summary['tokens']:,}", dead=f"{len(summary['dead']):,}", layer=summary.get("layer", "?"))
    note = summary.get("logit_note")
    data = {**summary, "labels": js_labels(lang, "sae.js.")}
    return f"""{page_start(title, lang, asset("sae.css"), script=asset("sae.js"))}
<header>
<h1>{html.escape(title)}</h1>
<p class="gf-summary">{html.escape(facts)}</p>
{f'<ul class="gf-notes"><li>{html.escape(note)}</li></ul>' if note else ""}
</header>
<section id="gf-sae-quality"><h2>{label("sae.quality")}</h2>
{_metrics_table(metrics or {}, lang)}</section>
<section id="gf-sae"><h2>{label("sae.features")}</h2>
<div class="gf-controls">
<input id="gf-sae-search" type="search" placeholder="{label("sae.search_placeholder")}"
 aria-label="{label("sae.search")}">
<select id="gf-sae-sort" aria-label="{label("sae.sort")}">
<option value="frequency">{label("sae.sort.frequency")}</option><option value="max">{label("sae.sort.max")}</option>
<option value="id">{label("sae.sort.id")}</option></select>
<span id="gf-sae-count" class="gf-caption"></span>
</div>
<div class="gf-sae-layout"><ol id="gf-sae-list"></ol><article id="gf-sae-feature"></article></div>
<noscript>{label("sae.noscript")}</noscript>
</section>
{page_end(label("footer"), "gf-sae-data", data, asset("sae.js"))}"""


def write_feature_pages(summary: dict[str, Any], out: str | Path, *, metrics: dict[str, Any] | None = None,
                        title: str | None = None, lang: str = "en") -> Path:
    """Write the feature pages of ``summary`` to the file ``out`` (its folder is created), in ``lang``."""
    return write_page(out, feature_pages_html(summary, metrics=metrics, title=title, lang=lang))


def write_transcoder_pages(summaries: list[dict[str, Any]], out_dir: str | Path, *,
                           metrics: dict[str, Any] | None = None, lang: str = "en") -> list[Path]:
    """One page per layer, ``out_dir/features-L{i}.html``, for the summaries of
    :func:`glassformer.interpret.transcoders.transcoder_feature_summaries`; ``metrics``: those of
    ``evaluate_transcoders`` (each page shows its layer's and the whole replacement's)."""
    pages, metrics = [], metrics or {}
    for summary in summaries:
        layer = int(summary["layer"])
        shown = {key: metrics[key][layer] for key in ("nmse", "explained_variance", "l0", "dead") if key in metrics}
        shown.update({key: metrics[key] for key in ("ce_clean", "ce_replaced", "ce_recovered", "tokens")
                      if key in metrics})
        if "ce_zero" in metrics:
            shown["ce_zero_mlps"] = metrics["ce_zero"]
        pages.append(write_feature_pages(summary, Path(out_dir) / f"features-L{layer}.html", metrics=shown,
                                         title=tr("sae.transcoder_title", lang, layer=layer), lang=lang))
    return pages

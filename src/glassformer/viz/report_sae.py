"""Feature pages of a sparse autoencoder: one self-contained, offline HTML page per SAE.

The page lists the features that fired on held-out text, most frequent first (sortable by largest
activation or id, searchable by id or by the tokens they fire on); a click (or ``#feature-12`` in the
address) shows one feature: its frequency and largest activation, a histogram of its activations, its
top-activating contexts with every token shaded by the feature's activation (the peak outlined), and
the output tokens its direction pushes up and down. Data from
:func:`glassformer.interpret.sae.feature_summary`; same machinery and Content-Security-Policy as the
report (``glassformer.viz.report``): everything inline, no request leaves the page.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from ..fileio import atomic_write_text
from .report import CSP, _asset, _script_json

METRIC_NAMES = (("explained_variance", "variance explained", ".3f"), ("mse", "MSE per element", ".4g"),
                ("l0", "L0 (features per token)", ".1f"), ("dead", "dead features", "d"),
                ("dense", "dense features (> 10% of tokens)", "d"), ("ce_clean", "loss, model as is", ".4f"),
                ("ce_sae", "loss, SAE spliced in", ".4f"), ("ce_zero", "loss, activation zeroed", ".4f"),
                ("ce_recovered", "loss recovered", ".3f"), ("tokens", "held-out tokens", ",d"))


def _metrics_table(metrics: dict[str, Any]) -> str:
    rows = []
    for key, label, fmt in METRIC_NAMES:
        value = metrics.get(key)
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            continue
        rows.append(f'<tr data-metric="{key}"><td>{html.escape(label)}</td><td>{format(value, fmt)}</td></tr>')
    return f'<table class="gf-sae-metrics"><tbody>{"".join(rows)}</tbody></table>' if rows else ""


def feature_pages_html(summary: dict[str, Any], *, metrics: dict[str, Any] | None = None,
                       title: str | None = None) -> str:
    """The page for ``summary`` (from ``feature_summary``) as one HTML string."""
    title = title or f"SAE features: {summary.get('hook', '')}"
    live = len(summary["features"])
    facts = (f"hook {summary.get('hook', '?')} · {summary.get('kind', '?')} SAE · {summary['d_sae']:,} features, "
             f"{live:,} fired on {summary['tokens']:,} held-out tokens, {len(summary['dead']):,} did not")
    note = summary.get("logit_note")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{html.escape(title)}</title>
<style>
{_asset("report.css")}
{_asset("sae.css")}
</style>
</head>
<body>
<header>
<h1>{html.escape(title)}</h1>
<p class="gf-summary">{html.escape(facts)}</p>
{f'<ul class="gf-notes"><li>{html.escape(note)}</li></ul>' if note else ""}
</header>
<section id="gf-sae-quality"><h2>Quality on held-out text</h2>
{_metrics_table(metrics or {})}</section>
<section id="gf-sae"><h2>Features</h2>
<div class="gf-controls">
<input id="gf-sae-search" type="search" placeholder="feature id or token, e.g. 12 or ROMEO"
 aria-label="search features">
<select id="gf-sae-sort" aria-label="sort features">
<option value="frequency">most frequent first</option><option value="max">largest activation first</option>
<option value="id">by id</option></select>
<span id="gf-sae-count" class="gf-caption"></span>
</div>
<div class="gf-sae-layout"><ol id="gf-sae-list"></ol><article id="gf-sae-feature"></article></div>
<noscript>The feature pages need JavaScript; the data is in the gf-sae-data script element.</noscript>
</section>
<footer>Written by glassformer; self-contained, works offline.</footer>
<script type="application/json" id="gf-sae-data">{_script_json(summary)}</script>
<script>
{_asset("sae.js")}
</script>
</body>
</html>
"""


def write_feature_pages(summary: dict[str, Any], out: str | Path, *, metrics: dict[str, Any] | None = None,
                        title: str | None = None) -> Path:
    """Write the feature pages of ``summary`` to the file ``out`` (atomically; its folder is created)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, feature_pages_html(summary, metrics=metrics, title=title))
    return path

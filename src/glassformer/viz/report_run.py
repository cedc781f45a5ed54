"""write_run_page: one self-contained HTML page of a training run, from its folder.

It reads ``metrics.jsonl`` (the loss curves) and, when the run was watched, the training microscope's
``microscope.jsonl`` and ``microscope.json`` (:mod:`glassformer.interpret.microscope`), and shows:

- the training and validation loss over steps, and the repeated-token probe's loss on each copy;
- every head's previous-token, induction and duplicate-token score and attention entropy as a
  layers x heads heatmap, at the step a slider picks; the best head of each kind per layer over steps;
- the attention patterns of the watched heads on the probe text, at that step;
- the logit lens's loss per layer over steps (a layers x steps heatmap), and the residual-stream and
  weight norms per layer at that step;
- when the run folder has ``attribution.json`` (the induction recipe writes it), attribution patching's
  estimate of every head's patching effect beside the exact effect;
- the phase change of the repeated-copy loss (:func:`~glassformer.interpret.microscope.detect_phase_change`),
  marked on the charts and named in the summary (or "no phase change"), and the in-context-learning
  score over steps;
- when a user measurement recorded a circuit (:func:`~glassformer.interpret.circuits.induction_circuit`),
  the circuit of each snapshot as a graph, switched by the step slider (watching a circuit form).

Charts over steps are SVG drawn here; the heatmaps are drawn by a small inline script from the JSON
data, so that one slider moves them all. As with the model report, nothing is loaded from the network
(a Content-Security-Policy forbids it); the page is readable with 1 head or 48 (cells shrink, the grid
scrolls sideways).
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path
from typing import Any

from ..errors import BadFileError, GlassformerError, MissingFileError
from ..interpret.attribution import ATTRIBUTION
from ..interpret.microscope import META, RECORDS, detect_phase_change, read_records
from .i18n import MESSAGES, resolve_lang
from .i18n import text as tr
from .report import _script_json, _shown, page_start, script_element
from .report_circuit import circuit_svg, is_circuit
from .report_interpret import _head_table

METRICS = "metrics.jsonl"
COLORS = ["#2f5fd0", "#d2392b", "#2a9d5c", "#c77c12", "#7b4bc4", "#168a9c", "#b8377a", "#5b6475"]
KINDS = ("induction", "previous_token", "duplicate", "entropy")  # the heatmaps; their labels: run.kind.*
# The labels the page's script writes (run.js.* in glassformer.viz.i18n; {fields} filled by the script).
JS_LABELS = ("step_of", "block", "after_last", "tooltip")


def is_run_dir(path: str | Path) -> bool:
    """Whether ``path`` is a training run's folder (it has ``metrics.jsonl``) rather than a checkpoint."""
    return (Path(path) / METRICS).is_file()


def _line_chart(series: list[tuple[str, list[tuple[float, float]]]], title: str, y_label: str,
                chart_id: str, width: int = 560, height: int = 240, x_label: str = "step",
                events: list[tuple[float, str]] | None = None, static: bool = False) -> str:
    """An SVG line chart of (label, [(step, value), ...]) series, with a step marker the script moves and
    ``events`` (step, label) drawn as fixed, labelled vertical lines (e.g. the phase change); ``static``:
    an x axis that is not steps (no marker moves)."""
    points = [p for _, s in series for p in s if p[1] is not None and math.isfinite(p[1])]
    if not points:
        return ""
    x0, x1 = min(0.0, min(p[0] for p in points)), max(p[0] for p in points)  # steps: the axis starts at 0
    y0, y1 = min(0.0, min(p[1] for p in points)), max(p[1] for p in points)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)
    left, right, top, bottom = 48, 20, 24, 30
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * ph

    kind = "gf-chart gf-static" if static else "gf-chart"
    parts = [f'<svg class="{kind}" id="{chart_id}" viewBox="0 0 {width} {height}" width="{width}" '
             f'height="{height}" data-x0="{x0}" data-x1="{x1}" data-left="{left}" data-width="{pw}" '
             f'role="img" aria-label="{html.escape(title)}">',
             f'<text x="{left}" y="14" class="gf-chart-title">{html.escape(title)}</text>']
    for k in range(5):  # horizontal grid and y ticks
        y = y0 + (y1 - y0) * k / 4
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" class="gf-grid"/>'
                     f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" class="gf-tick" text-anchor="end">{y:.2g}</text>')
    for k in range(5):
        x = x0 + (x1 - x0) * k / 4
        parts.append(f'<text x="{sx(x):.1f}" y="{height - 12}" class="gf-tick" text-anchor="middle">{x:.0f}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{height - 1}" class="gf-tick" text-anchor="middle">'
                 f'{html.escape(x_label)}</text>'
                 f'<text x="10" y="{top + ph / 2}" class="gf-tick" transform="rotate(-90 10 {top + ph / 2})" '
                 f'text-anchor="middle">{html.escape(y_label)}</text>')
    for n, (label, values) in enumerate(series):
        color = COLORS[n % len(COLORS)]
        shown = [(x, y) for x, y in values if y is not None and math.isfinite(y)]
        path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(shown))
        parts.append(f'<path d="{path}" stroke="{color}" class="gf-line"><title>{html.escape(label)}</title></path>')
        if len(shown) <= 30:  # few points (evaluations): mark each
            parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>' for x, y in shown]
    for step, label in events or []:
        if x0 <= step <= x1:
            parts.append(f'<line class="gf-event" data-step="{step}" x1="{sx(step):.1f}" x2="{sx(step):.1f}" '
                         f'y1="{top}" y2="{top + ph}"/><text x="{sx(step) + 3:.1f}" y="{top + 10}" '
                         f'class="gf-tick">{html.escape(label)}</text>')
    parts.append(f'<line class="gf-marker" x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}"/></svg>')
    legend = "".join(f'<span style="color:{COLORS[n % len(COLORS)]}">&#9644; {html.escape(label)}</span>'
                     for n, (label, _) in enumerate(series))
    return f'<figure class="gf-chart-box">{"".join(parts)}<figcaption class="gf-legend">{legend}</figcaption></figure>'



def _object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object of ``path`` (:func:`glassformer.loaders.load_json`); anything else is one BadFileError."""
    from ..loaders import load_json

    value = load_json(path, what)
    if not isinstance(value, dict):
        raise BadFileError(f"{what} {str(path)!r} must hold a JSON object, got {type(value).__name__}")
    return value


def gather_run(out_dir: str | Path) -> dict[str, Any]:
    """What the page shows, read from the run folder ``out_dir``.

    Raises:
        MissingFileError when ``out_dir`` has no ``metrics.jsonl`` (not a run folder).
    """
    out = Path(out_dir)
    if not is_run_dir(out):
        raise MissingFileError(f"{str(out)!r} is not a training run folder: it has no {METRICS} "
                               "(give a run's out_dir, or a checkpoint folder with --text)")
    from ..training.metrics import read_metrics

    metrics = read_metrics(out / METRICS)
    records = read_records(out / RECORDS, uniform=True)  # the page draws every record alike
    bad = next((k for k in (records[0].get("attention") or {} if records else {})
                if not re.fullmatch(r"\d{1,4}\.\d{1,4}", str(k))), None)
    if bad is not None:
        raise BadFileError(f"{str(out / RECORDS)!r}: attention key {bad[:40]!r} is not 'layer.head' (e.g. '1.0')")
    meta = _object(out / META, "microscope settings") if (out / META).is_file() else {}
    config: dict[str, Any] = {}
    for place in (out / "last" / "config.json", out / "model" / "config.json"):
        if place.is_file():
            config = _object(place, "config file")
            break
    attribution = _object(out / ATTRIBUTION, "attribution file") if (out / ATTRIBUTION).is_file() else None
    return {"name": out.resolve().name, "metrics": metrics, "records": records, "meta": meta, "config": config,
            "attribution": attribution}


def phase_change(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The phase change in the records' repeated-copy loss (:func:`~glassformer.interpret.microscope.
    detect_phase_change`), or None."""
    if not records or "loss_repeat" not in records[0]:
        return None
    return detect_phase_change([r["step"] for r in records], [r["loss_repeat"] for r in records])


def _charts(run: dict[str, Any], lang: str = "en") -> str:
    """The SVG charts over steps: losses, the probe's losses with the best head scores (the phase change
    marked), the in-context-learning score (labels in ``lang``)."""
    metrics, records = run["metrics"], run["records"]
    step = tr("run.axis.step", lang)
    found = phase_change(records)
    events = [(found["step"], tr("run.phase.marker", lang))] if found else []

    def chart(series: list, title: str, y_label: str, chart_id: str) -> str:
        return _line_chart(series, tr(title, lang), tr(y_label, lang), chart_id, x_label=step, events=events)

    train = [(m["step"], m["train_loss"]) for m in metrics if "train_loss" in m]
    val = [(m["step"], m["val_loss"]) for m in metrics if "val_loss" in m]
    charts = [chart([s for s in ((tr("run.series.train", lang), train), (tr("run.series.val", lang), val)) if s[1]],
                    "run.chart.loss", "run.axis.cross_entropy", "gf-chart-loss")]
    if records:
        steps = [r["step"] for r in records]
        probe = [(tr("run.series.first", lang), list(zip(steps, (r["loss_first"] for r in records)))),
                 (tr("run.series.repeat", lang), list(zip(steps, (r["loss_repeat"] for r in records))))]
        charts.append(chart(probe, "run.chart.probe", "run.axis.nats", "gf-chart-probe"))
        best = []
        for kind in ("previous_token", "induction"):
            for layer in range(len(records[0][kind])):
                best.append((tr("run.series.best_layer", lang, kind=tr(f"run.short.{kind}", lang), layer=layer),
                             [(r["step"], max(r[kind][layer])) for r in records]))
        if len(best) <= 8:
            charts.append(chart(best, "run.chart.best_per_layer", "run.axis.score", "gf-chart-best"))
        else:  # many layers: the best head of the whole model per kind
            whole = [(tr("run.series.best_head", lang, kind=tr(f"run.short.{k}", lang)),
                      [(r["step"], max(map(max, r[k]))) for r in records]) for k in ("previous_token", "induction")]
            charts.append(chart(whole, "run.chart.best", "run.axis.score", "gf-chart-best"))
        icl = [(r["step"], r["icl_score"]) for r in records if r.get("icl_score") is not None]
        if icl:
            charts.append(chart([(tr("run.series.icl", lang), icl)], "run.chart.icl", "run.axis.icl", "gf-chart-icl"))
        shown = [r for r in records if r.get("loss_by_position")]
        if shown:  # the per-token loss curve: the first record, the phase change's, the last
            picked = [shown[0], *(r for r in shown if found and r["step"] == found["step"]), shown[-1]]
            picked = list({r["step"]: r for r in picked}.values())
            curves = [(tr("run.series.at_step", lang, step=r["step"]),
                       [(i + 1, v) for i, v in enumerate(r["loss_by_position"])]) for r in picked]
            charts.append(_line_chart(curves, tr("run.chart.by_position", lang), tr("run.axis.nats", lang),
                                      "gf-chart-position", x_label=tr("run.axis.position", lang), static=True))
    return "".join(c for c in charts if c)


STYLE = """
.gf-charts { display: flex; flex-wrap: wrap; gap: 16px; }
.gf-chart { background: #fff; border: 1px solid var(--line); border-radius: 6px; max-width: 100%; height: auto; }
.gf-chart-title { font-size: 13px; font-weight: 600; fill: var(--ink); }
.gf-tick { font-size: 11px; fill: var(--muted); }
.gf-chart-box { margin: 0; max-width: 560px; }
.gf-legend { font-size: 12px; display: flex; flex-wrap: wrap; gap: 4px 12px; font-weight: 600; }
.gf-grid { stroke: #eceef3; }
.gf-line { fill: none; stroke-width: 2; }
.gf-marker { stroke: var(--ink); stroke-dasharray: 3 3; }
.gf-event { stroke: #d2392b; stroke-width: 1.5; }
.gf-circuit-snap figcaption { font-size: 0.85rem; color: var(--muted); }
.gf-slider { position: sticky; top: 0; background: var(--bg); padding: 8px 0; z-index: 2;
  border-bottom: 1px solid var(--line); display: flex; gap: 12px; align-items: center; }
.gf-slider input { flex: 1; }
.gf-heatmaps { display: flex; flex-wrap: wrap; gap: 16px; }
.gf-heatmap { overflow-x: auto; max-width: 100%; }
.gf-heatmap canvas, .gf-snap canvas, .gf-lens canvas { image-rendering: pixelated; border: 1px solid var(--line); }
.gf-snaps { display: flex; flex-wrap: wrap; gap: 12px; }
.gf-snap figcaption, .gf-heatmap figcaption { font-size: 0.85rem; color: var(--muted); }
.gf-norms td, .gf-norms th { padding: 2px 8px; text-align: right; }
.gf-side { display: flex; flex-wrap: wrap; gap: 24px; overflow-x: auto; }
.gf-side figure { margin: 0; }
.gf-head-table td, .gf-head-table th { padding: 2px 6px; text-align: right; font-size: 0.85rem; }
"""

SCRIPT = r"""
(function () {
  const data = JSON.parse(document.getElementById("gf-run-data").textContent);
  const records = data.records, T = data.labels;
  const fill = (message, fields) => message.replace(/\{(\w+)\}/g, (_, name) => fields[name]);
  const slider = document.getElementById("gf-step");
  const label = document.getElementById("gf-step-label");
  function shade(v, lo, hi) {  // white -> accent blue
    const t = Math.max(0, Math.min(1, (v - lo) / ((hi - lo) || 1)));
    return `rgb(${Math.round(255 - 208 * t)},${Math.round(255 - 160 * t)},${Math.round(255 - 47 * t)})`;
  }
  // rows (a list of lists) as cells of cw x ch pixels, shaded between lo and hi; rowLabels and colLabels
  // are drawn in a margin (every k-th column label when they would overlap)
  function grid(canvas, rows, lo, hi, cw, ch, rowLabels, colLabels) {
    const h = rows.length, w = rows[0].length, left = rowLabels ? 30 : 0, top = colLabels ? 14 : 0;
    canvas.width = left + w * cw; canvas.height = top + h * ch;
    canvas.style.width = `${canvas.width}px`; canvas.style.height = `${canvas.height}px`;
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "#fbfbfd"; ctx.fillRect(0, 0, canvas.width, canvas.height);
    rows.forEach((row, i) => row.forEach((v, j) => {
      ctx.fillStyle = v === null ? "#eee" : shade(v, lo, hi); ctx.fillRect(left + j * cw, top + i * ch, cw, ch);
    }));
    ctx.font = "10px sans-serif"; ctx.fillStyle = "#5b6475"; ctx.textBaseline = "middle";
    if (rowLabels) {
      ctx.textAlign = "right";
      const every = Math.ceil(11 / ch);
      rowLabels.forEach((t, i) => { if (i % every === 0) ctx.fillText(t, left - 3, top + i * ch + ch / 2); });
    }
    if (colLabels) {
      ctx.textAlign = "center";
      const widest = Math.max(...colLabels.map((t) => ctx.measureText(t).width)) + 6;
      const every = Math.ceil(widest / cw);
      colLabels.forEach((t, j) => { if (j % every === 0) ctx.fillText(t, left + j * cw + cw / 2, 7); });
    }
    if (cw >= 28 && ch >= 18) {
      ctx.font = "11px sans-serif";
      rows.forEach((row, i) => row.forEach((v, j) => {
        if (v === null) return;
        ctx.fillStyle = (v - lo) / ((hi - lo) || 1) > 0.6 ? "#fff" : "#1d2330";
        ctx.fillText(v.toFixed(2), left + j * cw + cw / 2, top + i * ch + ch / 2);
      }));
    }
  }
  const range = (n, f) => Array.from({length: n}, (_, i) => f(i));
  function heads_cell(n) { return Math.max(10, Math.min(40, Math.floor(560 / n))); }
  function show(index) {
    const r = records[index];
    slider.value = index;
    label.textContent = fill(T.step_of, {step: r.step, n: index + 1, total: records.length});
    document.body.dataset.step = r.step;
    document.querySelectorAll(".gf-heatmap canvas").forEach((c) => {
      const rows = r[c.dataset.kind];
      const hi = c.dataset.kind === "entropy" ? Math.max(...records.map((x) => Math.max(...x.entropy.flat()))) : 1;
      const cw = heads_cell(rows[0].length), ch = Math.max(12, Math.min(24, cw));
      grid(c, rows, 0, hi, cw, ch, range(rows.length, (i) => `L${i}`), range(rows[0].length, String));
      c.gfRows = rows; c.gfCell = [cw, ch]; c.gfStep = r.step;
    });
    document.querySelectorAll(".gf-snap canvas").forEach((c) => {
      const rows = r.attention[c.dataset.head];
      const cell = Math.max(4, Math.min(14, Math.floor(320 / rows.length)));
      grid(c, rows, 0, 1, cell, cell);
    });
    const norms = document.getElementById("gf-norm-rows");
    if (norms) {
      norms.innerHTML = r.resid_norm.map((v, i) => `<tr><td>${i < r.weight_norm.length ? fill(T.block, {block: i}) :
        T.after_last}</td><td>${v.toFixed(2)}</td><td>${i < r.weight_norm.length ? r.weight_norm[i].toFixed(2) :
        ""}</td><td>${r.lens_loss[i].toFixed(3)}</td></tr>`).join("");
    }
    document.querySelectorAll("svg.gf-chart:not(.gf-static)").forEach((svg) => {
      const x0 = +svg.dataset.x0, x1 = +svg.dataset.x1, left = +svg.dataset.left, w = +svg.dataset.width;
      const x = left + (r.step - x0) / ((x1 - x0) || 1) * w;
      const m = svg.querySelector(".gf-marker"); m.setAttribute("x1", x); m.setAttribute("x2", x);
    });
    const lens = document.getElementById("gf-lens-canvas");
    if (lens) lens.dataset.step = r.step;
    document.querySelectorAll(".gf-circuit-snap").forEach((f) => { f.hidden = +f.dataset.index !== index; });
  }
  document.querySelectorAll(".gf-heatmap canvas").forEach((c) => c.addEventListener("mousemove", (e) => {
    const box = c.getBoundingClientRect(), [cw, ch] = c.gfCell;
    const i = Math.floor((e.clientY - box.top - 14) / ch), j = Math.floor((e.clientX - box.left - 30) / cw);
    const v = i >= 0 && j >= 0 && c.gfRows[i] ? c.gfRows[i][j] : undefined;
    c.title = v === undefined ? "" : fill(T.tooltip, {kind: T.kinds[c.dataset.kind], step: c.gfStep, layer: i,
                                                        head: j, value: v});
  }));
  const lens = document.getElementById("gf-lens-canvas");
  if (lens && records.length) {  // layers (rows) x steps (columns), loss shaded against its range
    const rows = records[0].lens_loss.map((_, layer) => records.map((r) => r.lens_loss[layer]));
    const all = rows.flat();
    const cw = Math.max(2, Math.min(16, Math.floor(900 / records.length)));
    const ch = Math.max(6, Math.min(20, Math.floor(400 / rows.length)));
    const labels = range(rows.length, (i) => (i < rows.length - 1 ? `L${i}` : "out"));
    grid(lens, rows.map((row) => row.map((v) => -v)), -Math.max(...all), -Math.min(...all), cw, ch, labels,
         records.map((r) => String(r.step)));
  }
  if (records.length) {
    slider.max = records.length - 1;
    slider.addEventListener("input", () => show(+slider.value));
    show(records.length - 1);
  }
  document.body.dataset.ready = "true";
})();
"""


def _attribution_html(a: dict[str, Any], lang: str = "en") -> str:
    """Attribution patching's per-head estimate beside exact patching (see ``induction_patching``)."""
    scale = max(abs(v) for table in (a["estimate"], a["exact"]) for row in table for v in row) or 1.0

    def top(heads: list) -> str:
        return ", ".join(f"L{layer}H{head} ({effect:+.2f})" for layer, head, effect in heads)

    caption = tr("run.attribution.intro", lang, corrupted=f"{a['corrupted_metric']:.2f}",
                 clean=f"{a['clean_metric']:.2f}", correlation=f"{a['correlation']:.3f}",
                 estimate=top(a["top_estimate"]), exact=top(a["top_exact"]))
    return (f'<section id="gf-attribution"><h2>{html.escape(tr("run.attribution.title", lang))}</h2>'
            f'<p class="gf-caption">{html.escape(caption, quote=False)}</p>'
            f'<div class="gf-side"><figure><figcaption>{html.escape(tr("run.attribution.estimate", lang))}</figcaption>'
            + _head_table(a["estimate"], "gf-head-table gf-estimate", (47, 95, 208), scale, "+.2f", lang)
            + f'</figure><figure><figcaption>{html.escape(tr("run.attribution.exact", lang))}</figcaption>'
            + _head_table(a["exact"], "gf-head-table gf-exact", (47, 95, 208), scale, "+.2f", lang)
            + "</figure></div></section>")


def _circuit_measurement(records: list[dict[str, Any]]) -> str | None:
    """The name of a user measurement that recorded a circuit (a dict with "edges" and "faithfulness")."""
    for name, value in (records[-1].get("measurements") or {}).items() if records else ():
        if is_circuit(value):
            return name
    return None


def _circuits_html(records: list[dict[str, Any]], name: str, lang: str = "en") -> str:
    """The circuit of every record (one SVG each; the step slider shows the one of its step)."""
    figures = []
    for index, record in enumerate(records):
        circuit = (record.get("measurements") or {}).get(name)
        if not is_circuit(circuit):  # a record without it (or a crafted one) draws nothing
            continue
        value = circuit.get("faithfulness")  # null when clean and corrupted agree (nothing to recover)
        caption = tr("run.circuit.caption", lang, step=record["step"], edges=len(circuit["edges"]),
                     total=circuit.get("total_edges", "?"),
                     faithfulness=f"{value:.3f}" if isinstance(value, (int, float)) else "-")
        figures.append(f'<figure class="gf-circuit-snap" data-index="{index}" data-step="{record["step"]}"'
                       f'{"" if index == len(records) - 1 else " hidden"}><figcaption>{html.escape(caption)}'
                       f"</figcaption>{circuit_svg(circuit)}</figure>")
    return (f'<section id="gf-circuits"><h2>{html.escape(tr("run.circuit.title", lang))}</h2>'
            f'<p class="gf-caption">{html.escape(tr("run.circuit.intro", lang, name=name))}</p>'
            f'{"".join(figures)}</section>')


def run_page_html(run: dict[str, Any], lang: str = "en") -> str:
    """The page of a run gathered by :func:`gather_run`: one HTML document, everything inline, its words in
    ``lang`` (``"en"`` or ``"zh"``)."""
    lang = resolve_lang(lang)

    def label(key: str, **fields: Any) -> str:
        return html.escape(tr(key, lang, **fields), quote=False)

    records, meta = run["records"], run["meta"]
    title = tr("run.title", lang, name=run["name"])
    last = run["metrics"][-1]["step"] if run["metrics"] else 0
    c = run["config"]
    shape = (tr("run.shape", lang, layers=c.get("n_layers"), heads=c.get("n_heads"), d_model=c.get("d_model"))
             if c else "")
    summary = tr("run.summary_shape" if shape else "run.summary", lang, steps=last, shape=shape)
    found = phase_change(records)
    if records and "loss_repeat" in records[0]:
        phase = (tr("run.phase.found", lang, step=found["step"], start=f"{found['from']:.2f}",
                    end=f"{found['to']:.2f}", width=found["width"]) if found else tr("run.phase.none", lang))
        summary = f"{summary} {phase}"
    body = [f'<section id="gf-losses"><h2>{label("run.chart.loss")}</h2>'
            f'<div class="gf-charts">{_charts(run, lang)}</div></section>']
    if not records:
        body.append(f'<p class="gf-notes">{tr("run.not_watched", lang)}</p>')  # the message holds <code> tags
    else:
        L, h = len(records[0]["induction"]), len(records[0]["induction"][0])
        heatmaps = "".join(f'<figure class="gf-heatmap"><figcaption>'
                           f'{label("run.heatmap", kind=tr(f"run.kind.{kind}", lang), layers=L, heads=h)}'
                           f'</figcaption><canvas data-kind="{kind}"></canvas></figure>' for kind in KINDS)
        tokens = " ".join(f"<code>{_shown(t)}</code>" for t in meta.get("tokens", []))
        watch = meta.get("watch", {})
        lengths = ", ".join(str(n) for n in watch.get("probe_lengths") or [watch.get("probe_length", "?")])
        snaps = "".join(f'<figure class="gf-snap"><figcaption>'
                        f'{label("run.snapshot", layer=k.split(".")[0], head=k.split(".")[1])}'
                        f'</figcaption><canvas data-head="{html.escape(k)}"></canvas></figure>'
                        for k in records[0]["attention"])
        body.append(f"""<div class="gf-slider"><label for="gf-step">{label("run.slider")}</label>
<input type="range" id="gf-step" min="0" max="{len(records) - 1}" value="{len(records) - 1}">
<span id="gf-step-label"></span></div>
<section id="gf-heads"><h2>{label("run.heads.title")}</h2>
<p class="gf-caption">{label("run.heads.intro")} {label("run.heads.lengths", lengths=lengths)}</p>
<div class="gf-heatmaps">{heatmaps}</div></section>
<section id="gf-attention"><h2>{label("run.snapshots.title")}</h2>
<p class="gf-caption">{label("run.snapshots.intro")}{tokens}</p>
<div class="gf-snaps">{snaps}</div></section>
<section id="gf-lens"><h2>{label("lens.title")}</h2>
<p class="gf-caption">{label("run.lens.intro")}</p><div class="gf-lens"><canvas id="gf-lens-canvas"></canvas></div>
<table class="gf-norms"><thead><tr><th>{label("run.norms.read")}</th><th>{label("run.norms.resid")}</th>
<th>{label("run.norms.weight")}</th><th>{label("run.norms.lens")}</th></tr></thead><tbody id="gf-norm-rows"></tbody>
</table></section>""")
        circuit = _circuit_measurement(records)
        if circuit:
            body.append(_circuits_html(records, circuit, lang))
    if run.get("attribution"):
        body.append(_attribution_html(run["attribution"], lang))
    labels: dict[str, Any] = {key: MESSAGES[lang][f"run.js.{key}"] for key in JS_LABELS}  # the script fills them
    labels["kinds"] = {kind: tr(f"run.short.{kind}", lang) for kind in KINDS}
    data = {"records": records, "meta": meta, "labels": labels}
    return f"""{page_start(title, lang, STYLE, script=SCRIPT)}
<header><h1>{html.escape(title)}</h1><p class="gf-summary">{html.escape(summary)}</p></header>
{"".join(body)}
<footer>{label("run.footer")}</footer>
<script type="application/json" id="gf-run-data">{_script_json(data)}</script>
{script_element(SCRIPT)}
</body>
</html>
"""


def write_run_page(out_dir: str | Path, out: str | Path | None = None, lang: str = "en") -> Path:
    """Write the run page of the run folder ``out_dir`` to ``out`` (default ``out_dir/run.html``), its words
    in ``lang`` (``"en"`` or ``"zh"``).

    Returns:
        The page's path.
    Raises:
        MissingFileError when ``out_dir`` is not a run folder; GlassformerError when ``out`` is a folder.
    """
    from ..fileio import atomic_write, check_output_file

    path = Path(out) if out is not None else Path(out_dir) / "run.html"
    if path.is_dir():
        raise GlassformerError(f"--out {str(path)!r} is a folder; give the HTML file to write")
    inputs = [Path(out_dir) / name for name in (METRICS, RECORDS, META, ATTRIBUTION, "last", "model")]  # what is read
    check_output_file(path, inputs, "--out")  # before reading the run: never an input, a link, a user's file
    lang = resolve_lang(lang)  # before reading the run: a typo fails at once
    text = run_page_html(gather_run(out_dir), lang)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text, inputs=inputs, what="--out")
    return path

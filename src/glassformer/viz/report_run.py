"""write_run_page: one self-contained, offline HTML page of a training run folder: loss curves (SVG) and, when
the run was watched, the microscope's head scores, snapshots, lens and norms at the step a slider picks (run.js)."""

import html
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import BadFileError, MissingFileError
from ..interpret.attribution import ATTRIBUTION
from ..interpret.measurements import detect_phase_change
from ..io.checks import is_int, is_number, shown
from ..io.fileio import check_output_file
from ..io.loaders import load_json, read_records
from ..training.microscope import META, RECORDS
from .i18n import js_labels, resolve_lang
from .i18n import text as tr
from .page import asset, page_end, page_start, shown_token, write_page
from .report_circuit import circuit_svg, is_circuit
from .report_interpret import head_table

METRICS = "metrics.jsonl"
COLORS = ["#2f5fd0", "#d2392b", "#2a9d5c", "#c77c12", "#7b4bc4", "#168a9c", "#b8377a", "#5b6475"]
KINDS = ("induction", "previous_token", "duplicate", "entropy")  # the heatmaps, (layers, heads) each; labels run.kind.*


def is_run_dir(path: str | Path) -> bool:
    """Whether ``path`` is a training run's folder (it has ``metrics.jsonl``) rather than a checkpoint."""
    return (Path(path) / METRICS).is_file()


def _line_chart(series: list[tuple[str, list[tuple[float, float]]]], title: str, y_label: str,
                chart_id: str, width: int = 560, height: int = 240, x_label: str = "step",
                events: list[tuple[float, str]] | None = None, static: bool = False) -> str:
    """An SVG chart of (label, [(step, value), ...]) series with a step marker the script moves, ``events``
    (step, label) as fixed vertical lines; ``static``: the x axis is not steps (no marker)."""
    series = [(label, [(x, y) for x, y in values if y is not None and math.isfinite(y)]) for label, values in series]
    points = [p for _, values in series for p in values]
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
    ticks = [(x0 + (x1 - x0) * k / 4, y0 + (y1 - y0) * k / 4) for k in range(5)]
    parts += [f'<line x1="{left}" x2="{left + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" class="gf-grid"/>'
              f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" class="gf-tick" text-anchor="end">{y:.2g}</text>'
              for _, y in ticks]  # horizontal grid and y ticks
    parts += [f'<text x="{sx(x):.1f}" y="{height - 12}" class="gf-tick" text-anchor="middle">{x:.0f}</text>'
              for x, _ in ticks]
    parts.append(f'<text x="{left + pw / 2}" y="{height - 1}" class="gf-tick" text-anchor="middle">'
                 f'{html.escape(x_label)}</text>'
                 f'<text x="10" y="{top + ph / 2}" class="gf-tick" transform="rotate(-90 10 {top + ph / 2})" '
                 f'text-anchor="middle">{html.escape(y_label)}</text>')
    for n, (label, values) in enumerate(series):
        color = COLORS[n % len(COLORS)]
        path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(values))
        parts.append(f'<path d="{path}" stroke="{color}" class="gf-line"><title>{html.escape(label)}</title></path>')
        if len(values) <= 30:  # few points (evaluations): mark each
            parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>' for x, y in values]
    for step, label in events or []:
        if x0 <= step <= x1:
            parts.append(f'<line class="gf-event" data-step="{step}" x1="{sx(step):.1f}" x2="{sx(step):.1f}" '
                         f'y1="{top}" y2="{top + ph}"/><text x="{sx(step) + 3:.1f}" y="{top + 10}" '
                         f'class="gf-tick">{html.escape(label)}</text>')
    parts.append(f'<line class="gf-marker" x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}"/></svg>')
    legend = "".join(f'<span style="color:{COLORS[n % len(COLORS)]}">&#9644; {html.escape(label)}</span>'
                     for n, (label, _) in enumerate(series))
    return f'<figure class="gf-chart-box">{"".join(parts)}<figcaption class="gf-legend">{legend}</figcaption></figure>'


BY_LAYER = {"lens_loss": 1, "resid_norm": 1, "weight_norm": 0}  # layers + this many values each


def _table(value: Any, rows: int | None = None, columns: int | None = None) -> bool:
    """Whether ``value`` is a non-empty list of equally long non-empty lists (of ``rows`` x ``columns``)."""
    return (isinstance(value, list) and bool(value) and all(isinstance(row, list) and row for row in value)
            and len({len(row) for row in value}) == 1 and rows in (None, len(value))
            and columns in (None, len(value[0])))


def _top_heads(value: Any) -> bool:
    """Whether ``value`` is a list of [layer, head, effect] (attribution patching's strongest heads)."""
    return isinstance(value, list) and all(
        isinstance(t, list) and len(t) == 3 and all(is_int(i) and 0 <= i < 1 << 20 for i in t[:2])
        and is_number(t[2]) and abs(t[2]) < 1e300 for t in value)


Rule = tuple[Callable[[Any], bool], str]  # (is a value valid, what it must be): a key's rule for _check_keys
NUMBER: Rule = (lambda v: v is None or is_number(v), "a number or null")
HEAD_TABLE: Rule = (lambda v: _table(v) and all(is_number(x) for row in v for x in row),
                    "a table of numbers (layers x heads)")
SNAPSHOTS: Rule = (lambda v: isinstance(v, dict) and all(re.fullmatch(r"\d{1,4}\.\d{1,4}", k)
                                                         and _table(t, len(t), len(t)) for k, t in v.items()),
                   "a mapping of 'layer.head' (e.g. '1.0') to square tables")
SETTINGS: dict[str, Rule] = {  # microscope.json's keys the page reads (both may be absent)
    "watch": (lambda v: isinstance(v, dict) and isinstance(v.get("probe_lengths") or [], list),
              "an object (its probe_lengths a list)"),
    "tokens": (lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v), "a list of strings")}
ATTRIBUTION_KEYS: dict[str, Rule] = {"estimate": HEAD_TABLE, "exact": HEAD_TABLE, "correlation": NUMBER,
                                     "top_estimate": (_top_heads, "a list of [layer, head, effect]"),
                                     "top_exact": (_top_heads, "a list of [layer, head, effect]"),
                                     "clean_metric": NUMBER, "corrupted_metric": NUMBER}


def _check_keys(value: dict[str, Any], rules: dict[str, Rule], where: str, optional: tuple[str, ...] = ()) -> None:
    """A BadFileError naming the first key of ``rules`` that ``value`` lacks (``optional`` aside) or holds in
    another form than its rule's."""
    for key, (valid, expected) in rules.items():
        if key not in value and key not in optional:
            raise BadFileError(f"{where} has no {key!r}")
        if key in value and not valid(value[key]):
            raise BadFileError(f"{where}: {key!r} must be {expected}, got {shown(value[key])}")


def _check_records(records: list[dict[str, Any]], file: Path) -> None:
    """What the page draws of each record is there, shaped as the microscope writes it (``read_records(uniform=
    True)`` made every record like the first, its values numbers or null); else a BadFileError naming the key."""
    if not records:
        return
    first, where = records[0], f"the first record of {str(file)!r}"
    _check_keys(first, {"induction": (_table, "a table of layers x heads")}, where)
    layers, heads = len(first["induction"]), len(first["induction"][0])
    table = (lambda v: _table(v, layers, heads), f"a table of {layers} x {heads} (layers x heads) like 'induction'")

    def values(n: int) -> Rule:
        return lambda v: isinstance(v, list) and len(v) == n, f"a list of {n} values"

    rules = {"loss_first": NUMBER, "loss_repeat": NUMBER, **dict.fromkeys(KINDS, table),
             **{key: values(layers + extra) for key, extra in BY_LAYER.items()}, "attention": SNAPSHOTS,
             "icl_score": NUMBER, "loss_by_position": (lambda v: isinstance(v, list) and all(map(NUMBER[0], v)),
                                                       "a list of numbers")}
    _check_keys(first, rules, where, optional=("icl_score", "loss_by_position"))


def _object(path: Path, what: str) -> dict[str, Any]:
    value = load_json(path, what)
    if not isinstance(value, dict):
        raise BadFileError(f"{what} {str(path)!r} must hold a JSON object, got {type(value).__name__}")
    return value


def gather_run(out_dir: str | Path) -> dict[str, Any]:
    """What the page shows, read from the run folder ``out_dir`` (MissingFileError when it has no metrics.jsonl)."""
    out = Path(out_dir)
    if not is_run_dir(out):
        raise MissingFileError(f"{str(out)!r} is not a training run folder: it has no {METRICS} "
                               "(give a run's out_dir, or a checkpoint folder with --text)")
    from ..training.metrics import read_metrics

    metrics = [_floats(m) for m in read_metrics(out / METRICS)]
    records = [_floats(r) for r in read_records(out / RECORDS, uniform=True)]  # the page draws every record alike
    _check_records(records, out / RECORDS)
    meta = _object(out / META, "microscope settings") if (out / META).is_file() else {}
    _check_keys(meta, SETTINGS, f"microscope settings {str(out / META)!r}", optional=tuple(SETTINGS))
    place = next((p for p in (out / "last" / "config.json", out / "model" / "config.json") if p.is_file()), None)
    config = _object(place, "config file") if place else {}
    attribution = _object(out / ATTRIBUTION, "attribution file") if (out / ATTRIBUTION).is_file() else None
    if attribution is not None:
        _check_keys(attribution, ATTRIBUTION_KEYS, f"attribution file {str(out / ATTRIBUTION)!r}")
        attribution = {k: v if k.startswith("top_") else _floats(v) for k, v in attribution.items()}
    return {"name": out.resolve().name, "metrics": metrics, "records": records, "meta": meta, "config": config,
            "attribution": attribution}


def _floats(value: Any) -> Any:
    """Every number of ``value`` (nested too; ``step`` and a user's ``measurements`` aside) as a float: an int too
    large for one is infinity, which the page shows as a gap."""
    if isinstance(value, dict):
        return {k: v if k in ("step", "measurements") else _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    return value


def _best(values: list[Any]) -> float | None:
    """The largest finite number of ``values``; None when there is none (drawn as a gap)."""
    return max((v for v in values if v is not None and math.isfinite(v)), default=None)


def _fixed(value: Any, spec: str) -> str:
    return format(value, spec) if is_number(value) and math.isfinite(value) else "-"


def _charts(run: dict[str, Any], found: dict[str, Any] | None, lang: str = "en") -> str:
    """The SVG charts: losses, probe losses, best head scores, in-context learning, loss by position (``found``)."""
    metrics, records = run["metrics"], run["records"]
    step = tr("run.axis.step", lang)
    events = [(found["step"], tr("run.phase.marker", lang))] if found else []

    def chart(series: list, title: str, y_label: str, chart_id: str) -> str:
        return _line_chart(series, tr(title, lang), tr(y_label, lang), chart_id, x_label=step, events=events)

    losses = [(tr(f"run.series.{k}", lang), [(m["step"], m[f"{k}_loss"]) for m in metrics if f"{k}_loss" in m])
              for k in ("train", "val")]
    charts = [chart([s for s in losses if s[1]], "run.chart.loss", "run.axis.cross_entropy", "gf-chart-loss")]
    if records:
        probe = [(tr(f"run.series.{k}", lang), [(r["step"], r[f"loss_{k}"]) for r in records])
                 for k in ("first", "repeat")]
        charts.append(chart(probe, "run.chart.probe", "run.axis.nats", "gf-chart-probe"))
        best = [(tr("run.series.best_layer", lang, kind=tr(f"run.short.{kind}", lang), layer=layer),
                 [(r["step"], _best(r[kind][layer])) for r in records])
                for kind in ("previous_token", "induction") for layer in range(len(records[0][kind]))]
        if len(best) <= 8:
            charts.append(chart(best, "run.chart.best_per_layer", "run.axis.score", "gf-chart-best"))
        else:  # many layers: the best head of the whole model per kind
            whole = [(tr("run.series.best_head", lang, kind=tr(f"run.short.{k}", lang)),
                      [(r["step"], _best([v for row in r[k] for v in row])) for r in records])
                     for k in ("previous_token", "induction")]
            charts.append(chart(whole, "run.chart.best", "run.axis.score", "gf-chart-best"))
        icl = [(r["step"], r["icl_score"]) for r in records if r.get("icl_score") is not None]
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


def _attribution_html(a: dict[str, Any], lang: str = "en") -> str:
    """Attribution patching's per-head estimate beside exact patching."""
    scale = _best([abs(v) for table in (a["estimate"], a["exact"]) for row in table for v in row]) or 1.0

    def top(heads: list) -> str:
        return ", ".join(f"L{layer}H{head} ({effect:+.2f})" for layer, head, effect in heads)

    caption = tr("run.attribution.intro", lang, corrupted=_fixed(a["corrupted_metric"], ".2f"),
                 clean=_fixed(a["clean_metric"], ".2f"), correlation=_fixed(a["correlation"], ".3f"),
                 estimate=top(a["top_estimate"]), exact=top(a["top_exact"]))
    tables = "".join(f'<figure><figcaption>{html.escape(tr(f"run.attribution.{k}", lang))}</figcaption>'
                     f'{head_table(a[k], f"gf-head-table gf-{k}", (47, 95, 208), scale, "+.2f", lang)}</figure>'
                     for k in ("estimate", "exact"))
    return (f'<section id="gf-attribution"><h2>{html.escape(tr("run.attribution.title", lang))}</h2>'
            f'<p class="gf-caption">{html.escape(caption, quote=False)}</p>'
            f'<div class="gf-side">{tables}</div></section>')


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
    """The page of a run gathered by :func:`gather_run`, its words in ``lang`` ("en" or "zh")."""
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
    found = None
    if records:  # each has its repeated-copy loss (gather_run checked)
        found = detect_phase_change([r["step"] for r in records], [r["loss_repeat"] for r in records])
        phase = (tr("run.phase.found", lang, step=found["step"], start=f"{found['from']:.2f}",
                    end=f"{found['to']:.2f}", width=found["width"]) if found else tr("run.phase.none", lang))
        summary = f"{summary} {phase}"
    body = [f'<section id="gf-losses"><h2>{label("run.chart.loss")}</h2>'
            f'<div class="gf-charts">{_charts(run, found, lang)}</div></section>']
    if not records:
        body.append(f'<p class="gf-notes">{tr("run.not_watched", lang)}</p>')  # the message holds <code> tags
    else:
        L, h = len(records[0]["induction"]), len(records[0]["induction"][0])
        heatmaps = "".join(f'<figure class="gf-heatmap"><figcaption>'
                           f'{label("run.heatmap", kind=tr(f"run.kind.{kind}", lang), layers=L, heads=h)}'
                           f'</figcaption><canvas data-kind="{kind}"></canvas></figure>' for kind in KINDS)
        tokens = " ".join(f"<code>{shown_token(t)}</code>" for t in meta.get("tokens", []))
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
        measured = records[-1].get("measurements") or {}  # a user measurement that recorded a circuit
        if circuit := next((name for name, value in measured.items() if is_circuit(value)), None):
            body.append(_circuits_html(records, circuit, lang))
    if run.get("attribution"):
        body.append(_attribution_html(run["attribution"], lang))
    labels = {**js_labels(lang, "run.js."), "kinds": {kind: tr(f"run.short.{kind}", lang) for kind in KINDS}}
    data = {"records": records, "meta": meta, "labels": labels}
    script = asset("run.js")
    return f"""{page_start(title, lang, asset("run.css"), script=script)}
<header><h1>{html.escape(title)}</h1><p class="gf-summary">{html.escape(summary)}</p></header>
{"".join(body)}
{page_end(label("run.footer"), "gf-run-data", data, script)}"""


def write_run_page(out_dir: str | Path, out: str | Path | None = None, lang: str = "en") -> Path:
    """Write the page of the run folder ``out_dir`` to ``out`` (default ``out_dir/run.html``) in ``lang``; returns
    its path. MissingFileError when ``out_dir`` is not a run folder, GlassformerError when ``out`` is a folder."""
    path = Path(out) if out is not None else Path(out_dir) / "run.html"
    inputs = [Path(out_dir) / name for name in (METRICS, RECORDS, META, ATTRIBUTION, "last", "model")]  # what is read
    check_output_file(path, inputs, "--out")  # before reading the run: never a folder, an input, a user's file
    lang = resolve_lang(lang)  # before reading the run: a typo fails at once
    return write_page(path, run_page_html(gather_run(out_dir), lang), "--out", inputs)

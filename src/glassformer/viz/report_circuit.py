"""A found circuit (:mod:`glassformer.interpret.circuits`) drawn as an inline SVG graph, alone or in an offline page."""

import html
import math
import re
from pathlib import Path
from typing import Any

from ..interpret.circuits import Circuit
from ..io.checks import is_number
from .page import page_start, write_page

SENDER = re.compile(r"embed|L\d{1,4}H\d{1,4}|MLP\d{1,4}")
RECEIVER = re.compile(r"L\d{1,4}H\d{1,4}\.[qkv]|MLP\d{1,4}|logits")
MAX_DRAWN_EDGES = 2_000  # a graph with more is not readable (and a crafted file stays bounded)


def is_circuit(value: Any) -> bool:
    """Whether ``value`` is a circuit as :meth:`Circuit.to_dict` writes it: at most ``MAX_DRAWN_EDGES`` edges
    [sender, receiver, number] with the graph's names."""
    if not isinstance(value, dict) or not isinstance(value.get("edges"), list) or "faithfulness" not in value:
        return False
    edges = value["edges"]
    return len(edges) <= MAX_DRAWN_EDGES and all(
        isinstance(e, list) and len(e) == 3 and isinstance(e[0], str) and isinstance(e[1], str)
        and SENDER.fullmatch(e[0]) is not None and RECEIVER.fullmatch(e[1]) is not None
        and is_number(e[2]) and math.isfinite(e[2]) for e in edges)


def circuit_svg(circuit: Circuit | dict[str, Any], width: int = 640) -> str:
    """An inline SVG of a circuit: components in columns by layer, an arrow per edge (width by |score|; blue
    positive, red negative), q/k/v written at the arrow's end."""
    data = circuit.to_dict() if isinstance(circuit, Circuit) else circuit
    edges = data["edges"]
    if not edges:
        return '<svg class="gf-circuit" xmlns="http://www.w3.org/2000/svg" width="160" height="30"><text x="4" ' \
               'y="20">no edges</text></svg>'

    def node_of(name: str) -> str:
        return name.split(".")[0]

    def column(node: str) -> int:
        if node == "embed":
            return 0
        if node == "logits":
            return 10_000
        layer = int(node[3:]) if node.startswith("MLP") else int(node[1:node.index("H")])
        return 2 * layer + (2 if node.startswith("MLP") else 1)

    nodes = sorted({node_of(n) for s, r, _ in edges for n in (s, r)}, key=lambda n: (column(n), n))
    columns = sorted({column(n) for n in nodes})
    by_column = {c: [n for n in nodes if column(n) == c] for c in columns}
    height = 60 + 56 * max(len(v) for v in by_column.values())
    x_step = (width - 120) / max(1, len(columns) - 1)
    where = {n: (60 + ci * x_step, 40 + ri * 56) for ci, c in enumerate(columns) for ri, n in enumerate(by_column[c])}
    biggest = max(abs(v) for _, _, v in edges) or 1.0
    parts = [f'<svg class="gf-circuit" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" role="img">',
             '<defs><marker id="gf-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#5b6475"/></marker></defs>']
    for s, r, v in edges:
        (x0, y0), (x1, y1) = where[node_of(s)], where[node_of(r)]
        kind = r.split(".")[1] if "." in r else ""
        color = "#2f5fd0" if v >= 0 else "#d2392b"
        stroke = 1 + 5 * abs(v) / biggest
        parts.append(f'<line class="gf-edge" data-edge="{html.escape(s)}->{html.escape(r)}" x1="{x0 + 28:.1f}" '
                     f'y1="{y0:.1f}" x2="{x1 - 30:.1f}" y2="{y1 + {"q": -8, "k": 0, "v": 8}.get(kind, 0):.1f}" '
                     f'stroke="{color}" stroke-width="{stroke:.1f}" stroke-opacity="0.75" marker-end="url(#gf-arrow)">'
                     f'<title>{html.escape(s)} -> {html.escape(r)}: {v:+.4g}</title></line>')
        if kind:
            parts.append(f'<text x="{x1 - 44:.1f}" y="{y1 + {"q": -10, "k": -2, "v": 14}[kind]:.1f}" '
                         f'font-size="10" fill="#5b6475">{kind}</text>')
    for n in nodes:
        x, y = where[n]
        parts.append(f'<g class="gf-node" data-node="{html.escape(n)}"><rect x="{x - 28:.1f}" y="{y - 14:.1f}" '
                     f'width="56" height="28" rx="6" fill="#f3f5fa" stroke="#2f5fd0"/><text x="{x:.1f}" '
                     f'y="{y + 4:.1f}" text-anchor="middle" font-size="12">{html.escape(n)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def circuit_html(circuit: Circuit, title: str = "Circuit", lang: str = "en") -> str:
    """A self-contained offline page of ``circuit``: the graph (inline SVG), its faithfulness and edges."""
    rows = "".join(f"<tr><td>{html.escape(s)}</td><td>{html.escape(r)}</td><td>{v:+.4g}</td></tr>"
                   for s, r, v in circuit.edges)
    facts = (f"{len(circuit.edges)} of {circuit.total_edges} edges ({circuit.method}); faithfulness "
             f"{circuit.faithfulness:.3f}: metric {circuit.circuit_metric:.4g} with the circuit alone, "
             f"{circuit.clean_metric:.4g} clean, {circuit.corrupted_metric:.4g} corrupted")
    if not math.isfinite(circuit.faithfulness):
        facts += " (clean equals corrupted: nothing to recover)"
    style = ".gf-circuit { background: #fff; border: 1px solid var(--line); border-radius: 6px; max-width: 100%; }"
    return (f"{page_start(title, lang, style)}\n<header><h1>{html.escape(title)}</h1>"
            f'<p class="gf-summary">{html.escape(facts)}</p></header>\n'
            f'<section id="gf-circuit">{circuit_svg(circuit)}</section>\n'
            f'<section><table class="gf-edges"><thead><tr><th>sender</th><th>receiver</th><th>score</th></tr>'
            f"</thead><tbody>{rows}</tbody></table></section>\n</body>\n</html>\n")


def write_circuit_page(circuit: Circuit, out: str | Path, title: str = "Circuit") -> Path:
    """Write :func:`circuit_html` to ``out`` (its folder is created) by :func:`glassformer.io.fileio.atomic_write`: a
    link, a FIFO or a file glassformer did not write there is refused (NotOursError); returns the path."""
    return write_page(out, circuit_html(circuit, title), "circuit page")

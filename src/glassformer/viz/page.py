"""The frame every offline HTML page of glassformer shares (the model report, the run page, the SAE's and the
graph's pages): the head with its Content-Security-Policy (no network; the page's one script allowed by its hash),
the packaged assets, JSON data safe inside a script element, tokens with their whitespace made visible."""

import base64
import hashlib
import html
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from ..io.fileio import atomic_write, check_output_file
from ..io.records import finite_or_null
from .i18n import HTML_LANG


def page_start(title: str, lang: str, *styles: str, script: str | None = None) -> str:
    """The start of every offline page glassformer writes, up to ``<body>``: language, content-security
    policy (no network), report.css then ``styles`` (CSS text). ``script``: the page's one script, the only
    text the policy lets run (by its SHA-256; None: no script runs).
    """
    css = "\n".join([asset("report.css"), *styles])
    policy = CSP
    if script is not None:
        digest = base64.b64encode(hashlib.sha256(script_text(script).encode("utf-8")).digest()).decode("ascii")
        policy = CSP.replace("script-src 'none'", f"script-src 'sha256-{digest}'")
    return f"""<!DOCTYPE html>
<html lang="{HTML_LANG[lang]}">
<head>
<meta charset="utf-8">
<meta name="generator" content="glassformer">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{html.escape(title)}</title>
<style>
{css}
</style>
</head>
<body>"""


def asset(name: str) -> str:
    """The text of ``report_assets/name`` (a page's CSS or script), from the installed package."""
    return resources.files("glassformer.viz").joinpath("report_assets", name).read_text(encoding="utf-8")


def script_json(value: Any) -> str:
    """Strict JSON safe inside a <script> element: no '<', '>' or '&' can end it early, NaN and infinity as null
    (``JSON.parse`` refuses a NaN token: the page would stay blank; its script draws null as a gap)."""
    text = json.dumps(finite_or_null(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def shown_token(token: str) -> str:
    """A token with its whitespace made visible (as the page's script does): ↵ ⇥, and ␣ for spaces alone."""
    token = token.replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")
    return html.escape(token.replace(" ", "␣") if token and not token.strip(" ") else token)


CSP = ("default-src 'none'; script-src 'none'; style-src 'unsafe-inline'; img-src data:; "
       "font-src 'none'; connect-src 'none'")


def script_text(script: str) -> str:
    """The text inside the ``<script>`` element for ``script`` (what the policy's hash covers)."""
    return f"\n{script}\n"


def page_end(footer: str, data_id: str, data: Any, script: str) -> str:
    """The end of a page that :func:`page_start` began with ``script``: the ``footer`` (HTML), ``data`` as JSON in
    the element ``data_id`` (what the script reads), then the script."""
    return (f'<footer>{footer}</footer>\n<script type="application/json" id="{data_id}">{script_json(data)}</script>\n'
            f"<script>{script_text(script)}</script>\n</body>\n</html>\n")


def write_page(path: str | Path, text: str, what: str = "page", inputs: Sequence[str | Path] = ()) -> Path:
    """Write the page ``text`` to ``path`` by :func:`~glassformer.io.fileio.atomic_write` (never a folder, a link,
    one of ``inputs`` or a file glassformer did not write: a NotOursError before its folder is made); returns it."""
    path = check_output_file(path, inputs, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, text, inputs=inputs, what=what)

"""The HTML report in a real browser: Debian's Chromium driven by Playwright, fully offline.

Run alone with ``pytest -m browser``. Needs ``/usr/bin/chromium`` (``.ci/system-deps`` installs it
when run as root); skipped with a reason otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ARGS, CHROMIUM  # noqa: F401 (names other browser tests import from here)
from glassformer import EncoderDecoder, TransformerLM
from glassformer.tokenizers.char import CharTokenizer
from glassformer.viz import write_report

pytestmark = pytest.mark.browser

TOK = CharTokenizer.from_text("abcdefghijklmnopqrstuvwxyz .?我爱北京", specials=["pad", "bos", "eos"])
SMALL = dict(d_model=16, n_heads=4, d_ff=32)



def open_report(browser, path: Path):
    """Load the page; return it with the list of problems seen (console errors, failed requests...)."""
    page = browser.new_page()
    problems: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url}"))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='true']", timeout=120_000)  # ms: a bound on a hang, not a verdict
    assert requests == [path.as_uri()], "the page must load nothing but itself"
    return page, problems


def canvas_image(page, pane):
    return pane.locator("canvas.gf-lines").evaluate("c => c.toDataURL()")


def check_view(page, pane, layers: int, heads: int, queries: int, keys: int) -> None:
    """The view has the right counts, a head click changes the lines, a thumbnail click enlarges it."""
    assert pane.is_visible()
    assert pane.locator("select.gf-layer option").count() == layers
    assert pane.locator("button.gf-head").count() == heads
    assert pane.locator(".gf-queries .gf-tok").count() == queries
    assert pane.locator(".gf-keys .gf-tok").count() == keys
    assert pane.locator("canvas.gf-thumb").count() == layers * heads
    headview = pane.locator(".gf-headview")
    assert headview.get_attribute("data-active-heads") == ",".join(map(str, range(heads)))
    before = canvas_image(page, pane)
    pane.locator("button.gf-head").first.click()
    assert headview.get_attribute("data-active-heads") == ",".join(map(str, range(1, heads)))
    assert canvas_image(page, pane) != before, "hiding head 0 must change the lines drawn"
    pane.locator("button.gf-head").first.click()
    assert canvas_image(page, pane) == before
    if layers > 1:
        pane.locator("select.gf-layer").select_option(str(layers - 1))
        assert headview.get_attribute("data-layer") == str(layers - 1)
        assert canvas_image(page, pane) != before, "another layer must show other weights"
    zoom = pane.locator(".gf-zoom")
    assert zoom.is_hidden()
    pane.locator(f"canvas.gf-thumb[data-layer='{layers - 1}'][data-head='{heads - 1}']").click()
    assert zoom.is_visible()
    assert (zoom.get_attribute("data-layer"), zoom.get_attribute("data-head")) == (str(layers - 1), str(heads - 1))


def screenshot(page, path: Path) -> None:
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_decoder_only(browser, tmp_path):
    model = TransformerLM(vocab_size=TOK.vocab_size, n_layers=2, attn="causal", **SMALL)
    report = write_report(model, TOK, "我爱北京 is beijing", out=tmp_path / "causal.html", generate=4, top_k=3)
    page, problems = open_report(browser, report)
    pane = page.locator(".gf-view[data-view='self']")
    check_view(page, pane, layers=2, heads=4, queries=15, keys=15)
    assert pane.locator(".gf-queries .gf-tok").first.inner_text() == "我"
    # Hovering the last query token leaves only its lines.
    all_lines = canvas_image(page, pane)
    pane.locator(".gf-queries .gf-tok").last.hover()
    assert canvas_image(page, pane) != all_lines
    assert page.locator("#gf-generation tr.gf-step").count() == 4
    assert page.locator("#gf-generation tr.gf-step").first.locator("td.gf-cand").count() == 3
    assert page.locator("table.gf-shape-table tbody tr").count() > 5
    screenshot(page, tmp_path / "causal.png")
    assert problems == []


def test_encoder_only_with_padding(browser, tmp_path):
    model = TransformerLM(vocab_size=TOK.vocab_size, n_layers=3, attn="bidirectional", **SMALL)
    report = write_report(model, TOK, "a cat sat", out=tmp_path / "encoder.html", pad_to=12)
    page, problems = open_report(browser, report)
    pane = page.locator(".gf-view[data-view='self']")
    check_view(page, pane, layers=3, heads=4, queries=12, keys=12)
    assert pane.locator(".gf-keys .gf-tok.gf-pad").count() == 3
    assert pane.locator(".gf-keys .gf-tok.gf-pad").first.inner_text() == "<pad>"
    assert page.locator("#gf-generation").count() == 0
    screenshot(page, tmp_path / "encoder.png")
    assert problems == []


def test_prefix_lm(browser, tmp_path):
    model = TransformerLM(vocab_size=TOK.vocab_size, n_layers=2, attn="prefix", **SMALL)
    report = write_report(model, TOK, "why? ", "because", out=tmp_path / "prefix.html", generate=2)
    page, problems = open_report(browser, report)
    pane = page.locator(".gf-view[data-view='self']")
    check_view(page, pane, layers=2, heads=4, queries=12, keys=12)
    assert pane.locator(".gf-queries .gf-tok.gf-prefix").count() == 5
    assert pane.locator(".gf-queries .gf-tok.gf-boundary").get_attribute("data-index") == "4"
    screenshot(page, tmp_path / "prefix.png")
    assert problems == []


def test_encoder_decoder(browser, tmp_path):
    model = EncoderDecoder(vocab_size=TOK.vocab_size, n_enc=2, n_dec=3, **SMALL)
    report = write_report(model, TOK, "ein hund", "a dog", out=tmp_path / "encdec.html", pad_to=11, generate=3)
    page, problems = open_report(browser, report)
    tabs = page.locator("button.gf-tab")
    assert tabs.all_inner_texts() == ["Encoder self-attention", "Decoder self-attention", "Cross-attention"]
    counts = {"enc": (2, 11, 11), "self": (3, 6, 6), "cross": (3, 6, 11)}  # source: 8 chars + eos + 2 pads
    for n, (key, (layers, queries, keys)) in enumerate(counts.items()):
        tabs.nth(n).click()
        pane = page.locator(f".gf-view[data-view='{key}']")
        for other in counts:
            assert page.locator(f".gf-view[data-view='{other}']").is_visible() == (other == key)
        check_view(page, pane, layers=layers, heads=4, queries=queries, keys=keys)
    cross = page.locator(".gf-view[data-view='cross']")
    assert cross.locator(".gf-keys .gf-tok.gf-pad").count() == 2
    assert cross.locator(".gf-queries .gf-tok").first.inner_text() == "<bos>"
    screenshot(page, tmp_path / "encdec.png")
    assert problems == []


def test_why_sections(browser, tmp_path):
    """The logit lens, head scores and ablation effects of glassformer.interpret render as tables."""
    model = TransformerLM(vocab_size=TOK.vocab_size, n_layers=2, attn="causal", **SMALL)
    report = write_report(model, TOK, "abcabc", out=tmp_path / "why.html", generate=0, logit_lens=True,
                          head_scores=True, ablation=True)
    page, problems = open_report(browser, report)
    lens = page.locator("#gf-lens table.gf-lens")
    assert lens.is_visible()
    assert lens.locator("tbody tr").count() == 3  # before block 0, before block 1, output
    assert lens.locator("tbody tr").first.locator("td.gf-lens-cell").count() == 6
    assert "probability" in page.locator("#gf-lens p").first.inner_text()
    for table in ("gf-prev", "gf-induction", "gf-ablation"):
        rows = page.locator(f"table.{table} tbody tr")
        assert rows.count() == 2 and rows.first.locator("td").count() == 4, table
    screenshot(page, tmp_path / "why.png")
    assert problems == []

"""The SAE feature pages in a real browser (Debian's Chromium driven by Playwright, offline), as
tests/test_report_browser.py does for the report. Run alone with ``pytest -m browser tests/test_sae_browser.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from glassformer import TransformerLM
from glassformer.interpret.sae import ActivationSource, SparseAutoencoder, feature_summary
from glassformer.tokenizers.char import CharTokenizer
from glassformer.viz.report_sae import write_feature_pages
from test_report_browser import open_report

pytestmark = pytest.mark.browser
TEXT = "ROMEO:\nBut soft, what light through yonder window breaks?\n\nJULIET:\nO Romeo, wherefore art thou?\n\n" * 20



@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("sae-pages")
    corpus = folder / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    tok = CharTokenizer.from_text(TEXT)
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=24).eval()
    sae = SparseAutoencoder(d_in=16, d_sae=48, kind="topk", k=4, hook="blocks.1.hook_resid_post")
    source = ActivationSource(model, tok, sae.hook, [corpus], context=24, batch=8, split="val")
    summary = feature_summary(sae, source, windows=16, top=4, bins=12)
    metrics = {"explained_variance": 0.5, "l0": 4.0, "dead": len(summary["dead"]), "ce_recovered": 0.7}
    return write_feature_pages(summary, folder / "features.html", metrics=metrics), summary


def test_feature_pages_list_search_sort_and_show_a_feature(browser, pages):
    path, summary = pages
    features = summary["features"]
    page, problems = open_report(browser, path)
    items = page.locator("#gf-sae-list .gf-sae-item")
    assert items.count() == len(features)
    assert [int(i) for i in items.evaluate_all("els => els.map(e => e.dataset.id)")] == [f["id"] for f in features]
    detail = page.locator("#gf-sae-feature")
    assert detail.get_attribute("data-feature") == str(features[0]["id"])  # the most frequent, at first
    first = features[0]
    assert detail.locator(".gf-sae-context").count() == len(first["contexts"])
    assert detail.locator(".gf-sae-peak").count() == len(first["contexts"])
    assert detail.locator("svg.gf-sae-hist rect").count() == 12
    assert detail.locator(".gf-sae-up tr").count() == 8 and detail.locator(".gf-sae-down tr").count() == 8
    shaded = detail.locator(".gf-sae-context .gf-sae-tok").evaluate_all(
        "els => els.filter(e => Number(e.dataset.act) > 0).every(e => e.style.background.startsWith('rgb'))")
    assert shaded
    assert page.locator('.gf-sae-metrics tr[data-metric="ce_recovered"]').inner_text().endswith("0.700")

    other = features[1]
    items.nth(1).click()
    assert detail.get_attribute("data-feature") == str(other["id"])
    assert page.url.endswith(f"#feature-{other['id']}")

    search = page.locator("#gf-sae-search")
    search.fill(str(other["id"]))
    assert page.locator("#gf-sae-list").get_attribute("data-count") == "1"
    search.fill("no such text zzz")
    assert items.count() == 0
    search.fill("romeo")
    narrowed = int(page.locator("#gf-sae-list").get_attribute("data-count"))
    assert 0 < narrowed <= len(features)
    search.fill("")
    page.locator("#gf-sae-sort").select_option("id")
    ids = [int(i) for i in items.evaluate_all("els => els.map(e => e.dataset.id)")]
    assert ids == sorted(ids)
    page.locator("#gf-sae-sort").select_option("max")
    peaks = {f["id"]: f["max"] for f in features}
    shown = [peaks[int(i)] for i in items.evaluate_all("els => els.map(e => e.dataset.id)")]
    assert shown == sorted(shown, reverse=True)
    assert problems == []
    page.close()


def test_a_feature_address_opens_that_feature(browser, pages):
    path, summary = pages
    wanted = summary["features"][-1]["id"]
    page = browser.new_page()
    page.goto(path.as_uri() + f"#feature-{wanted}")
    page.wait_for_selector("body[data-ready='true']", timeout=120_000)  # ms: a bound on a hang, not a verdict
    assert page.locator("#gf-sae-feature").get_attribute("data-feature") == str(wanted)
    page.close()


def test_the_page_script_speaks_the_pages_language(browser, pages, tmp_path):
    _, summary = pages
    english, problems = open_report(browser, pages[0])
    assert english.locator("#gf-sae-feature h3").inner_text() == f"Feature {summary['features'][0]['id']}"
    path = write_feature_pages(summary, tmp_path / "zh.html", lang="zh")
    page, problems = open_report(browser, path)
    assert not problems
    assert page.locator("#gf-sae-feature h3").inner_text() == f"特征 {summary['features'][0]['id']}"
    assert "个活跃特征" in page.locator("#gf-sae-count").inner_text()
    assert page.locator("#gf-sae-feature h4").first.inner_text().startswith("激活值分布")

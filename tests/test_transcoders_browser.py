"""The transcoder feature pages (one per layer) in a real browser, as tests/test_sae_browser.py drives the SAE's.
Run alone with ``pytest -m browser tests/test_transcoders_browser.py``."""

from __future__ import annotations

import pytest
import torch

from glassformer import TransformerLM
from glassformer.interpret.transcoders import TrainableTranscoders, transcoder_feature_summaries
from glassformer.tokenizers.char import CharTokenizer
from glassformer.viz.report_sae import write_transcoder_pages
from test_report_browser import open_report

pytestmark = pytest.mark.browser
TEXT = "<b>ROMEO</b>:\n</script>But soft, what light? \u202e&amp;\n\n" * 20  # hostile token strings


def test_each_layers_page_lists_its_features_and_the_replacement_metrics(browser, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    tok = CharTokenizer.from_text(TEXT)
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=24).eval()
    tc = TrainableTranscoders(n_layers=2, d_model=16, d_transcoder=32, kind="clt", activation="relu")
    summaries = transcoder_feature_summaries(tc, model, tok, [corpus], 8, context=24, batch=4, top=3)
    metrics = {"nmse": [0.25, 0.125], "explained_variance": [0.75, 0.875], "l0": [9.0, 7.5], "dead": [3, 4],
               "ce_clean": 2.0, "ce_replaced": 2.5, "ce_zero": 4.0, "ce_recovered": 0.75, "tokens": 96}
    pages = write_transcoder_pages(summaries, tmp_path, metrics=metrics)
    assert [p.name for p in pages] == ["features-L0.html", "features-L1.html"]
    for layer, (path, summary) in enumerate(zip(pages, summaries, strict=True)):
        page, problems = open_report(browser, path)
        assert page.locator("#gf-sae-list .gf-sae-item").count() == len(summary["features"])
        assert f"layer {layer} · clt relu transcoder" in page.locator(".gf-summary").inner_text()
        assert page.locator('.gf-sae-metrics tr[data-metric="nmse"]').inner_text().endswith(
            f"{metrics['nmse'][layer]:.3f}")
        assert page.locator('.gf-sae-metrics tr[data-metric="ce_zero_mlps"]').inner_text().endswith("4.0000")
        assert page.locator("script").count() == 2 and page.locator("b").count() == 0  # token text stays text
        assert problems == []

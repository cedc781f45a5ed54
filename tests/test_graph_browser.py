"""The attribution graph page in a real browser (Debian's Chromium driven by Playwright, offline), with token
strings that are markup: they must show as text and never run. Run alone with ``pytest -m browser``."""

from __future__ import annotations

import pytest
import torch

from glassformer import TransformerLM
from glassformer.interpret.graph import attribute
from glassformer.interpret.graph.features import feature_info
from glassformer.interpret.transcoders import random_transcoders
from glassformer.tokenizers.char import CharTokenizer
from glassformer.viz.report_graph import node_id, write_graph_page
from test_report_browser import open_report

pytestmark = pytest.mark.browser
HOSTILE = "</script><img src=x onerror=\"window.pwned=1\">&amp;'"


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    tok = CharTokenizer(sorted(set(HOSTILE + "ab ")), specials=["bos"])
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=64).eval()
    tc = random_transcoders(2, 16, 32, scale=3.0, seed=1)
    ids = [tok.special_tokens["bos"], *tok.encode(HOSTILE)]
    graph = attribute(model, tc, ids, prompt=HOSTILE, max_n_logits=4)
    graph.token_strings = [tok.decode([i], skip_special_tokens=False) for i in ids]
    graph.logit_strings = [tok.decode([int(i)], skip_special_tokens=False) for i in graph.logit_ids]
    kept = graph.prune().node_mask.nonzero(as_tuple=True)[0].tolist()
    features = {node_id(graph, i): graph.node_kind(i)[1::2] for i in kept if graph.node_kind(i)[0] == "feature"}
    info = feature_info(model, tc, features, token_text=lambda t: tok.decode([t], skip_special_tokens=False),
                        ids=torch.tensor(tok.encode(HOSTILE * 3)))
    return write_graph_page(graph, tmp_path_factory.mktemp("graph") / "graph.html", title=HOSTILE, features=info)


def test_graph_page_draws_shows_details_groups_and_runs_no_token(browser, page_file):
    page, problems = open_report(browser, page_file)
    assert page.evaluate("window.pwned") is None
    assert page.locator("img").count() == 0
    assert page.locator("circle.gf-token").count() == len(HOSTILE) + 1
    assert page.locator("circle.gf-logit").count() >= 1
    features = page.locator("circle.gf-feature")
    assert features.count() >= 2
    features.first.click()
    detail = page.locator("#gf-graph-detail").inner_text()
    assert "activation" in detail and "tokens its decoder promotes" in detail
    assert page.locator("#gf-graph-detail .gf-graph-example").count() >= 1
    features.nth(0).click(modifiers=["Shift"])
    features.nth(1).click(modifiers=["Shift"])
    page.fill("#gf-graph-group-name", "<b>mine</b>")
    page.click("#gf-graph-group")
    assert page.locator("#gf-graph-supernodes li").inner_text().startswith("<b>mine</b>: ")
    assert page.locator("circle.gf-super").count() == 1
    assert HOSTILE in page.locator("h1").inner_text()
    assert page.evaluate("window.pwned") is None
    assert problems == []
